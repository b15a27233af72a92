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
#include <libunwind.h>
#include <stddef.h>
#include <string.h>

#include "libc.h"
#include "preempt_unw.h"

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
} uw;

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

static bool cache_get(uint64_t ip, struct entry *e)
{
    struct slot *s = slot_of(ip);
    uint64_t q = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
    if (q & 1)
        return false;
    uint64_t w[ENTRY_WORDS];
    for (size_t i = 0; i < ENTRY_WORDS; i++)
        w[i] = __atomic_load_n(&s->w[i], __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&s->seq, __ATOMIC_RELAXED) != q)
        return false;
    memcpy(e, w, sizeof *e);
    return e->ip == ip && e->gen == __atomic_load_n(&uw.gen, __ATOMIC_RELAXED);
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
    struct entry e;
    if (!cache_get(ip, &e))
        return false;
    *pi = e.pi;
    memcpy(w->dci, e.dci, sizeof w->dci);
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

/* ---- the walk ------------------------------------------------------------------------- */

void unwalk(const uint64_t *saved, bool (*frame)(void *arg, uintptr_t pc, bool exact), void *arg)
{
    struct uwalk w = {.saved = saved};
    unw_cursor_t c;
    if (uw.init_remote(&c, uw.as, &w) < 0)
        return;
    for (bool exact = true;; exact = false) {
        unw_word_t pc = 0;
        if (uw.get_reg(&c, UNW_REG_IP, &pc) < 0 || !frame(arg, (uintptr_t)pc, exact))
            return;
        if (uw.step(&c) <= 0 || w.noinfo)
            return;
    }
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
    return uw.as && policy(uw.as, UNW_CACHE_NONE) == 0;
}
