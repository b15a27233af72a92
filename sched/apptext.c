/*
 * The text tables of apptext.h: one dl_iterate_phdr pass fills both, and
 * notes libc's text (the main thread's stack ends in its start code);
 * goshim's own is never application text, whatever its file is called.
 */
#include <link.h>
#include <stdlib.h>
#include <string.h>

#include "apptext.h"

enum { MAX_RANGES = 512 };

struct range {
    uintptr_t lo, hi;
};

struct ranges {
    int n;
    struct range r[MAX_RANGES];
};

static struct {
    struct ranges *app;    /* application text; atomic */
    struct ranges *loaded; /* every loaded object's text; atomic */
    struct range libc;     /* libc's text */
} at;

static bool denied(const char *name)
{
    static const char *const deny[] = {"libc.so",   "ld-linux",   "libgcc_s",   "libstdc++",
                                       "libunwind", "libpthread", "linux-vdso", "libasan",
                                       "libtsan",   "libubsan",   "liblsan",    "libgoshim"};
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    for (size_t i = 0; i < sizeof deny / sizeof deny[0]; i++)
        if (strstr(base, deny[i]))
            return true;
    return false;
}

struct tables {
    struct ranges *app, *loaded;
};

static bool in(const struct range *r, uintptr_t pc)
{
    return pc >= r->lo && pc < r->hi;
}

static int collect(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct tables *tt = arg;
    const char *name = info->dlpi_name ? info->dlpi_name : "";
    uintptr_t here = (uintptr_t)&collect;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
            continue;
        struct range r = {info->dlpi_addr + ph->p_vaddr,
                          info->dlpi_addr + ph->p_vaddr + ph->p_memsz};
        if (tt->loaded->n < MAX_RANGES)
            tt->loaded->r[tt->loaded->n++] = r;
        if (in(&r, here))
            continue; /* goshim's own */
        if (strstr(name, "libc.so"))
            at.libc = r;
        if (denied(name))
            continue;
        if (tt->app->n < MAX_RANGES)
            tt->app->r[tt->app->n++] = r;
    }
    return 0;
}

void apptext_refresh(void)
{
    struct tables t = {calloc(1, sizeof *t.app), calloc(1, sizeof *t.loaded)};
    if (!t.app || !t.loaded) {
        free(t.app);
        free(t.loaded);
        return;
    }
    dl_iterate_phdr(collect, &t);
    __atomic_store_n(&at.app, t.app, __ATOMIC_RELEASE);
    __atomic_store_n(&at.loaded, t.loaded, __ATOMIC_RELEASE);
}

const struct ranges *apptext_app(void)
{
    return __atomic_load_n(&at.app, __ATOMIC_ACQUIRE);
}

const struct ranges *apptext_loaded(void)
{
    return __atomic_load_n(&at.loaded, __ATOMIC_ACQUIRE);
}

bool ranges_has(const struct ranges *t, uintptr_t pc)
{
    for (int i = 0; t && i < t->n; i++)
        if (in(&t->r[i], pc))
            return true;
    return false;
}

bool apptext_in_libc(uintptr_t pc)
{
    return in(&at.libc, pc);
}
