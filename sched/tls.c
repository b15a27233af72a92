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
 * Facts relied on (glibc 2.36 x86-64; docs/design.md, "TCB facts"):
 *   - _dl_allocate_tls(NULL) zeroes struct pthread, installs a DTV and
 *     copies every static TLS init image; _dl_deallocate_tls(tcb, false) +
 *     _dl_allocate_tls(tcb) recycles a TCB (re-copies all images). A
 *     later dlopen of an initial-exec module copies its image only into
 *     the threads on glibc's lists: tls_static.c does the Gs.
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
 *     thread_arena words of the M that runs it (tls_malloc_handover at every
 *     switch; the main G keeps main_arena: schedule.c). That is safe because
 *     a G is never switched out inside malloc.
 *
 * Rejected alternatives:
 *   - Shared TLS with errno saved and restored (what other M:N libraries
 *     do): __thread variables, strerror buffers, locale, resolver state and
 *     mutex owner ids leak between threads. Kept only as the fallback.
 *   - Own TLS allocator: the loader's DTV bookkeeping (dlopen'ed modules,
 *     __tls_get_addr) must see these TCBs exactly like its own.
 *
 * FS writes happen only in tls_x86_64.S (and the scheduler's switch):
 * the compiler caches TLS addresses inside a function, so a C frame must
 * end on the thread pointer it started on.
 *
 * Memory per thread (the TCB lives at the top of the G's stack block,
 * sched/threadblock.c; glibc 2.36, 4 KiB pages, x86-64). A thread blocked
 * in pthread_cond_wait holds:
 *   - two pages of its block: the top one has the block header and the
 *     shim's record (576 B), struct pthread (2304 B), the used static TLS
 *     (~320 B) and the start of glibc's static TLS surplus (1664 B in all:
 *     3 x 192 + 4 x 144 + 512, _dl_tls_static_surplus_init); the second
 *     the rest of the surplus and the thread's frames;
 *   - its struct g (344 B, a 384 B slot of goshim's pool, rtpool.c) and, on
 *     the heap, its DTV (80 B, dtv_trim; 296 B as glibc makes it);
 *   - in the program: its pthread_t.
 * That is a little more than a native thread (two pages and glibc's 296 B
 * DTV).
 *
 * The floor. struct pthread, the static TLS and its surplus are one
 * contiguous 4288 B below the thread pointer (the loader hands surplus
 * offsets to dlopen'ed initial-exec modules at any time, and the thread's
 * frames cannot share those bytes), so with the frames below them every
 * thread with a glibc TCB touches two 4 KiB pages at least; what is above
 * 8 KiB is heap. The DTV must stay glibc's malloc'ed (it frees it in
 * _dl_deallocate_tls and reallocs it in _dl_resize_dtv). struct g could
 * live in the second page, where there is room, which would bring a
 * thread below native; that needs Gs whose memory comes and goes with their
 * block, where today a G is never freed (as in Go, and lock-free readers
 * such as sysmon rely on it): left for later.
 *
 * Why no transparent design reaches twice a goroutine's memory (Go's
 * goroutines start on 2 KiB stacks):
 *   - no surplus by default: glibc.rtld.optional_static_tls=0 and
 *     glibc.rtld.nns=1 are the user's tunables, read once by ld.so, and
 *     goshim could only refuse the surplus by overlapping it with frames,
 *     so that a dlopen of a module with initial-exec TLS (libGL, sanitizer
 *     runtimes, many Python extensions) fails with "cannot allocate memory
 *     in static TLS block", or writes its TLS image into live frames. With
 *     those tunables (goshim run --lean-tls, "lean TLS") the surplus is
 *     144 B: the top page holds struct pthread, the static TLS, the
 *     header and a blocked thread's frames if the shim's record
 *     goes to the heap (threadblock.c), so a thread takes one page of its
 *     block and its record, struct g and DTV on the heap, and a dlopen
 *     of more initial-exec TLS than that (a little more with rounding)
 *     fails cleanly;
 *   - TCBs packed in shared pages, away from the stacks (as the ldt
 *     method's arena does): the surplus bytes still share pages with the
 *     next TCB's used ones, so 4.3 KB each plus the stack's own page: as
 *     much as one block, and an arena of its own;
 *   - one page for several threads' tops: each stack needs its guard page
 *     right below its own range, so two blocks never share a page;
 *   - stack copying or shared stacks (Go's growable stacks, libco's copy
 *     on switch): a C program keeps pointers into a blocked thread's
 *     frames (predicates, futex words, list nodes handed to other
 *     threads), which would then point at another thread's frames;
 *   - smaller pages: x86-64 has none under 4 KiB.
 * So two pages of block a thread is the floor of a transparent design,
 * and one page plus the heap part the floor with lean TLS, which the user
 * chooses.
 */
#include "libc.h"
#include "tls.h"
#include "tls_impl.h"

#include "ldt.h"
#include "prefetch.h"
#include "throw.h"

#include <dlfcn.h>
#include <link.h>
#include <linux/futex.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>

/* Fake tids: above PID_MAX_LIMIT (2^22), below FUTEX_TID_MASK (0x3fffffff). */
#define TID_MIN 0x01000000u
#define TID_MAX 0x3ffffffeu

#define RSEQ_CPU_ID_REGISTRATION_FAILED (-2)

int tls_mode = TLS_MODE_ERRNO;
size_t tls_tid_off;
int tls_fs_method = TLS_FS_NONE;

/* Called from tls_x86_64.S when arch_prctl fails (FS unchanged). */
__attribute__((noreturn)) void tls_setfs_failed(long err);

struct tlsinfo tls_info; /* written only by tls_init (tls_probe.c), read-only afterwards */

static struct {
    unsigned long created, reset, destroyed, ldt, ldt_overflow;
} stats;

static uint32_t tid_next = TID_MIN;

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

/*
 * tls_dtv_clear readies a used TCB's DTV for _dl_allocate_tls_init, as
 * glibc's own stack cache does for a stack it reuses (get_cached_stack):
 * the blocks of dlopen'ed modules' TLS that the thread allocated
 * (to_free; NULL for static TLS) freed, the generation and every slot
 * zeroed. The DTV itself, trimmed once, is kept.
 */
void tls_dtv_clear(char *tcb)
{
    uintptr_t *dtv = (uintptr_t *)WORD(tcb, TCB_OFF_DTV); /* two words a slot */
    size_t len = dtv[-2];
    for (size_t i = 1; i <= len; i++)
        if (dtv[2 * i + 1])
            free((void *)dtv[2 * i + 1]);
    memset(dtv, 0, (len + 1) * 16);
}

/* tcb_fill writes every field a new thread needs, keeping the stack fields. */
static void tcb_fill(char *tcb)
{
    WORD(tcb, TCB_OFF_TCB) = (uintptr_t)tcb;
    WORD(tcb, TCB_OFF_SELF) = (uintptr_t)tcb;
    *(int *)(tcb + TCB_OFF_MULTI) = 1;
    WORD(tcb, TCB_OFF_STACKGUARD) = tls_info.stack_guard;
    WORD(tcb, TCB_OFF_PTRGUARD) = tls_info.pointer_guard;
    *(uint32_t *)(tcb + TCB_OFF_FEATURE_1) = tls_info.feature_1;

    WORD(tcb, tls_info.list_off) = WORD(tcb, tls_info.list_off + 8) =
        (uintptr_t)(tcb + tls_info.list_off);
    *(uint32_t *)(tcb + tls_info.tid_off) = next_tid();

    uintptr_t head = (uintptr_t)(tcb + tls_info.robust_head_off);
    WORD(tcb, tls_info.robust_head_off - 8) = head; /* robust_prev */
    WORD(tcb, tls_info.robust_head_off) = head;     /* list: empty */
    WORD(tcb, tls_info.robust_head_off + 8) = (uintptr_t)tls_info.futex_offset;
    WORD(tcb, tls_info.robust_head_off + 16) = 0; /* list_op_pending */

    WORD(tcb, tls_info.specific_off) = (uintptr_t)(tcb + tls_info.specific_1st_off);
    *(int *)(tcb + tls_info.rseq_cpu_off) = RSEQ_CPU_ID_REGISTRATION_FAILED;
    *(char **)(tcb - tls_info.resp_off) = tcb + tls_info.res_off;
}

/* free_thread_buffers frees what glibc malloc'ed for the thread in struct pthread. */
static void free_thread_buffers(char *tcb)
{
    for (int i = 0; i < 2; i++) {
        if (tls_info.tls_state_off[i] == 0 || !WORD(tcb, tls_info.tls_state_off[i]))
            continue; /* not known yet (the malloc probe), or never allocated */
        free((void *)WORD(tcb, tls_info.tls_state_off[i]));
        WORD(tcb, tls_info.tls_state_off[i]) = 0;
    }
    /* specific[0] is specific_1stblock inside struct pthread; the rest are malloc'ed. */
    for (size_t i = 1; i < tls_info.specific_n; i++) {
        void *blk = (void *)WORD(tcb, tls_info.specific_off + 8 * i);
        if (blk) { /* keys >= 32 only: most threads have none */
            free(blk);
            WORD(tcb, tls_info.specific_off + 8 * i) = 0;
        }
    }
}

void *tls_tcb_new(void)
{
    char *tcb = tls_tcb_alloc();
    if (tcb)
        tcb_fill(tcb);
    return tcb;
}

void tls_tcb_fill(void *tcb)
{
    tcb_fill(tcb);
}

void *tls_tcb_alloc(void)
{
    char *tcb = NULL;
    if (tls_fs_method == TLS_FS_LDT) {
        if ((tcb = ldt_tcb_alloc()) != NULL && tls_info.allocate_tls(tcb) == NULL) {
            ldt_tcb_free(tcb);
            return NULL;
        }
        __atomic_add_fetch(tcb ? &stats.ldt : &stats.ldt_overflow, 1, __ATOMIC_RELAXED);
    }
    if (!tcb && !(tcb = tls_info.allocate_tls(NULL)))
        return NULL;
    dtv_trim(tcb);
    __atomic_add_fetch(&stats.created, 1, __ATOMIC_RELAXED);
    return tcb;
}

size_t tls_tcb_space(size_t extra)
{
    size_t align = tls_info.static_align ? tls_info.static_align : 64;
    /* struct pthread is aligned down from top - extra: at most align - 1 more. */
    return (tls_info.static_size + extra + align - 1 + 15) & ~(size_t)15;
}

void *tls_tcb_new_at(void *top, size_t extra, bool zeroed)
{
    GOSHIM_ASSERT(tls_fs_method != TLS_FS_LDT);
    size_t align = tls_info.static_align ? tls_info.static_align : 64;
    char *tcb =
        (char *)(((uintptr_t)top - extra - tls_info.sizeof_pthread) & ~(uintptr_t)(align - 1));
    if (!zeroed) /* _dl_allocate_tls(mem) clears nothing of struct pthread */
        memset(tcb, 0, tls_info.sizeof_pthread);
    if (tls_info.allocate_tls(tcb) == NULL)
        return NULL;
    dtv_trim(tcb);
    tcb_fill(tcb);
    __atomic_add_fetch(&stats.created, 1, __ATOMIC_RELAXED);
    return tcb;
}

void tls_tcb_end(void *tcb)
{
    GOSHIM_ASSERT(tcb != tls_self());
    free_thread_buffers(tcb);
    tls_info.deallocate_tls(tcb, false); /* the DTV and dynamic TLS; the memory is the stack's */
    __atomic_add_fetch(&stats.destroyed, 1, __ATOMIC_RELAXED);
}

void tls_tcb_prefetch(const void *tcbv)
{
    const char *tcb = tcbv;
    prefetch_lines(tcb - tls_info.libc_tls_off, tls_info.libc_tls_off + tls_info.sizeof_pthread);
}

void tls_tcb_prefetch_run(const void *tcbv)
{
    const char *tcb = tcbv;
    prefetch_lines(tcb, 1);
    for (int i = 0; i < tls_info.nmalloc; i++)
        prefetch_lines(tcb - tls_info.malloc_off[i], 1);
}

void tls_tcb_reset(void *tcbv)
{
    char *tcb = tcbv;
    uintptr_t mw[2] = {0, 0}, stack[4];
    for (int i = 0; i < tls_info.nmalloc; i++)
        mw[i] = WORD(tcb, -(ptrdiff_t)tls_info.malloc_off[i]);
    memcpy(stack, tcb + tls_info.stackblock_off, sizeof stack);

    free_thread_buffers(tcb);
    /*
     * Free dynamic TLS (and the DTV, where glibc's reinit is unknown), then
     * fresh copies of all static TLS images. With tcb installed, malloc still finds its words
     * until the libc image is copied; nothing between that copy and the
     * restore below allocates. The tid is still the old one, which owns
     * ld.so's TLS lock meanwhile.
     */
    if (tls_info.allocate_tls_init) { /* the DTV kept: no malloc, no free */
        tls_dtv_clear(tcb);
        tls_info.allocate_tls_init(tcb, tls_info.init_flag);
    } else {
        tls_info.deallocate_tls(tcb, false);
        if (tls_info.allocate_tls(tcb) == NULL)
            goshim_throw("tls_tcb_reset: out of memory for the DTV");
    }

    /* struct pthread as a new thread: zero except the self pointers and guards, then refill. */
    memset(tcb + TCB_OFF_MULTI, 0, TCB_OFF_STACKGUARD - TCB_OFF_MULTI);
    memset(tcb + TCB_OFF_PTRGUARD + 8, 0, tls_info.list_off - (TCB_OFF_PTRGUARD + 8));
    memset(tcb + tls_info.list_off, 0, tls_info.sizeof_pthread - tls_info.list_off);
    dtv_trim(tcb);
    tcb_fill(tcb);
    memcpy(tcb + tls_info.stackblock_off, stack, sizeof stack);
    for (int i = 0; i < tls_info.nmalloc; i++)
        WORD(tcb, -(ptrdiff_t)tls_info.malloc_off[i]) = mw[i];
    __atomic_add_fetch(&stats.reset, 1, __ATOMIC_RELAXED);
}

void tls_tcb_set_stack(void *tcb, void *stackblock, size_t size, size_t guard)
{
    WORD(tcb, tls_info.stackblock_off) = (uintptr_t)stackblock;
    WORD(tcb, tls_info.stackblock_off + 8) = size;
    WORD(tcb, tls_info.stackblock_off + 16) = guard; /* guardsize */
    WORD(tcb, tls_info.stackblock_off + 24) = guard; /* reported_guardsize */
}

void tls_tcb_destroy(void *tcb)
{
    GOSHIM_ASSERT(tcb != tls_self());
    free_thread_buffers(tcb);
    if (ldt_owns(tcb)) {
        tls_info.deallocate_tls(tcb, false); /* the DTV and dynamic TLS; the slot is ours */
        ldt_tcb_free(tcb);
    } else {
        tls_info.deallocate_tls(tcb, true);
    }
    __atomic_add_fetch(&stats.destroyed, 1, __ATOMIC_RELAXED);
}

uint32_t *tls_tcb_tid_word(void *tcb)
{
    return (uint32_t *)((char *)tcb + tls_info.tid_off);
}

void tls_tcb_set_tid(void *tcb, unsigned tid)
{
    *tls_tcb_tid_word(tcb) = tid;
}

unsigned tls_tcb_tid(void *tcb)
{
    return *tls_tcb_tid_word(tcb);
}

unsigned tls_fake_tid(void)
{
    return next_tid();
}

void tls_thread_start(void)
{
    tls_info.ctype_init();
}

void tls_thread_exit(void)
{
    tls_info.call_tls_dtors();
    /* The first call hands out a pending message, the second frees glibc's per-thread result. */
    dlerror();
    dlerror();
}

/* What the kernel's handle_futex_death does for an ending thread's robust mutex at w. */
static void owner_died(uint32_t *w, uint32_t tid)
{
    uint32_t v = __atomic_load_n(w, __ATOMIC_RELAXED);
    while ((v & FUTEX_TID_MASK) == tid) {
        uint32_t nv = (v & FUTEX_WAITERS) | FUTEX_OWNER_DIED;
        if (__atomic_compare_exchange_n(w, &v, nv, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
            if (v & FUTEX_WAITERS) /* robust mutexes wait on shared futexes (glibc) */
                rt_syscall(SYS_futex, (long)w, FUTEX_WAKE, 1);
            return;
        }
    }
}

void tls_robust_exit(void)
{
    if (!tls_full())
        return;
    char *tcb = tls_self();
    size_t off = tls_info.robust_head_off;
    uintptr_t head = (uintptr_t)(tcb + off);
    uint32_t tid = *(uint32_t *)(tcb + tls_info.tid_off);
    long futex_off = (long)WORD(tcb, off + 8);
    uintptr_t pending = WORD(tcb, off + 16);
    /* Entries are tagged with bit 0 for priority inheritance (the kernel's own work). */
    uintptr_t e = WORD(tcb, off);
    for (int n = 0; e != head && n < ROBUST_LIST_LIMIT; n++) { /* the kernel's bound */
        uintptr_t next = *(uintptr_t *)(e & ~(uintptr_t)1);    /* before a waiter may free it */
        if (e != pending && !(e & 1))
            owner_died((uint32_t *)(e + futex_off), tid);
        e = next;
    }
    if (pending && !(pending & 1))
        owner_died((uint32_t *)(pending + futex_off), tid);
    WORD(tcb, off) = head;
    WORD(tcb, off + 16) = 0;
}

/*
 * glibc's thread lists and a fork made on a G's TCB (fork.c). glibc keeps two lists of
 * thread descriptors (GL(dl_stack_used): threads on stacks it made; GL(dl_stack_user): the
 * main thread and threads on stacks of their own; heads in ld.so's _rtld_global). In a fork
 * child its reclaim_stacks keeps the descriptor the FS base points to (here the G's TCB) as
 * the one listed thread, drops the user list and moves every other descriptor of the used
 * list to its stack cache, tid 0, for the next pthread_create to take with its stack. The
 * child's one thread is the forking M's OS thread, whose descriptor (real_tcb) must be the
 * listed one, and whose stack - the M's scheduler stack - must not be in the cache:
 * tls_relist_child puts it back, as glibc would have left it had it forked on it. What it
 * cannot undo, for an M on a stack glibc made (sanitizer builds; Ms run on stacks of
 * goshim's, on the user list, mretire.c), is the cache's byte count, which then counts the
 * M's stack once too often: the child's glibc frees its cached stacks a little sooner.
 *
 * The heads are learnt from the lists themselves: a new thread is added at the front of
 * its list (its prev is the head), the main thread is its list's first and so its last
 * (its next is the head); a pointer into _rtld_global is a head.
 */
struct glist {
    struct glist *next, *prev;
};

static struct {
    char *lo, *hi;      /* _rtld_global */
    struct glist *used; /* GL(dl_stack_used), when known */
    struct glist *user; /* GL(dl_stack_user), when known */
} glists;

static struct glist *tcb_list(void *tcb)
{
    return (struct glist *)((char *)tcb + tls_info.list_off);
}

static bool is_head(const struct glist *e)
{
    return (const char *)e >= glists.lo && (const char *)e < glists.hi;
}

void tls_relist_note(void *tcb, enum tls_listed how, bool main_thread)
{
    struct glist **known = how == TLS_LISTED_OWN ? &glists.user : &glists.used;
    if (!tls_full() || how == TLS_LISTED_UNKNOWN || __atomic_load_n(known, __ATOMIC_RELAXED))
        return;
    if (!glists.lo) {
        Dl_info info;
        const ElfW(Sym) *sym = NULL;
        char *rtld = dlvsym(RTLD_DEFAULT, "_rtld_global", "GLIBC_PRIVATE");
        if (!rtld || !dladdr1(rtld, &info, (void **)&sym, RTLD_DL_SYMENT) || !sym)
            return;
        glists.hi = rtld + sym->st_size;
        __atomic_store_n(&glists.lo, rtld, __ATOMIC_RELEASE);
    }
    struct glist *e = tcb_list(tcb);
    struct glist *h = main_thread ? __atomic_load_n(&e->next, __ATOMIC_RELAXED)
                                  : __atomic_load_n(&e->prev, __ATOMIC_RELAXED);
    if (!is_head(h))
        return; /* another thread came first: the next M looks again */
    __atomic_store_n(known, h, __ATOMIC_RELAXED);
}

bool tls_relist_ready(enum tls_listed how)
{
    /* The used list's head, if unknown (every M on a stack of its own), is the head a
     * child's glibc lists the G's TCB on (tls_relist_child). */
    return glists.user && how != TLS_LISTED_UNKNOWN &&
           (how == TLS_LISTED_OWN || __atomic_load_n(&glists.used, __ATOMIC_RELAXED));
}

FORK_TEXT bool tls_relist_child(void *forked_on, void *kept, enum tls_listed how, unsigned tid)
{
    struct glist *on = tcb_list(forked_on), *h = on->next, *k = tcb_list(kept);
    if (!tls_relist_ready(how))
        return false;
    /* A G's TCB is no user_stack thread's: glibc lists it with its own stacks, the one head
     * in _rtld_global other than the user list's. */
    if (!glists.used && h != glists.user && is_head(h))
        glists.used = h;
    struct glist *want = how == TLS_LISTED_OWN ? glists.user : glists.used;
    /* forked_on must be the one listed thread, and the other list empty. */
    if ((h != glists.used && h != glists.user) || on->prev != h || h->next != on || h->prev != on ||
        (h != want && (want->next != want || want->prev != want)))
        return false;
    if (want == glists.used) { /* in the stack cache now: out of it */
        k->prev->next = k->next;
        k->next->prev = k->prev;
    }
    h->next = h->prev = h;
    on->next = on->prev = on; /* as tls_tcb_new leaves a G's */
    k->next = k->prev = want;
    want->next = want->prev = k;
    /* What the kernel (the new tid) and glibc's _Fork (an empty robust list, registered)
     * do to the descriptor a child is forked on. */
    tls_tcb_set_tid(kept, tid);
    uintptr_t head = (uintptr_t)kept + tls_info.robust_head_off;
    WORD(kept, tls_info.robust_head_off - 8) = head;
    WORD(kept, tls_info.robust_head_off) = head;
    rt_syscall(SYS_set_robust_list, (long)head, 24, 0);
    return true;
}

void tls_malloc_move(void *from_tcb, void *to_tcb)
{
    if (from_tcb == to_tcb)
        return;
    for (int i = 0; i < tls_info.nmalloc; i++) {
        ptrdiff_t off = -(ptrdiff_t)tls_info.malloc_off[i];
        WORD(to_tcb, off) = WORD(from_tcb, off);
        WORD(from_tcb, off) = 0;
    }
}

void *tls_malloc_handover(void *from_tcb, void *to_tcb, void *arena)
{
    if (!tls_info.arena_word || from_tcb == to_tcb) {
        tls_malloc_move(from_tcb, to_tcb);
        return NULL;
    }
    int ai = tls_info.arena_word - 1;
    ptrdiff_t a = -(ptrdiff_t)tls_info.malloc_off[ai];
    ptrdiff_t t = -(ptrdiff_t)tls_info.malloc_off[1 - ai];
    WORD(to_tcb, t) = WORD(from_tcb, t);
    WORD(from_tcb, t) = 0;
    void *out = (void *)WORD(from_tcb, a);
    WORD(from_tcb, a) = 0;
    WORD(to_tcb, a) = (uintptr_t)arena;
    return out;
}

static void *main_arena; /* the main thread's, as it started the runtime */

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

void *tls_malloc_note_main(void *main_tcb)
{
    main_arena = tls_malloc_arena(main_tcb);
    return main_arena;
}

void *tls_malloc_main(void)
{
    return main_arena;
}

bool tls_malloc_seed(void *tcb)
{
    if (!main_arena || tls_malloc_arena(tcb))
        return false;
    WORD(tcb, -(ptrdiff_t)tls_info.malloc_off[tls_info.arena_word - 1]) = (uintptr_t)main_arena;
    return true;
}

void *tls_malloc_arena(void *tcb)
{
    if (!tls_info.arena_word)
        return NULL;
    return (void *)WORD(tcb, -(ptrdiff_t)tls_info.malloc_off[tls_info.arena_word - 1]);
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
    out->static_size = tls_info.static_size;
}
