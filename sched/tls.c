/*
 * Per-thread TLS: a glibc thread control block (TCB) for every G.
 *
 * Model. On x86-64 glibc the thread pointer (FS base) points at the
 * thread's struct pthread; the static TLS blocks of all initially loaded
 * modules (errno and the rest of libc's state, every __thread variable,
 * goshim's own) lie just below it. Each G gets its own such TCB, made with
 * the loader's own routine (_dl_allocate_tls, GLIBC_PRIVATE), and the
 * scheduler installs it as the FS base when it runs the G. Then errno and
 * __thread are per G and stay put when a G migrates between Ms. glibc does
 * not know these threads exist: it never lists them, never runs their
 * pthread key destructors, never frees their buffers; this file fills in
 * the struct pthread fields that glibc code reads through THREAD_SELF and
 * tears the TCB down itself.
 *
 * Facts relied on (measured on glibc 2.36 x86-64, /work/shared/TCB_FACTS.md):
 *   - _dl_allocate_tls(NULL) zeroes struct pthread, installs a DTV and
 *     copies every static TLS init image; _dl_deallocate_tls(tcb, false) +
 *     _dl_allocate_tls(tcb) recycles a TCB (re-copies all images).
 *   - Fields a new thread needs (else a crash or silent misbehaviour): the
 *     header self pointers, multiple_threads = 1 (else malloc's catomic ops
 *     lose their lock prefix), stack/pointer guards and feature_1 copied
 *     (mangled pointers cross threads), list as a self-loop (fork child's
 *     reclaim_stacks), a unique nonzero tid (owner id of recursive and
 *     errorcheck mutexes, also ld.so's), an empty robust list, specific[0],
 *     rseq cpu_id = -2 (sched_getcpu falls back to vDSO getcpu), __resp ->
 *     own res, stackblock fields; __ctype_init must run on the new thread.
 *   - glibc 2.36 exports no per-thread cleanup, so a G with its own malloc
 *     tcache leaks it (~700 B per G). Fix: a G borrows the tcache and
 *     thread_arena words of the M that runs it (tls_malloc_move at every
 *     switch). That is safe because a G is never switched out inside malloc.
 *
 * Offsets. Nothing is hard-coded except the x86-64 TLS ABI header (self at
 * 0 and 0x10, dtv at 8, multiple_threads 0x18, guards 0x28/0x30, feature_1
 * 0x48), which gcc compiles into every binary. The rest is found at start-up:
 *   - tid, list, specific, dtv, sizeof(struct pthread), link_map.l_tls_offset
 *     from libthread_db's _thread_db_* descriptors ({bits, count, offset});
 *   - specific_1stblock from the calling thread's specific[0];
 *   - robust_head from get_robust_list(0) in a probe pthread;
 *   - stackblock by scanning a probe pthread made with pthread_attr_setstack,
 *     guardsize checked in a second, default-attribute probe pthread;
 *   - res from the probe thread's __resp; __resp itself from dlvsym;
 *   - the strerror/strsignal buffers (tls_state) by scanning for the
 *     pointers the probe thread got back;
 *   - rseq from the public __rseq_offset;
 *   - libc's TLS block from its link map and PT_TLS, and the malloc words
 *     by diffing that block around free(malloc(24)) run in a fresh TCB.
 * If any lookup or probe fails, full mode is refused and the G's share
 * their M's TLS (errno mode, errno saved at every switch) — never a guess.
 *
 * Rejected alternatives:
 *   - Shared TLS with errno saved and restored (what other M:N libraries
 *     do): __thread variables, strerror buffers, locale, resolver state and
 *     mutex owner ids leak between threads. Kept only as the fallback.
 *   - Hard-coded offsets from libc6-dbg: silently wrong on any other build.
 *   - Own TLS allocator: the loader's DTV bookkeeping (dlopen'ed modules,
 *     __tls_get_addr) must see these TCBs exactly like its own.
 *   - wrfsbase whenever CPUID shows FSGSBASE: with CR4.FSGSBASE off the
 *     kernel does not preserve the value (measured on this VM: the base
 *     reverts at the next context switch); AT_HWCAP2 is the kernel's word.
 *
 * The FS method (tls_fs_method), chosen once in tls_init, first that works:
 *   - wrfsbase, when CPUID has FSGSBASE and AT_HWCAP2 says the kernel
 *     enabled it (about 14 ns per write here);
 *   - ldt: the Gs' TCBs in a low arena, one LDT entry each, installed by
 *     loading a selector into %fs (ldt.c; about 6 ns), when modify_ldt
 *     works; TCBs outside the arena with arch_prctl;
 *   - arch_prctl(ARCH_SET_FS): a system call, 65-260 ns on this host and
 *     3.5-8 us on the hosts without FSGSBASE.
 * GOSHIM_FS forces one; a forced method that cannot work is said, the
 * chain goes on. A refused modify_ldt (ENOSYS, EPERM) is silent in auto.
 *
 * FS writes happen only in tls_x86_64.S (and the scheduler's switch):
 * the compiler caches TLS addresses inside a function, so a C frame must
 * end on the thread pointer it started on.
 *
 * Memory per thread (the TCB lives at the top of the G's stack block,
 * sched/proc.c). Measured here (glibc 2.36, 4 KiB pages, x86-64; smaps of
 * 100,000 threads blocked in pthread_cond_wait, 64 KiB stacks), a blocked
 * thread holds:
 *   - two pages of its block, 8192 B: the top one has the block header and
 *     the shim's record (576 B), struct pthread (2304 B), the used static
 *     TLS (~320 B) and the start of glibc's static TLS surplus (1664 B in
 *     all: 3 x 192 + 4 x 144 + 512, _dl_tls_static_surplus_init); the
 *     second the rest of the surplus and the thread's frames (the kept part
 *     is 4928 B; 2 KiB more kept still left a blocked thread on two pages,
 *     so its frames take under 1.2 KiB; 20,000 threads, smaps);
 *   - on the heap: its struct g (328 B, a 336 B chunk) and its DTV (80 B,
 *     dtv_trim; 296 B as glibc makes it), glibc's malloc's both;
 *   - in the program: its pthread_t.
 * 8641 B a thread in all (8866 B before dtv_trim), against 8552 B for a
 * native thread (two pages and glibc's 296 B DTV).
 *
 * The floor. struct pthread, the static TLS and its surplus are one
 * contiguous 4288 B below the thread pointer (the loader hands surplus
 * offsets to dlopen'ed initial-exec modules at any time, and the thread's
 * frames cannot share those bytes), so with the frames below them every
 * thread with a glibc TCB touches two 4 KiB pages at least; what is above
 * 8 KiB is heap. The DTV must stay glibc's malloc'ed (it frees it in
 * _dl_deallocate_tls and reallocs it in _dl_resize_dtv). struct g could
 * live in the second page (the room measured above): 8641 - 336 = ~8305 B,
 * below native; that needs Gs whose memory comes and goes with their
 * block, where today a G is never freed (as in Go, and lock-free readers
 * such as sysmon rely on it): left for later.
 *
 * Why no transparent design reaches 2 x Go's 2.7 KB (5.4 KB) a thread:
 *   - no surplus (glibc.rtld.optional_static_tls=0 and a smaller nns are
 *     the user's tunables, read once by ld.so; goshim could only refuse
 *     the surplus by overlapping it with frames): the top page would hold
 *     3200 B and leave ~900 B for frames (a blocked thread's here take
 *     up to 1.2 KiB: one page for some threads at best, 4.2 KB with the
 *     DTV), but a dlopen of a module with initial-exec TLS (libGL,
 *     sanitizer runtimes, many Python extensions) then fails with "cannot
 *     allocate memory in static TLS block", or writes its TLS image into
 *     live frames;
 *   - TCBs packed in shared pages, away from the stacks (as the ldt
 *     method's arena does): the surplus bytes still share pages with the
 *     next TCB's used ones, so 4.3 KB each plus the stack's own page: 8.3 KB
 *     and an arena of its own, no better than one block;
 *   - one page for several threads' tops: each stack needs its guard page
 *     right below its own range, so two blocks never share a page;
 *   - stack copying or shared stacks (Go's growable stacks, libco's copy
 *     on switch): a C program keeps pointers into a blocked thread's
 *     frames (predicates, futex words, list nodes handed to other
 *     threads), which would then point at another thread's frames;
 *   - smaller pages: x86-64 has none under 4 KiB.
 * So about 8.2-8.3 KB a thread is the floor of a transparent design here.
 */
