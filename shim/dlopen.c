/*
 * dlopen and dlclose: preemption's table of application text is rebuilt
 * after each (sched/preempt.c), and a module with static TLS that a
 * dlopen loads gets its initial image into every thread's TLS.
 *
 * glibc copies a newly loaded initial-exec module's TLS image only into
 * the threads on its own lists, which goshim's TCBs are not on
 * (sched/tls_static.c says why and how the copy is done). The wrapper
 * notes the modules with TLS before the real call and looks again after
 * it: a module that is new there, has a PT_TLS segment and DF_STATIC_TLS
 * in its DT_FLAGS is the only case with more work. Its block on the
 * calling thread comes from __tls_get_addr (dl_iterate_phdr's
 * dlpi_tls_data may still be NULL for the caller right after the load),
 * and the runtime copies the image at that offset into every G's TCB.
 * Without static TLS in the new modules the cost is one dl_iterate_phdr
 * before the call and one after.
 *
 * No lock is held across the real dlopen: a constructor of the module may
 * dlopen again (the inner call does its own modules; the outer one finds
 * them done), and fork may come at any time. Each module is done once
 * (the runtime remembers it until a dlclose unloads it), whichever of two
 * concurrent dlopens of it gets there first.
 *
 * Not covered: dlmopen (not interposed; its modules' static TLS reaches
 * glibc's threads only), constructors that use their module's
 * initial-exec TLS on a thread other than the main one (they run before
 * the copy: sched/tls_static.c), and a dlopen for which the modules with
 * TLS before it cannot all be noted (no memory for the list): then new
 * ones cannot be told from old ones, and nothing is copied.
 */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdlib.h>

#include "shim/shim.h"

/* x86-64's argument of __tls_get_addr (glibc's dl-tls.h). */
typedef struct {
    unsigned long ti_module;
    unsigned long ti_offset;
} tls_index;
extern void *__tls_get_addr(tls_index *ti);

enum { SNAP_INLINE = 32, FRESH_BATCH = 8 };

/* The modules with TLS loaded at one moment, as dl_iterate_phdr names them. */
struct tlsmod {
    uintptr_t base;
    size_t modid;
};
struct snap {
    struct tlsmod *mod; /* inl, or malloc'ed when more than SNAP_INLINE */
    size_t n, cap;      /* n counts past cap: then the snapshot is incomplete */
    struct tlsmod inl[SNAP_INLINE];
};

/* A module new since the snapshot, with static TLS. */
struct fresh {
    uintptr_t base;
    size_t modid;
    const char *name;
    const void *image;
    size_t filesz, memsz;
};
struct after {
    const struct snap *before;
    size_t skip, seen, n; /* the first skip were done by earlier rounds */
    struct fresh f[FRESH_BATCH];
};

static int snap_add(struct dl_phdr_info *info, size_t size, void *arg)
{
    struct snap *s = arg;
    (void)size;
    if (info->dlpi_tls_modid == 0)
        return 0;
    if (s->n < s->cap)
        s->mod[s->n] = (struct tlsmod){info->dlpi_addr, info->dlpi_tls_modid};
    s->n++;
    return 0;
}

/* snap_take notes the modules with TLS now; false if it could not note them all. */
static bool snap_take(struct snap *s)
{
    s->mod = s->inl;
    s->cap = SNAP_INLINE;
    s->n = 0;
    dl_iterate_phdr(snap_add, s);
    if (s->n <= s->cap)
        return true;
    size_t want = s->n + 16; /* room for a few loaded meanwhile */
    if (!(s->mod = malloc(want * sizeof *s->mod))) {
        s->mod = s->inl;
        return false;
    }
    s->cap = want;
    s->n = 0;
    dl_iterate_phdr(snap_add, s);
    return s->n <= s->cap;
}

static void snap_free(struct snap *s)
{
    if (s->mod != s->inl)
        free(s->mod);
}

static bool snap_has(const struct snap *s, uintptr_t base, size_t modid)
{
    for (size_t i = 0; i < s->n && i < s->cap; i++)
        if (s->mod[i].base == base && s->mod[i].modid == modid)
            return true;
    return false;
}

