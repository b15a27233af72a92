/*
 * libunwind's safety walk (GOSHIM_PREEMPT_WALK=libunwind), without a lock
 * or a system call per frame.
 *
 * Debian's libunwind (1.6) walks the calling process's own stack through
 * libunwind.so.8's local address space. Every step there takes a lock
 * with every signal blocked (a pthread mutex between two sigprocmask
 * calls): the global cache of register states (UNW_CACHE_PER_THREAD is
 * quietly turned into UNW_CACHE_GLOBAL in that build), or, with no cache
 * (UNW_CACHE_NONE), the memory pool the parsed CIE comes from, twice. A
 * miss searches with dl_iterate_phdr, between two more sigprocmask calls.
 * That walk cost several times libgcc's. libunwind.so.8 cannot be given
 * other accessors: its unw_create_addr_space returns NULL (a local-only
 * build). So the walk uses libunwind-x86_64.so.8, the generic build in
 * the same package, with an address space of goshim's own
 * (unw_create_addr_space, UNW_CACHE_NONE) whose accessors:
 *
 *   - read registers from the trampoline's save area, so the walk starts
 *     at the interrupted frame, with its exact PC (a remote cursor starts
 *     as at a signal frame), not two frames above in goshim_preempt_point
 *     and the trampoline;
 *   - read memory directly (the walk runs in the process it walks);
 *   - find a PC's unwind information with glibc's lock-free
 *     _dl_find_object (the object's .eh_frame_hdr, handed to libunwind's
 *     dwarf_search_unwind_table) and keep what libunwind parsed (the
 *     procedure info and the CIE summary it points to) in a cache of
 *     their own, keyed by PC and shared by every M under a sequence lock
 *     per slot. A cache hit is returned as UNW_INFO_FORMAT_REMOTE_TABLE
 *     pointing at a copy in the walk's own frame: libunwind gives back to
 *     its pool (under its lock) only UNW_INFO_FORMAT_TABLE information,
 *     which a miss returns. So a warm walk takes no lock, makes no system
 *     call and calls nothing of goshim's. Code loaded or unloaded since
 *     (unwalk_refresh, with the application-text table) empties it.
 *
 * One lock is left: libunwind allocates from its pool for a CFI program
 * that uses DW_CFA_remember_state (gcc emits it for a function with more
 * than one epilogue: common), and frees it after the step, each under its
 * mutex between two sigprocmask calls - through goshim's sigprocmask,
 * three system calls each. The library is goshim's own instance, so its
 * PLT slot for sigprocmask (lazily bound, outside RELRO) is pointed at
 * walk_sigprocmask, which does nothing during a walk (a signal handler
 * of this thread cannot enter this library meanwhile: the preemption
 * handler sees the M inside goshim and leaves) and otherwise calls what
 * the slot would have bound to. Then only the uncontended mutex remains.
 * If the slot cannot be found or lies in RELRO, the walk works as before,
 * slower.
 *
 * What the walk does not do: guess. When a PC has no unwind information
 * (hand-written assembly, a JIT's code), libunwind falls back to the
 * frame-pointer chain; here the accessors refuse every read from then on
 * and the walk ends there, as libgcc's does (such a frame is never
 * passed). libunwind still takes its pool's lock for a CFI program with
 * DW_CFA_remember_state (one per such frame).
 *
 * The walk keeps no per-thread state: it runs on the G's TLS, in the
 * trampoline, like libgcc's.
 */
#include <dlfcn.h>
#include <elf.h>
#include <libunwind.h>
#include <link.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>

#include "libc.h"
#include "preempt_unw.h"
#include "api.h"

enum {
    CACHE_SLOTS = 1024, /* a power of two */
    DCI_WORDS = 12,     /* room for libunwind's CIE summary (80 bytes in 1.6) */
    DW_EH_PE_udata4 = 0x03,
    DW_EH_PE_sdata4 = 0x0b,
    DW_EH_PE_udata8 = 0x04,
    DW_EH_PE_sdata8 = 0x0c,
    DW_EH_PE_datarel = 0x30,
};