#include "libc.h"
#include "tls.h"

#include "ldt.h"
#include "throw.h"

#include <cpuid.h>
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif

/* x86-64 TLS ABI: tcbhead_t, the first bytes of struct pthread. */
#define TCB_OFF_TCB        0x00
#define TCB_OFF_DTV        0x08
#define TCB_OFF_SELF       0x10
#define TCB_OFF_MULTI      0x18 /* int multiple_threads */
#define TCB_OFF_STACKGUARD 0x28
#define TCB_OFF_PTRGUARD   0x30
#define TCB_OFF_FEATURE_1  0x48 /* unsigned int, CET */

/* Fake tids: above PID_MAX_LIMIT (2^22), below FUTEX_TID_MASK (0x3fffffff). */
#define TID_MIN 0x01000000u
#define TID_MAX 0x3ffffffeu

#define RSEQ_CPU_ID_REGISTRATION_FAILED (-2)
#define HWCAP2_FSGSBASE_BIT             (1ul << 1)
#define LIBC_TLS_MAX                    4096 /* bigger libc TLS blocks are refused */
#define PROBE_STACK_SIZE                (256 * 1024)

int tls_mode = TLS_MODE_ERRNO;
int tls_fs_method = TLS_FS_NONE;
int tls_test_no_fsgsbase;

/* Called from tls_x86_64.S when arch_prctl fails (FS unchanged). */
__attribute__((noreturn)) void tls_setfs_failed(long err);

/*
 * Everything tls_init learns. Written only by tls_init (before any TCB
 * exists), read-only afterwards, so no lock.
 */
static struct {
    void *(*allocate_tls)(void *mem);
    void (*deallocate_tls)(void *tcb, bool dealloc_tcb);
    void (*ctype_init)(void);
    void (*call_tls_dtors)(void);

    size_t sizeof_pthread;
    size_t static_size, static_align;

    /* Offsets from the thread pointer into struct pthread. */
    size_t tid_off, list_off, specific_off, specific_n, specific_1st_off;
    size_t robust_head_off; /* robust_prev sits just before it */
    long futex_offset;      /* robust_head.futex_offset as glibc sets it */
    size_t stackblock_off;  /* stackblock, stackblock_size, guardsize, reported_guardsize */
    size_t res_off;
    size_t tls_state_off[2]; /* strerror and strsignal buffers */
    ptrdiff_t rseq_cpu_off;  /* rseq_area.cpu_id */

    /* Offsets below the thread pointer (address = tp - off). */
    size_t resp_off; /* libc's __resp */
    size_t libc_tls_off, libc_tls_size;
    int nmalloc;          /* 0 or 2 */
    size_t malloc_off[2]; /* tcache and thread_arena (in address order) */

    uintptr_t stack_guard, pointer_guard;
    uint32_t feature_1;
} ti;

static struct {
    unsigned long created, reset, destroyed, ldt, ldt_overflow;
} stats;

static uint32_t tid_next = TID_MIN;

static char why_buf[160]; /* reason full mode was refused; tls_init runs once */