/* The module's PT_TLS segment if it has static TLS (DF_STATIC_TLS), else NULL. */
static const ElfW(Phdr) * static_tls_of(const struct dl_phdr_info *info)
{
    const ElfW(Phdr) *tls = NULL, *dyn = NULL;
    for (ElfW(Half) i = 0; i < info->dlpi_phnum; i++) {
        if (info->dlpi_phdr[i].p_type == PT_TLS)
            tls = &info->dlpi_phdr[i];
        else if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            dyn = &info->dlpi_phdr[i];
    }
    if (!tls || tls->p_memsz == 0 || !dyn)
        return NULL;
    for (const ElfW(Dyn) *d = (const ElfW(Dyn) *)(info->dlpi_addr + dyn->p_vaddr);
         d->d_tag != DT_NULL; d++)
        if (d->d_tag == DT_FLAGS)
            return (d->d_un.d_val & DF_STATIC_TLS) ? tls : NULL;
    return NULL;
}

static int after_add(struct dl_phdr_info *info, size_t size, void *arg)
{
    struct after *a = arg;
    (void)size;
    if (info->dlpi_tls_modid == 0 || snap_has(a->before, info->dlpi_addr, info->dlpi_tls_modid))
        return 0;
    const ElfW(Phdr) *tls = static_tls_of(info);
    if (!tls || a->seen++ < a->skip || a->n == FRESH_BATCH)
        return 0;
    a->f[a->n++] = (struct fresh){info->dlpi_addr, info->dlpi_tls_modid,
                                  info->dlpi_name, (const void *)(info->dlpi_addr + tls->p_vaddr),
                                  tls->p_filesz,   tls->p_memsz};
    return 0;
}

/*
 * fresh_init gives every thread the module's image. The module is opened
 * again (RTLD_NOLOAD) first: that waits for a dlopen of another thread
 * still loading it, and keeps it loaded during the copy.
 */
static void fresh_init(const struct fresh *f)
{
    void *h = REAL(dlopen)(f->name, RTLD_LAZY | RTLD_NOLOAD);
    if (!h)
        return; /* unloaded meanwhile, or a name the loader does not match */
    struct link_map *lm = NULL;
    size_t modid = 0;
    if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_addr == f->base &&
        dlinfo(h, RTLD_DI_TLS_MODID, &modid) == 0 && modid == f->modid) {
        tls_index ti = {f->modid, 0};
        sched_tls_static_init(f->base, f->modid, __tls_get_addr(&ti), f->image, f->filesz,
                              f->memsz);
    }
    REAL(dlclose)(h);
}

/* The modules loaded since before with static TLS: their images to every thread. */
static void static_tls_after(const struct snap *before)
{
    struct after a = {.before = before};
    do {
        a.seen = a.n = 0;
        dl_iterate_phdr(after_add, &a); /* no work under the loader's lock */
        for (size_t i = 0; i < a.n; i++)
            fresh_init(&a.f[i]);
        a.skip += a.n;
    } while (a.n > 0 && a.seen > a.skip);
}

GOSHIM_EXPORT void *dlopen(const char *file, int mode)
{
    if (!goshim_on || !tls_full()) {
        void *h = REAL(dlopen)(file, mode);
        if (h && goshim_on)
            preempt_refresh();
        return h;
    }
    struct snap before;
    bool known = snap_take(&before); /* not all known: new ones cannot be told apart */
    void *h = REAL(dlopen)(file, mode);
    if (h) {
        int e = errno;
        if (known)
            static_tls_after(&before);
        else
            rt_print(2,
                     "goshim: dlopen(%s): no memory to list the loaded modules: threads that "
                     "exist now may see its initial-exec TLS as zeros\n",
                     file ? file : "NULL");
        preempt_refresh();
        errno = e;
    }
    snap_free(&before);
    return h;
}

/* sched_tls_static_forget's test: the module is still in the snapshot. */
static bool still_loaded(uintptr_t base, size_t modid, void *arg)
{
    return snap_has(arg, base, modid);
}

GOSHIM_EXPORT int dlclose(void *h)
{
    int r = REAL(dlclose)(h);
    if (r == 0 && goshim_on) {
        int e = errno;
        preempt_refresh();
        struct snap now = {.mod = now.inl};
        if (sched_tls_static_count() > 0 && snap_take(&now))
            sched_tls_static_forget(still_loaded, &now);
        snap_free(&now);
        errno = e;
    }
    return r;
}