/* What a cache slot holds: a PC's procedure info and the CIE summary. */
struct entry {
    uint64_t gen; /* uw.gen when it was found */
    uint64_t ip;
    unw_proc_info_t pi;
    uint64_t dci[DCI_WORDS];
};

enum { ENTRY_WORDS = sizeof(struct entry) / sizeof(uint64_t) };
_Static_assert(sizeof(struct entry) % sizeof(uint64_t) == 0, "an entry is copied by words");

struct slot {
    uint64_t seq; /* odd while a writer fills it */
    uint64_t w[ENTRY_WORDS];
};

static struct {
    unw_addr_space_t as;
    int (*init_remote)(unw_cursor_t *, unw_addr_space_t, void *);
    int (*step)(unw_cursor_t *);
    int (*get_reg)(unw_cursor_t *, unw_regnum_t, unw_word_t *);
    int (*search)(unw_addr_space_t, unw_word_t, unw_dyn_info_t *, unw_proc_info_t *, int, void *);
    uint64_t gen; /* bumped when code is loaded or unloaded; atomic */
    struct slot cache[CACHE_SLOTS];
} uw GOSHIM_LARGE;

/* One walk's state: the accessors' argument. */
struct uwalk {
    const uint64_t *saved;
    bool noinfo; /* a PC without unwind information: the walk ends */
    uint64_t dci[DCI_WORDS];
};

/* ---- the cache ------------------------------------------------------------------------ */

static struct slot *slot_of(uint64_t ip)
{
    return &uw.cache[(ip * 0x9E3779B97F4A7C15ULL) >> (64 - 10)];
}
_Static_assert(CACHE_SLOTS == 1 << 10, "slot_of's shift");

/* Copy n words from the slot's words at from (relaxed: a writer may be at work). */
static void slot_copy(void *to, const uint64_t *from, size_t n)
{
    uint64_t *t = to;
    for (size_t i = 0; i < n; i++)
        t[i] = __atomic_load_n(&from[i], __ATOMIC_RELAXED);
}

enum {
    E_GEN = offsetof(struct entry, gen) / 8,
    E_IP = offsetof(struct entry, ip) / 8,
    E_PI = offsetof(struct entry, pi) / 8,
    E_DCI = offsetof(struct entry, dci) / 8,
};
_Static_assert(sizeof(unw_proc_info_t) % 8 == 0, "procedure info is copied by words");

/* ip's procedure info into pi and its CIE summary into dci, if the cache has them. */
static bool cache_get(uint64_t ip, unw_proc_info_t *pi, uint64_t *dci)
{
    struct slot *s = slot_of(ip);
    uint64_t q = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
    if ((q & 1) || __atomic_load_n(&s->w[E_IP], __ATOMIC_RELAXED) != ip ||
        __atomic_load_n(&s->w[E_GEN], __ATOMIC_RELAXED) !=
            __atomic_load_n(&uw.gen, __ATOMIC_RELAXED))
        return false;
    slot_copy(pi, &s->w[E_PI], sizeof *pi / 8);
    slot_copy(dci, &s->w[E_DCI], DCI_WORDS);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    return __atomic_load_n(&s->seq, __ATOMIC_RELAXED) == q;
}

/* Keep pi, with the CIE summary dci, as ip's; skipped if another M is
 * filling the slot. */