#define WORD(p, off) (*(uintptr_t *)((char *)(p) + (off)))

void *tls_self(void)
{
    void *tp;
    __asm__ volatile("mov %%fs:0, %0" : "=r"(tp));
    return tp;
}

void tls_setfs_failed(long err)
{
    rt_print(2, "goshim: arch_prctl(ARCH_SET_FS) returned %ld\n", err);
    goshim_throw("tls_call_with_fs: cannot write the FS base");
}

/* next_tid returns a fake tid no live TCB has (it wraps after ~1e9 TCBs). */
static uint32_t next_tid(void)
{
    uint32_t old = __atomic_load_n(&tid_next, __ATOMIC_RELAXED), nxt;
    do {
        nxt = old >= TID_MAX ? TID_MIN : old + 1;
    } while (!__atomic_compare_exchange_n(&tid_next, &old, nxt, true, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED));
    return old;
}

/* ---- Probes ---- */

/* fail records why full mode is refused and returns the message. */
static const char *fail(const char *what, const char *detail)
{
    rt_snprint(why_buf, sizeof why_buf, "%s%s", what, detail);
    return why_buf;
}

static void *priv_sym(const char *name)
{
    return dlvsym(RTLD_DEFAULT, name, "GLIBC_PRIVATE");
}

/*
 * db_field reads a libthread_db descriptor {bits, count, offset} and checks
 * it describes a field of elem_bits-bit elements; returns the element count
 * (0 on failure) and the offset in *off.
 */
static size_t db_field(const char *name, uint32_t elem_bits, size_t *off)
{
    const uint32_t *d = priv_sym(name);
    if (!d || d[0] == 0 || d[1] == 0)
        return 0;
    *off = d[2];
    if (d[1] == 1 && d[0] % elem_bits == 0) /* a scalar or a whole array */
        return d[0] / elem_bits;
    if (d[0] == elem_bits) /* an array described element-wise */
        return d[1];
    return 0;
}

const char *tls_fs_method_name(int method)
{
    switch (method) {
    case TLS_FS_WRFSBASE:
        return "wrfsbase";
    case TLS_FS_LDT:
        return "ldt";
    case TLS_FS_ARCH_PRCTL:
        return "arch_prctl";
    default:
        return "none";
    }
}

/*
 * fs_request reads GOSHIM_FS: the method the chain starts at
 * (wrfsbase, ldt, arch_prctl) and whether the user forced it.
 */
static int fs_request(bool *forced)
{
    static const int chain[] = {TLS_FS_WRFSBASE, TLS_FS_LDT, TLS_FS_ARCH_PRCTL};
    const char *env = getenv("GOSHIM_FS");
    *forced = false;
    if (!env || !*env || strcmp(env, "auto") == 0)
        return TLS_FS_WRFSBASE;
    for (int i = 0; i < 3; i++)
        if (strcmp(env, tls_fs_method_name(chain[i])) == 0) {
            *forced = true;
            return chain[i];
        }
    rt_print(2,
             "goshim: GOSHIM_FS=%s not understood (accepted: auto, wrfsbase, ldt, arch_prctl); "
             "using auto\n",
             env);
    return TLS_FS_WRFSBASE;
}

/* have_wrfsbase: the CPU has FSGSBASE and the kernel enabled it (AT_HWCAP2). */
static bool have_wrfsbase(void)
{
    unsigned a, b, c, d;
    bool cpu = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & 1);
    bool kernel = (getauxval(AT_HWCAP2) & HWCAP2_FSGSBASE_BIT) != 0;
    return cpu && kernel && !tls_test_no_fsgsbase;
}

/* ldt_cap reads GOSHIM_LDT_ENTRIES: how many TCBs may get an LDT entry. */
static int ldt_cap(void)
{
    const char *env = getenv("GOSHIM_LDT_ENTRIES");
    if (!env || !*env)
        return LDT_MAX_SLOTS;
    char *end;
    long v = strtol(env, &end, 10);
    if (*end || v < 1 || v > LDT_MAX_SLOTS) {
        rt_print(2,
                 "goshim: GOSHIM_LDT_ENTRIES=%s not understood (accepted: a whole number from 1 "
                 "to %d); using %d\n",
                 env, LDT_MAX_SLOTS, LDT_MAX_SLOTS);
        return LDT_MAX_SLOTS;
    }
    return (int)v;
}

/* ldt_seen_fn runs with a TCB of the arena installed: what does %fs:0 say? */
static void ldt_seen_fn(void *arg)
{
    *(void **)arg = tls_self();
}

/*
 * start_ldt tries the ldt method (ldt.c): the low arena, the first LDT
 * entries, and a check that loading a selector installs the right TCB.
 * On success tls_fs_method is TLS_FS_LDT. On failure it stays
 * arch_prctl, and the reason is said when the user forced a method
 * (forced: ldt, or wrfsbase, which was not there either), or when a tool
 * (valgrind) or something unusual stands in the way: once, here, at
 * start-up. Where the kernel refuses modify_ldt (ENOSYS: built without
 * it; EPERM: seccomp) and the user asked for nothing, the chain goes on
 * silently.
 */
static void start_ldt(const char *forced)
{
    const char *why = NULL;
    char num[64];
    if (RUNNING_ON_VALGRIND) {
        rt_print(2, "goshim: valgrind does not support LDT selectors in %%fs; threads switch "
                    "with arch_prctl (a system call per switch)\n");
        return;
    }
    int rc = ldt_init(ti.static_size, ti.static_align, ti.sizeof_pthread, ldt_cap());
    if (rc == -ENOSYS)
        why = "modify_ldt is not available (a kernel built without CONFIG_MODIFY_LDT_SYSCALL)";
    else if (rc == -EPERM)
        why = "modify_ldt is not permitted (a seccomp filter or a hardened kernel)";
    else if (rc == -ENOMEM)
        why = "no address space below 4 GiB is left for thread control blocks";
    else if (rc != 0)
        why = (rt_snprint(num, sizeof num, "modify_ldt failed with error %d", -rc), num);
    if (!why) {
        tls_fs_method = TLS_FS_LDT;
        void *tcb = ldt_tcb_alloc(), *seen = NULL;
        if (tcb && ti.allocate_tls(tcb)) {
            WORD(tcb, TCB_OFF_TCB) = (uintptr_t)tcb; /* %fs:0, all ldt_seen_fn reads */
            tls_call_with_fs(tcb, ldt_seen_fn, &seen);
            ti.deallocate_tls(tcb, false);
        }
        if (tcb)
            ldt_tcb_free(tcb);
        if (!tcb || seen != tcb) {
            tls_fs_method = TLS_FS_ARCH_PRCTL;
            ldt_arena_len = 0; /* no TCB is made in the arena from now on */
            why = "loading an LDT selector did not install the thread control block";
        }
    }
    if (why && (forced || (rc != -ENOSYS && rc != -EPERM)))
        rt_print(2,
                 "goshim: %s unavailable: %s; threads switch with arch_prctl (a system call per "
                 "switch)\n",
                 forced && strcmp(forced, "ldt") == 0 ? "GOSHIM_FS=ldt" : "LDT selectors", why);
}

static const char *probe_symbols(void)
{
    static const char *const names[] = {"_dl_allocate_tls", "_dl_deallocate_tls",
                                        "_dl_get_tls_static_info", "__ctype_init"};
    void *p[4];
    for (int i = 0; i < 4; i++)
        if (!(p[i] = priv_sym(names[i])))
            return fail(names[i], " not found");
    ti.allocate_tls = (void *(*)(void *))p[0];
    ti.deallocate_tls = (void (*)(void *, bool))p[1];
    void (*static_info)(size_t *, size_t *) = (void (*)(size_t *, size_t *))p[2];
    ti.ctype_init = (void (*)(void))p[3];
    ti.call_tls_dtors = (void (*)(void))priv_sym("__call_tls_dtors");
    if (!ti.call_tls_dtors)
        return fail("__call_tls_dtors", " not found");
    static_info(&ti.static_size, &ti.static_align);
    return NULL;
}

/* State for find_pt_tls: the module to look for, its PT_TLS size found. */
struct phdr_query {
    struct link_map *lm;
    size_t memsz;
};

/* find_pt_tls is a dl_iterate_phdr callback: the PT_TLS memsz of the module q->lm. */
static int find_pt_tls(struct dl_phdr_info *pi, size_t size, void *arg)
{
    struct phdr_query *q = arg;
    (void)size;
    if (pi->dlpi_addr != q->lm->l_addr || !pi->dlpi_name ||
        strcmp(pi->dlpi_name, q->lm->l_name) != 0)
        return 0;
    for (int i = 0; i < pi->dlpi_phnum; i++)
        if (pi->dlpi_phdr[i].p_type == PT_TLS)
            q->memsz = pi->dlpi_phdr[i].p_memsz;
    return 1;
}

/* probe_layout reads the descriptors and checks them on the calling thread. */
static const char *probe_layout(void)
{
    char *tp = tls_self();
    const uint32_t *sz = priv_sym("_thread_db_sizeof_pthread");
    if (!sz)
        return fail("_thread_db_sizeof_pthread", " not found");
    ti.sizeof_pthread = *sz;
    if (ti.sizeof_pthread < 0x300 || ti.sizeof_pthread > 0x10000 ||
        ti.static_size <= ti.sizeof_pthread)
        return fail("implausible sizeof(struct pthread)", "");

    size_t dtv_off;
    if (db_field("_thread_db_pthread_dtvp", 64, &dtv_off) != 1 || dtv_off != TCB_OFF_DTV)
        return fail("_thread_db_pthread_dtvp", " not at the ABI offset 8");
    if (WORD(tp, TCB_OFF_TCB) != (uintptr_t)tp || WORD(tp, TCB_OFF_SELF) != (uintptr_t)tp ||
        WORD(tp, TCB_OFF_DTV) == 0)
        return fail("x86-64 TCB header check", " failed");
    if (db_field("_thread_db_pthread_tid", 32, &ti.tid_off) != 1)
        return fail("_thread_db_pthread_tid", " missing or malformed");
    if (db_field("_thread_db_pthread_list", 128, &ti.list_off) != 1)
        return fail("_thread_db_pthread_list", " missing or malformed");
    ti.specific_n = db_field("_thread_db_pthread_specific", 64, &ti.specific_off);
    if (ti.specific_n == 0)
        return fail("_thread_db_pthread_specific", " missing or malformed");
    size_t end = ti.sizeof_pthread;
    if (ti.list_off < 0x80 || ti.list_off + 16 > end || ti.tid_off + 4 > end ||
        ti.specific_off + 8 * ti.specific_n > end)
        return fail("_thread_db_pthread_* offsets", " out of range");

    uintptr_t first = WORD(tp, ti.specific_off);
    if (first <= (uintptr_t)tp || first >= (uintptr_t)tp + end)
        return fail("specific[0] probe", " failed");
    ti.specific_1st_off = first - (uintptr_t)tp;

    const ptrdiff_t *roff = dlsym(RTLD_DEFAULT, "__rseq_offset");
    const unsigned *rsize = dlsym(RTLD_DEFAULT, "__rseq_size");
    if (!roff || !rsize)
        return fail("__rseq_offset", " not found");
    ti.rseq_cpu_off = *roff + 4;
    if (*roff < (ptrdiff_t)ti.list_off || (size_t)*roff + 32 > end)
        return fail("__rseq_offset", " outside struct pthread");
    int cpu_id = *(int *)(tp + ti.rseq_cpu_off);
    if (*rsize > 0 ? cpu_id < 0 : cpu_id >= 0)
        return fail("rseq cpu_id check", " failed");

    char *resp = priv_sym("__resp");
    if (!resp)
        return fail("__resp", " not found");
    if (resp >= tp || (size_t)(tp - resp) > ti.static_size)
        return fail("__resp", " not in static TLS");
    ti.resp_off = tp - resp;

    /* libc's TLS block: from libc's link map, its size from PT_TLS. */
    Dl_info info;
    struct link_map *lm = NULL;
    size_t l_tls_offset_off;
    if (!dladdr1((void *)ti.ctype_init, &info, (void **)&lm, RTLD_DL_LINKMAP) || !lm)
        return fail("libc link map", " not found");
    if (db_field("_thread_db_link_map_l_tls_offset", 64, &l_tls_offset_off) != 1)
        return fail("_thread_db_link_map_l_tls_offset", " missing or malformed");
    ti.libc_tls_off = *(size_t *)((char *)lm + l_tls_offset_off);
    ti.libc_tls_size = 0;
    struct phdr_query q = {lm, 0};
    dl_iterate_phdr(find_pt_tls, &q);
    ti.libc_tls_size = q.memsz;
    char *blk = tp - ti.libc_tls_off;
    char *errp = (char *)&errno;
    if (ti.libc_tls_size == 0 || ti.libc_tls_size > LIBC_TLS_MAX || ti.libc_tls_off % 8 ||
        ti.libc_tls_off > ti.static_size || errp < blk || errp >= blk + ti.libc_tls_size ||
        resp < blk || resp >= blk + ti.libc_tls_size)
        return fail("libc TLS block probe", " failed");

    ti.stack_guard = WORD(tp, TCB_OFF_STACKGUARD);
    ti.pointer_guard = WORD(tp, TCB_OFF_PTRGUARD);
    ti.feature_1 = *(uint32_t *)(tp + TCB_OFF_FEATURE_1);
    return NULL;
}