static void cache_put(uint64_t ip, const unw_proc_info_t *pi, const void *dci)
{
    if (!dci || pi->unwind_info_size <= 0 ||
        (size_t)pi->unwind_info_size > sizeof(uint64_t) * DCI_WORDS)
        return;
    struct entry e;
    memset(&e, 0, sizeof e);
    e.gen = __atomic_load_n(&uw.gen, __ATOMIC_RELAXED);
    e.ip = ip;
    e.pi = *pi;
    memcpy(e.dci, dci, (size_t)pi->unwind_info_size);
    uint64_t w[ENTRY_WORDS];
    memcpy(w, &e, sizeof w);
    struct slot *s = slot_of(ip);
    uint64_t q = __atomic_load_n(&s->seq, __ATOMIC_RELAXED);
    if ((q & 1) ||
        !__atomic_compare_exchange_n(&s->seq, &q, q + 1, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
        return;
    __atomic_thread_fence(__ATOMIC_RELEASE);
    for (size_t i = 0; i < ENTRY_WORDS; i++)
        __atomic_store_n(&s->w[i], w[i], __ATOMIC_RELAXED);
    __atomic_store_n(&s->seq, q + 2, __ATOMIC_RELEASE);
}

void unwalk_refresh(void)
{
    __atomic_add_fetch(&uw.gen, 1, __ATOMIC_RELAXED);
}

/* ---- the accessors -------------------------------------------------------------------- */

/* The size of an encoded .eh_frame_hdr field, or 0 if not a fixed one. */
static size_t enc_size(uint8_t enc)
{
    switch (enc & 0x0f) {
    case DW_EH_PE_udata4:
    case DW_EH_PE_sdata4:
        return 4;
    case 0: /* absptr */
    case DW_EH_PE_udata8:
    case DW_EH_PE_sdata8:
        return 8;
    default:
        return 0;
    }
}

/* The binary-search table of the object that holds ip, as libunwind
 * describes one (what its own dl_iterate_phdr search builds). */
static bool table_of(uintptr_t ip, unw_dyn_info_t *di)
{
    struct dl_find_object fo;
    if (_dl_find_object((void *)ip, &fo) != 0 || !fo.dlfo_eh_frame)
        return false;
    const uint8_t *h = fo.dlfo_eh_frame;
    size_t ptr = enc_size(h[1]);
    /* version 1, a 4-byte FDE count, a table of pairs relative to the header */
    if (h[0] != 1 || !ptr || h[2] != DW_EH_PE_udata4 ||
        h[3] != (DW_EH_PE_datarel | DW_EH_PE_sdata4))
        return false;
    uint32_t count;
    memcpy(&count, h + 4 + ptr, sizeof count);
    memset(di, 0, sizeof *di);
    di->start_ip = (uintptr_t)fo.dlfo_map_start;
    di->end_ip = (uintptr_t)fo.dlfo_map_end;
    di->format = UNW_INFO_FORMAT_REMOTE_TABLE;
    di->u.rti.segbase = (uintptr_t)h;
    di->u.rti.table_data = (uintptr_t)(h + 4 + ptr + 4);
    di->u.rti.table_len = (unw_word_t)count * 8 / sizeof(unw_word_t); /* in words */
    return true;
}

/* ip's procedure info from the cache, its CIE summary copied into the walk. */
static bool cached(struct uwalk *w, uint64_t ip, unw_proc_info_t *pi)
{
    if (!cache_get(ip, pi, w->dci))
        return false;
    pi->unwind_info = w->dci;
    pi->format = UNW_INFO_FORMAT_REMOTE_TABLE; /* not given back to libunwind's pool */
    return true;
}

/*
 * An entry is kept under the PC asked for and under its procedure's
 * start: a new PC in a known procedure (an interrupted loop stops at any
 * of its instructions) costs a search without the CIE (no lock), not one
 * with.
 */
static int find_proc_info(unw_addr_space_t as, unw_word_t ip, unw_proc_info_t *pi, int need,
                          void *arg)
{
    struct uwalk *w = arg;
    if (cached(w, ip, pi))
        return 0;
    unw_dyn_info_t di;
    int r = table_of(ip, &di) ? uw.search(as, ip, &di, pi, 0, arg) : -UNW_ENOINFO;
    if (r >= 0 && need) {
        unw_word_t start = pi->start_ip;
        if (cached(w, start, pi)) {
            cache_put(ip, pi, w->dci);
            return 0;
        }
        r = uw.search(as, ip, &di, pi, need, arg);
        if (r >= 0 && pi->format == UNW_INFO_FORMAT_TABLE) {
            cache_put(ip, pi, pi->unwind_info);
            cache_put(start, pi, pi->unwind_info);
        }
    }
    if (r < 0)
        w->noinfo = true;
    return r;
}

static void put_unwind_info(unw_addr_space_t as, unw_proc_info_t *pi, void *arg)
{
    (void)as, (void)pi, (void)arg;
}

static int get_dyn_info_list_addr(unw_addr_space_t as, unw_word_t *addr, void *arg)
{
    (void)as, (void)addr, (void)arg;
    return -UNW_ENOINFO;
}

static int access_mem(unw_addr_space_t as, unw_word_t addr, unw_word_t *val, int write, void *arg)
{
    (void)as;
    struct uwalk *w = arg;
    if (write || w->noinfo || addr < 4096)
        return -UNW_EINVAL;
    *val = *(const unw_word_t *)(uintptr_t)addr;
    return 0;
}

static int access_reg(unw_addr_space_t as, unw_regnum_t reg, unw_word_t *val, int write, void *arg)
{
    (void)as;
    static const int8_t slot[] = {
        [UNW_X86_64_RAX] = UNWALK_RAX, [UNW_X86_64_RDX] = UNWALK_RDX, [UNW_X86_64_RCX] = UNWALK_RCX,
        [UNW_X86_64_RBX] = UNWALK_RBX, [UNW_X86_64_RSI] = UNWALK_RSI, [UNW_X86_64_RDI] = UNWALK_RDI,
        [UNW_X86_64_RBP] = UNWALK_RBP, [UNW_X86_64_RSP] = UNWALK_RSP, [UNW_X86_64_R8] = UNWALK_R8,
        [UNW_X86_64_R9] = UNWALK_R9,   [UNW_X86_64_R10] = UNWALK_R10, [UNW_X86_64_R11] = UNWALK_R11,
        [UNW_X86_64_R12] = UNWALK_R12, [UNW_X86_64_R13] = UNWALK_R13, [UNW_X86_64_R14] = UNWALK_R14,
        [UNW_X86_64_R15] = UNWALK_R15, [UNW_X86_64_RIP] = UNWALK_RIP,
    };
    const struct uwalk *w = arg;
    if (write || reg < 0 || reg > UNW_X86_64_RIP)
        return -UNW_EBADREG;
    if (reg == UNW_X86_64_RSP)
        *val = (uintptr_t)(w->saved + UNWALK_RSP);
    else
        *val = w->saved[slot[reg]];
    return 0;
}

static int access_fpreg(unw_addr_space_t as, unw_regnum_t reg, unw_fpreg_t *val, int write,
                        void *arg)
{
    (void)as, (void)reg, (void)val, (void)write, (void)arg;
    return -UNW_EBADREG;
}

static int resume(unw_addr_space_t as, unw_cursor_t *c, void *arg)
{
    (void)as, (void)c, (void)arg;
    return -UNW_EINVAL;
}

static int get_proc_name(unw_addr_space_t as, unw_word_t addr, char *buf, size_t len,
                         unw_word_t *off, void *arg)
{
    (void)as, (void)addr, (void)buf, (void)len, (void)off, (void)arg;
    return -UNW_ENOINFO;
}

/* ---- libunwind's signal mask ------------------------------------------------------ */

/* Inside unwalk on this thread (G or M: the walk never switches). */
static __thread bool walking __attribute__((tls_model("initial-exec")));
static int (*next_sigprocmask)(int, const sigset_t *, sigset_t *);

static int walk_sigprocmask(int how, const sigset_t *set, sigset_t *old)
{
    if (!walking)
        return next_sigprocmask(how, set, old);
    if (old) /* restored by the second call, which does nothing either */
        sigemptyset(old);
    return 0;
}

struct slotfind {
    uintptr_t base, slot;
    bool relro; /* slot lies in the object's RELRO segment */
};

static int relro_of(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct slotfind *f = arg;
    if (info->dlpi_addr != f->base)
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = f->base + ph->p_vaddr;
        if (ph->p_type == PT_GNU_RELRO && f->slot >= lo && f->slot < lo + ph->p_memsz)
            f->relro = true;
    }
    return 1;
}

/* The address of lm's PLT slot for name, or 0. */
static uintptr_t plt_slot(const struct link_map *lm, const char *name)
{
    const ElfW(Rela) *rel = NULL;
    size_t relsz = 0;
    const ElfW(Sym) *sym = NULL;
    const char *str = NULL;
    for (const ElfW(Dyn) *d = lm->l_ld; d->d_tag != DT_NULL; d++) {
        /* glibc has relocated the pointers of a writable dynamic section; else add the base */
        uintptr_t p = d->d_un.d_ptr < lm->l_addr ? d->d_un.d_ptr + lm->l_addr : d->d_un.d_ptr;
        if (d->d_tag == DT_JMPREL)
            rel = (const ElfW(Rela) *)p;
        else if (d->d_tag == DT_PLTRELSZ)
            relsz = d->d_un.d_val;
        else if (d->d_tag == DT_SYMTAB)
            sym = (const ElfW(Sym) *)p;
        else if (d->d_tag == DT_STRTAB)
            str = (const char *)p;
    }
    for (size_t i = 0; rel && sym && str && i < relsz / sizeof *rel; i++)
        if (ELF64_R_TYPE(rel[i].r_info) == R_X86_64_JUMP_SLOT &&
            strcmp(str + sym[ELF64_R_SYM(rel[i].r_info)].st_name, name) == 0)
            return lm->l_addr + rel[i].r_offset;
    return 0;
}

/* Point h's sigprocmask at walk_sigprocmask (see the top of the file). */
static void quiet_sigprocmask(void *h)
{
    struct link_map *lm = NULL;
    next_sigprocmask =
        (int (*)(int, const sigset_t *, sigset_t *))dlsym(RTLD_DEFAULT, "sigprocmask");
    if (!next_sigprocmask || dlinfo(h, RTLD_DI_LINKMAP, &lm) != 0 || !lm)
        return;
    struct slotfind f = {.base = lm->l_addr, .slot = plt_slot(lm, "sigprocmask")};
    if (!f.slot)
        return;
    dl_iterate_phdr(relro_of, &f);
    if (!f.relro)
        __atomic_store_n((uintptr_t *)f.slot, (uintptr_t)walk_sigprocmask, __ATOMIC_RELEASE);
}

/* ---- the walk ------------------------------------------------------------------------- */

void unwalk(const uint64_t *saved, bool (*frame)(void *arg, uintptr_t pc, bool exact), void *arg)
{
    struct uwalk w = {.saved = saved};
    unw_cursor_t c;
    walking = true;
    if (uw.init_remote(&c, uw.as, &w) >= 0)
        for (bool exact = true;; exact = false) {
            unw_word_t pc = 0;
            if (uw.get_reg(&c, UNW_REG_IP, &pc) < 0 || !frame(arg, (uintptr_t)pc, exact) ||
                uw.step(&c) <= 0 || w.noinfo)
                break;
        }
    walking = false;
}

bool unwalk_load(void)
{
    static unw_accessors_t acc = {
        .find_proc_info = find_proc_info,
        .put_unwind_info = put_unwind_info,
        .get_dyn_info_list_addr = get_dyn_info_list_addr,
        .access_mem = access_mem,
        .access_reg = access_reg,
        .access_fpreg = access_fpreg,
        .resume = resume,
        .get_proc_name = get_proc_name,
    };
    void *h = libc_dlopen("libunwind-x86_64.so.8", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return false;
    unw_addr_space_t (*create)(unw_accessors_t *, int) =
        (unw_addr_space_t(*)(unw_accessors_t *, int))dlsym(h, "_Ux86_64_create_addr_space");
    int (*policy)(unw_addr_space_t, unw_caching_policy_t) =
        (int (*)(unw_addr_space_t, unw_caching_policy_t))dlsym(h, "_Ux86_64_set_caching_policy");
    uw.init_remote =
        (int (*)(unw_cursor_t *, unw_addr_space_t, void *))dlsym(h, "_Ux86_64_init_remote");
    uw.step = (int (*)(unw_cursor_t *))dlsym(h, "_Ux86_64_step");
    uw.get_reg = (int (*)(unw_cursor_t *, unw_regnum_t, unw_word_t *))dlsym(h, "_Ux86_64_get_reg");
    uw.search = (int (*)(unw_addr_space_t, unw_word_t, unw_dyn_info_t *, unw_proc_info_t *, int,
                         void *))dlsym(h, "_Ux86_64_dwarf_search_unwind_table");
    if (!create || !policy || !uw.init_remote || !uw.step || !uw.get_reg || !uw.search)
        return false;
    uw.as = create(&acc, 0);
    if (!uw.as || policy(uw.as, UNW_CACHE_NONE) != 0)
        return false;
    quiet_sigprocmask(h);
    return true;
}