/* State shared between tls_init and its probe threads. */
struct probe {
    char *stack;
    size_t stack_size, guard;
    char *fresh; /* the TCB the malloc probe runs in */
    unsigned char before[LIBC_TLS_MAX], after[LIBC_TLS_MAX];
    bool fresh_ok;
};

/* find_pair returns the unique offset in struct pthread holding (a, b), or 0. */
static size_t find_pair(char *tp, uintptr_t a, uintptr_t b)
{
    size_t found = 0;
    int n = 0;
    for (size_t off = ti.list_off; off + 16 <= ti.sizeof_pthread; off += 8)
        if (WORD(tp, off) == a && (b == 0 || WORD(tp, off + 8) == b)) {
            found = off;
            n++;
        }
    return n == 1 ? found : 0;
}

/* glibc's own malloc and free, even when the program brings another
 * malloc (jemalloc, tcmalloc): the probe looks for glibc's per-thread
 * words, and another allocator's thread state, set up in a TCB that is
 * thrown away without its thread exit, would stay linked into its lists
 * (jemalloc: redis crashed at its first mallctl). */
static struct {
    void *(*malloc)(size_t);
    void (*free)(void *);
} glibc_malloc;

/* malloc_probe_fn runs with a fresh TCB installed: snapshot, malloc, snapshot. */
static void malloc_probe_fn(void *arg)
{
    struct probe *pr = arg;
    char *tp = tls_self();
    char *blk = tp - ti.libc_tls_off;
    char *errp = (char *)&errno;
    pr->fresh_ok = errno == 0 && errp >= blk && errp < blk + ti.libc_tls_size;
    memcpy(pr->before, blk, ti.libc_tls_size);
    void *volatile p = glibc_malloc.malloc(24);
    glibc_malloc.free(p);
    memcpy(pr->after, blk, ti.libc_tls_size);
}

/*
 * probe_malloc_words finds the words malloc sets in a fresh TCB's libc
 * block. It runs on a probe thread that has not allocated yet, and hands
 * the tcache and arena the probe created to that thread: glibc frees them
 * when the thread exits, so the probe leaks nothing. (Run elsewhere, the
 * probe would leak a tcache and keep an arena attached for ever.)
 */
static const char *probe_malloc_words(struct probe *pr)
{
    char *fresh = pr->fresh;
    void *libc = libc_dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    glibc_malloc.malloc = libc ? (void *(*)(size_t))dlsym(libc, "malloc") : NULL;
    glibc_malloc.free = libc ? (void (*)(void *))dlsym(libc, "free") : NULL;
    if (!glibc_malloc.malloc || !glibc_malloc.free)
        return fail("glibc's malloc", " not found in libc.so.6");
    tls_call_with_fs(fresh, malloc_probe_fn, pr);
    if (!pr->fresh_ok)
        return fail("fresh TCB errno check", " failed");
    int n = 0, bad = 0;
    size_t offs[2] = {0, 0};
    for (size_t i = 0; i + 8 <= ti.libc_tls_size; i += 8) {
        uintptr_t b, a;
        memcpy(&b, pr->before + i, 8);
        memcpy(&a, pr->after + i, 8);
        if (a == b)
            continue;
        if (b != 0 || n == 2)
            bad = 1;
        else
            offs[n++] = ti.libc_tls_off - i;
    }
    if (bad || n == 1)
        return fail("malloc state probe", ": unexpected TLS changes");
    ti.nmalloc = n;
    ti.malloc_off[0] = offs[0];
    ti.malloc_off[1] = offs[1];
    char *self = tls_self();
    if (n == 2 && WORD(self, -(ptrdiff_t)offs[0]) == 0 && WORD(self, -(ptrdiff_t)offs[1]) == 0)
        tls_malloc_move(fresh, self);
    return NULL;
}

/* probe_stack_thread runs on a pthread_attr_setstack thread: the struct pthread scans. */
static void *probe_stack_thread(void *arg)
{
    struct probe *pr = arg;
    char *tp = tls_self();

    ti.stackblock_off = find_pair(tp, (uintptr_t)pr->stack, pr->stack_size);
    if (!ti.stackblock_off)
        return (void *)fail("stackblock probe", " failed");

    long head = 0, len = 0;
    if (rt_syscall(SYS_get_robust_list, 0, &head, &len) != 0 || (char *)head <= tp ||
        (char *)head + 24 > tp + ti.sizeof_pthread || len != 24)
        return (void *)fail("get_robust_list probe", " failed");
    ti.robust_head_off = (char *)head - tp;
    if (WORD(tp, ti.robust_head_off) != (uintptr_t)head ||
        WORD(tp, ti.robust_head_off - 8) != (uintptr_t)head)
        return (void *)fail("robust list layout", " unexpected");
    ti.futex_offset = (long)WORD(tp, ti.robust_head_off + 8);

    char *res = *(char **)(tp - ti.resp_off);
    if (res <= tp || res >= tp + ti.sizeof_pthread)
        return (void *)fail("__resp probe", " failed");
    ti.res_off = res - tp;

    char *e = strerror(987654);
    char *s = strsignal(98765);
    ti.tls_state_off[0] = find_pair(tp, (uintptr_t)e, 0);
    ti.tls_state_off[1] = find_pair(tp, (uintptr_t)s, 0);
    if (!ti.tls_state_off[0] || !ti.tls_state_off[1])
        return (void *)fail("strerror/strsignal buffer probe", " failed");
    return NULL;
}

/*
 * probe_guard_thread runs on a default-attribute thread: guardsize and
 * reported_guardsize follow stackblock_size; then the malloc probe, which
 * needs a thread that has not allocated yet.
 */
static void *probe_guard_thread(void *arg)
{
    struct probe *pr = arg;
    char *tp = tls_self();
    char here;
    char *block = (char *)WORD(tp, ti.stackblock_off);
    size_t size = WORD(tp, ti.stackblock_off + 8);
    if (&here < block || &here >= block + size || WORD(tp, ti.stackblock_off + 16) != pr->guard ||
        WORD(tp, ti.stackblock_off + 24) != pr->guard)
        return (void *)fail("guardsize probe", " failed");
    return (void *)probe_malloc_words(pr);
}

/* run_probe_thread runs fn on a real pthread (stack given or default) and returns its verdict. */
static const char *run_probe_thread(void *(*fn)(void *), struct probe *pr, bool own_stack)
{
    pthread_attr_t attr;
    pthread_t th;
    void *ret = NULL;
    if (pthread_attr_init(&attr) != 0)
        return fail("pthread_attr_init", " failed");
    if (own_stack)
        pthread_attr_setstack(&attr, pr->stack, pr->stack_size);
    else if (pthread_attr_getguardsize(&attr, &pr->guard) != 0 || pr->guard == 0)
        ret = (void *)fail("default guard size", " is 0");
    if (!ret && libc_pthread_create(&th, &attr, fn, pr) != 0)
        ret = (void *)fail("probe thread", " could not be created");
    else if (!ret)
        libc_pthread_join(th, &ret);
    pthread_attr_destroy(&attr);
    return ret;
}

/*
 * probe_all runs every probe; want_ldt: the ldt method is next in the
 * chain; forced: the GOSHIM_FS value the user gave, or NULL.
 */
static const char *probe_all(bool want_ldt, const char *forced)
{
    const char *why;
    memset(&ti, 0, sizeof ti); /* unknown offsets read as 0 (see free_thread_buffers) */
    if ((why = probe_symbols()) || (why = probe_layout()))
        return why;
    if (want_ldt)
        start_ldt(forced); /* the TCBs made from here on may come from the arena */
    struct probe *pr = mmap(NULL, sizeof *pr + PROBE_STACK_SIZE, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (pr == MAP_FAILED)
        return fail("probe memory", " unavailable");
    pr->stack = (char *)pr + ((sizeof *pr + 4095) & ~(size_t)4095);
    pr->stack_size = PROBE_STACK_SIZE - 4096;
    why = run_probe_thread(probe_stack_thread, pr, true);
    if (!why && !(pr->fresh = tls_tcb_new()))
        why = fail("probe TCB allocation", " failed");
    if (!why)
        why = run_probe_thread(probe_guard_thread, pr, false);
    if (pr->fresh)
        tls_tcb_destroy(pr->fresh);
    munmap(pr, sizeof *pr + PROBE_STACK_SIZE);
    return why;
}

static const char errno_mode_effect[] =
    "errno is per thread, __thread variables are shared by threads on one OS thread";

int tls_init(int want)
{
    tls_mode = TLS_MODE_ERRNO;
    tls_fs_method = TLS_FS_NONE;
    ldt_arena_len = 0;
    if (want == TLS_MODE_ERRNO) {
        rt_print(2, "goshim: GOSHIM_TLS=errno mode: %s\n", errno_mode_effect);
        return tls_mode;
    }
    /*
     * The probes already switch FS (the malloc probe), so the method comes
     * first: wrfsbase now, ldt once the layout is known (probe_all), else
     * arch_prctl.
     */
    bool forced;
    int fs_want = fs_request(&forced);
    tls_fs_method = TLS_FS_ARCH_PRCTL;
    if (fs_want == TLS_FS_WRFSBASE && have_wrfsbase())
        tls_fs_method = TLS_FS_WRFSBASE;
    else if (fs_want == TLS_FS_WRFSBASE && forced)
        rt_print(2, "goshim: GOSHIM_FS=wrfsbase unavailable: the kernel does not allow wrfsbase "
                    "here (AT_HWCAP2 lacks HWCAP2_FSGSBASE); trying ldt\n");
    bool want_ldt = tls_fs_method != TLS_FS_WRFSBASE && fs_want != TLS_FS_ARCH_PRCTL;
    const char *why = probe_all(want_ldt, forced ? tls_fs_method_name(fs_want) : NULL);
    if (why) {
        tls_fs_method = TLS_FS_NONE;
        ldt_arena_len = 0;
        rt_print(2, "goshim: per-thread TLS unavailable (%s); using GOSHIM_TLS=errno mode: %s\n",
                 why, errno_mode_effect);
        return tls_mode;
    }
    tls_mode = TLS_MODE_FULL;
    return tls_mode;
}

/* ---- TCBs ---- */

/*
 * dtv_trim gives a new TCB's DTV room for the modules that have TLS now
 * only. glibc makes it DTV_SURPLUS (14) slots longer, so that threads need
 * no resize for the next few dlopen'ed TLS modules: 224 of its 296 bytes
 * here, a quarter of what a blocked thread has on the heap. A DTV too short
 * for a module loaded later is what glibc already handles for any thread
 * past the surplus (__tls_get_addr -> _dl_update_slotinfo -> _dl_resize_dtv,
 * a realloc: the new DTV is glibc's malloc'ed, as it wants it). Its layout:
 * dtv[-1] the length, dtv[0] the generation, dtv[1..length] one slot of 16
 * bytes per module id, zero where no module has it (the allocation is
 * calloc'ed, and _dl_allocate_tls_init sets a non-zero value in the slot of
 * every module with TLS). The trimmed copy is malloc'ed with the malloc
 * glibc's loader uses (the process's), the old one freed: its chunk serves
 * the next TCB's DTV.
 */
static void dtv_trim(char *tcb)
{
    uintptr_t *dtv = (uintptr_t *)WORD(tcb, TCB_OFF_DTV); /* two words a slot */
    size_t len = dtv[-2], used = len;
    while (used > 0 && dtv[2 * used] == 0 && dtv[2 * used + 1] == 0)
        used--;
    if (len - used < 4)
        return;
    uintptr_t *n = malloc((used + 2) * 16);
    if (!n)
        return; /* keep glibc's */
    memcpy(n, dtv - 2, (used + 2) * 16);
    n[0] = used;
    WORD(tcb, TCB_OFF_DTV) = (uintptr_t)(n + 2);
    free(dtv - 2);
}

/* tcb_fill writes every field a new thread needs, keeping the stack fields. */
static void tcb_fill(char *tcb)
{
    dtv_trim(tcb);
    WORD(tcb, TCB_OFF_TCB) = (uintptr_t)tcb;
    WORD(tcb, TCB_OFF_SELF) = (uintptr_t)tcb;
    *(int *)(tcb + TCB_OFF_MULTI) = 1;
    WORD(tcb, TCB_OFF_STACKGUARD) = ti.stack_guard;
    WORD(tcb, TCB_OFF_PTRGUARD) = ti.pointer_guard;
    *(uint32_t *)(tcb + TCB_OFF_FEATURE_1) = ti.feature_1;

    WORD(tcb, ti.list_off) = WORD(tcb, ti.list_off + 8) = (uintptr_t)(tcb + ti.list_off);
    *(uint32_t *)(tcb + ti.tid_off) = next_tid();

    uintptr_t head = (uintptr_t)(tcb + ti.robust_head_off);
    WORD(tcb, ti.robust_head_off - 8) = head; /* robust_prev */
    WORD(tcb, ti.robust_head_off) = head;     /* list: empty */
    WORD(tcb, ti.robust_head_off + 8) = (uintptr_t)ti.futex_offset;
    WORD(tcb, ti.robust_head_off + 16) = 0; /* list_op_pending */

    WORD(tcb, ti.specific_off) = (uintptr_t)(tcb + ti.specific_1st_off);
    *(int *)(tcb + ti.rseq_cpu_off) = RSEQ_CPU_ID_REGISTRATION_FAILED;
    *(char **)(tcb - ti.resp_off) = tcb + ti.res_off;
}

/* free_thread_buffers frees what glibc malloc'ed for the thread in struct pthread. */
static void free_thread_buffers(char *tcb)
{
    for (int i = 0; i < 2; i++) {
        if (ti.tls_state_off[i] == 0 || !WORD(tcb, ti.tls_state_off[i]))
            continue; /* not known yet (the malloc probe), or never allocated */
        free((void *)WORD(tcb, ti.tls_state_off[i]));
        WORD(tcb, ti.tls_state_off[i]) = 0;
    }
    /* specific[0] is specific_1stblock inside struct pthread; the rest are malloc'ed. */
    for (size_t i = 1; i < ti.specific_n; i++) {
        void *blk = (void *)WORD(tcb, ti.specific_off + 8 * i);
        if (blk) { /* keys >= 32 only: most threads have none */
            free(blk);
            WORD(tcb, ti.specific_off + 8 * i) = 0;
        }
    }
}

void *tls_tcb_new(void)
{
    char *tcb = NULL;
    if (tls_fs_method == TLS_FS_LDT) {
        if ((tcb = ldt_tcb_alloc()) != NULL && ti.allocate_tls(tcb) == NULL) {
            ldt_tcb_free(tcb);
            return NULL;
        }
        __atomic_add_fetch(tcb ? &stats.ldt : &stats.ldt_overflow, 1, __ATOMIC_RELAXED);
    }
    if (!tcb && !(tcb = ti.allocate_tls(NULL)))
        return NULL;
    tcb_fill(tcb);
    __atomic_add_fetch(&stats.created, 1, __ATOMIC_RELAXED);
    return tcb;
}

size_t tls_tcb_space(size_t extra)
{
    size_t align = ti.static_align ? ti.static_align : 64;
    /* struct pthread is aligned down from top - extra: at most align - 1 more. */
    return (ti.static_size + extra + align - 1 + 15) & ~(size_t)15;
}

void *tls_tcb_new_at(void *top, size_t extra, bool zeroed)
{
    GOSHIM_ASSERT(tls_fs_method != TLS_FS_LDT);
    size_t align = ti.static_align ? ti.static_align : 64;
    char *tcb = (char *)(((uintptr_t)top - extra - ti.sizeof_pthread) & ~(uintptr_t)(align - 1));
    if (!zeroed) /* _dl_allocate_tls(mem) clears nothing of struct pthread */
        memset(tcb, 0, ti.sizeof_pthread);
    if (ti.allocate_tls(tcb) == NULL)
        return NULL;
    tcb_fill(tcb);
    __atomic_add_fetch(&stats.created, 1, __ATOMIC_RELAXED);
    return tcb;
}

void tls_tcb_end(void *tcb)
{
    GOSHIM_ASSERT(tcb != tls_self());
    free_thread_buffers(tcb);
    ti.deallocate_tls(tcb, false); /* the DTV and dynamic TLS; the memory is the stack's */
    __atomic_add_fetch(&stats.destroyed, 1, __ATOMIC_RELAXED);
}

void tls_tcb_reset(void *tcbv)
{
    char *tcb = tcbv;
    uintptr_t mw[2] = {0, 0}, stack[4];
    for (int i = 0; i < ti.nmalloc; i++)
        mw[i] = WORD(tcb, -(ptrdiff_t)ti.malloc_off[i]);
    memcpy(stack, tcb + ti.stackblock_off, sizeof stack);

    free_thread_buffers(tcb);
    /*
     * Free dynamic TLS and the DTV, then a new DTV and fresh copies of all
     * static TLS images. With tcb installed, malloc still finds its words
     * until the libc image is copied; nothing between that copy and the
     * restore below allocates. The tid is still the old one, which owns
     * ld.so's TLS lock meanwhile.
     */
    ti.deallocate_tls(tcb, false);
    if (ti.allocate_tls(tcb) == NULL)
        goshim_throw("tls_tcb_reset: out of memory for the DTV");

    /* struct pthread as a new thread: zero except the self pointers and guards, then refill. */
    memset(tcb + TCB_OFF_MULTI, 0, TCB_OFF_STACKGUARD - TCB_OFF_MULTI);
    memset(tcb + TCB_OFF_PTRGUARD + 8, 0, ti.list_off - (TCB_OFF_PTRGUARD + 8));
    memset(tcb + ti.list_off, 0, ti.sizeof_pthread - ti.list_off);
    tcb_fill(tcb);
    memcpy(tcb + ti.stackblock_off, stack, sizeof stack);
    for (int i = 0; i < ti.nmalloc; i++)
        WORD(tcb, -(ptrdiff_t)ti.malloc_off[i]) = mw[i];
    __atomic_add_fetch(&stats.reset, 1, __ATOMIC_RELAXED);
}

void tls_tcb_set_stack(void *tcb, void *stackblock, size_t size, size_t guard)
{
    WORD(tcb, ti.stackblock_off) = (uintptr_t)stackblock;
    WORD(tcb, ti.stackblock_off + 8) = size;
    WORD(tcb, ti.stackblock_off + 16) = guard; /* guardsize */
    WORD(tcb, ti.stackblock_off + 24) = guard; /* reported_guardsize */
}

void tls_tcb_destroy(void *tcb)
{
    GOSHIM_ASSERT(tcb != tls_self());
    free_thread_buffers(tcb);
    if (ldt_owns(tcb)) {
        ti.deallocate_tls(tcb, false); /* the DTV and dynamic TLS; the slot is ours */
        ldt_tcb_free(tcb);
    } else {
        ti.deallocate_tls(tcb, true);
    }
    __atomic_add_fetch(&stats.destroyed, 1, __ATOMIC_RELAXED);
}

void tls_tcb_set_tid(void *tcb, unsigned tid)
{
    *(uint32_t *)((char *)tcb + ti.tid_off) = tid;
}

unsigned tls_tcb_tid(void *tcb)
{
    return *(uint32_t *)((char *)tcb + ti.tid_off);
}

void tls_thread_start(void)
{
    ti.ctype_init();
}

void tls_thread_exit(void)
{
    ti.call_tls_dtors();
    /* The first call hands out a pending message, the second frees glibc's per-thread result. */
    dlerror();
    dlerror();
}

void tls_malloc_move(void *from_tcb, void *to_tcb)
{
    if (from_tcb == to_tcb)
        return;
    for (int i = 0; i < ti.nmalloc; i++) {
        ptrdiff_t off = -(ptrdiff_t)ti.malloc_off[i];
        WORD(to_tcb, off) = WORD(from_tcb, off);
        WORD(from_tcb, off) = 0;
    }
}

void *tls_var_in(void *tcb, void *var_addr_in_self)
{
    return (char *)tcb - ((char *)tls_self() - (char *)var_addr_in_self);
}

void tls_get_stats(struct tls_stats *out)
{
    out->tcbs_created = __atomic_load_n(&stats.created, __ATOMIC_RELAXED);
    out->tcbs_reset = __atomic_load_n(&stats.reset, __ATOMIC_RELAXED);
    out->tcbs_destroyed = __atomic_load_n(&stats.destroyed, __ATOMIC_RELAXED);
    out->ldt_tcbs = __atomic_load_n(&stats.ldt, __ATOMIC_RELAXED);
    out->ldt_overflow = __atomic_load_n(&stats.ldt_overflow, __ATOMIC_RELAXED);
    out->static_size = ti.static_size;
}
