/*
 * schedinit: bring the runtime up (Go's schedinit + procresize).
 *
 * Order matters: the TLS probes run first, on an ordinary thread, because
 * they decide whether Gs get their own TCBs (and they start and join a
 * probe thread); then stacks (glibc's default size, guard support, the
 * overflow handler); then the Ps. No M exists until the first G is
 * spawned: wakep starts them on demand.
 */
#include <asm/prctl.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "libc.h"
#include "gfutex.h"
#include "netpoll.h"
#include "preempt.h"
#include "sched.h"
#include "throw.h"
#include "tls.h"

extern __thread struct g *tls_g;

struct sched_hooks sched_hooks;

void sched_set_hooks(const struct sched_hooks *h)
{
    sched_hooks = *h;
}

int sched_atfork_once(bool *done, void (*prepare)(void), void (*parent)(void), void (*child)(void))
{
    if (*done)
        return 0;
    int err = pthread_atfork(prepare, parent, child);
    *done = err == 0;
    return err;
}

int sched_atfork_init(void)
{
    static bool done;
    return sched_atfork_once(&done, sched_fork_prepare, sched_fork_parent, sched_fork_child);
}

/*
 * Under RLIMIT_AS, one malloc arena for every thread. glibc gives each
 * thread that allocates an arena of its own (up to 8 per CPU), and each
 * arena is a 64 MiB reservation the limit counts. Natively only the
 * program's threads that allocate have one; here its threads are Gs, which
 * allocate in their carrier's arena, and goshim's own threads (the TLS
 * probes, the Ms) would take one each where the program has none: with a
 * 400 MB limit, a third of it. So while a finite limit holds and the user
 * chose no arena count (MALLOC_ARENA_MAX or the glibc.malloc.arena_max
 * tunable), every thread shares the main arena, as glibc does past its
 * arena count. It must come before any thread but main allocates: glibc
 * fixes its arena count at the first such allocation.
 */
static void share_arena_under_as_limit(void)
{
    struct rlimit lim;
    const char *tun = getenv("GLIBC_TUNABLES");
    if (getrlimit(RLIMIT_AS, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY ||
        getenv("MALLOC_ARENA_MAX") || (tun && strstr(tun, "glibc.malloc.arena_max")))
        return;
    mallopt(M_ARENA_MAX, 1);
}

/*
 * What needs nothing the TLS probes find, done while their thread runs (tls_init's
 * meanwhile, or after it when none ran): the unwinder's load, the stacks, the Ps, the
 * futex table, the netpoller, the fork handlers, preemption, and for the main thread's
 * adoption M0's stack and where main's own lies. The probe thread takes 0.2-0.4 ms here
 * and these as much, side by side on two CPUs; one after the other they were a third of
 * the first pthread_create's cost. A thread that cannot be made fails tls_init before it
 * runs these: a runtime that does not start leaves no handler or fd behind.
 */
static struct {
    const struct sched_config *c;
    int nprocs;
    bool done;
    int err;   /* a positive errno, said already */
    bool g0ok; /* g0stack made (sched_adopt_main takes it) */
    struct gstack g0stack;
    void *mainlo; /* the main thread's stack (sched_main_stack) */
    size_t mainsize;
} early;

static int init_untied(const struct sched_config *c, int nprocs)
{
    libc_unwind_load();
    int rc = stack_init(c->stack_size);
    if (rc != 0) {
        rt_print(2, "goshim: cannot set up thread stacks (error %d)\n", -rc);
        return -rc;
    }
    stack_overflow_init(sched_stack_lookup);
    if (procresize(nprocs) != 0)
        return ENOMEM;
    sched_steal_order_init((uint32_t)nprocs);
    gfutex_init(); /* says why not */
    int nerr = netpoll_init();
    if (nerr != 0) {
        rt_print(2, "goshim: cannot create the netpoller's epoll instance (error %d)\n", nerr);
        return nerr;
    }
    int ferr = sched_atfork_init();
    if (ferr != 0) {
        rt_print(2, "goshim: cannot register the fork handlers (error %d)\n", ferr);
        return ferr;
    }
    if (c->chaos)
        chaos_init(c->chaos_seed);
    preempt_init(c->preempt_ns, c->preempt_signal, c->preempt_signal_set, c->preempt_handoff,
                 c->preempt_walk);
    early.g0ok = stack_alloc(NULL, M_STACK_SIZE, M_STACK_GUARD, &early.g0stack) == 0;
    sched_main_stack(&early.mainlo, &early.mainsize);
    return 0;
}

static void init_meanwhile(void)
{
    if (early.done)
        return;
    early.done = true;
    early.err = init_untied(early.c, early.nprocs);
}

int sched_init(const struct sched_config *c)
{
    if (sched.started)
        return EBUSY;
    libc_init();    /* before any signal handler or fork child could be the first to ask */
    m_fence_init(); /* before any M runs */
    fault_init(&c->fault, c->chaos ? &c->chaos_seed : NULL);
    int nprocs = c->nprocs > 0 ? c->nprocs : sched_usable_cpus();
    if (nprocs > MAX_PROCS)
        nprocs = MAX_PROCS;
    sched.maxmcount = c->maxthreads > 0 ? c->maxthreads : 10000;

    share_arena_under_as_limit(); /* before the TLS probes' threads allocate */
    early.c = c;
    early.nprocs = nprocs;
    int tr = tls_init(c->tls_mode, init_meanwhile, sched_spare_arrive); /* tls_full() says */
    if (tr < 0) {
        rt_print(2,
                 "goshim: cannot create a thread (error %d: RLIMIT_NPROC, kernel.threads-max or "
                 "a cgroup's pids.max reached)\n",
                 -tr);
        return -tr;
    }
    if (tls_full())
        sched_spare_expect(); /* the probe's thread, to be sysmon */
    sched.tls_g_off = (size_t)((char *)&tls_g - (char *)tls_self());
    init_meanwhile(); /* done already unless no probe thread ran */
    if (early.err != 0) {
        sched_spare_dismiss();
        return early.err;
    }
    if (tls_full())
        setxid_init();
    sched.starttime = nanotime();
    cputime_init(sched.starttime);
    sched.started = true;
    sysmon_start(c->schedtrace_ms, c->scheddetail);
    sched_spare_dismiss(); /* sysmon took it, or it ends */
    if (c->stats) {
        stats_open();
        atexit(stats_at_exit);
    }
    return 0;
}

/* M0's alternate signal stack, its own; the program's own one, set before goshim started,
 * is returned for the main G: it stays the G's, not M0's, so it is taken off the OS thread
 * while M0 gets its own (a start deferred to the first pthread_create finds faulthandler's,
 * say) and put back for the G, which runs on. */
static stack_t adopt_altstack(struct m *mp)
{
    stack_t alt;
    if (rt_syscall(SYS_sigaltstack, NULL, &alt, 0) != 0 || (alt.ss_flags & SS_DISABLE))
        alt = (stack_t){.ss_flags = SS_DISABLE};
    alt.ss_flags &= ~SS_ONSTACK;
    if (!(alt.ss_flags & SS_DISABLE)) {
        stack_t off = {.ss_flags = SS_DISABLE};
        rt_syscall(SYS_sigaltstack, &off, 0, 0);
    }
    stack_thread_init(NULL);
    m_record_altstack(mp);
    return alt;
}

/* The thread's CPU time so far, for the main G's clock: it goes on from what the thread
 * used before (the program ran natively until its first pthread_create, with a deferred
 * start). */
static int64_t thread_cpu_so_far(void)
{
    struct timespec used;
    if (rt_syscall(SYS_clock_gettime, CLOCK_THREAD_CPUTIME_ID, (long)&used, 0) != 0)
        return 0;
    return (int64_t)used.tv_sec * 1000000000 + used.tv_nsec;
}

/* The main G keeps the adopting thread's malloc arena wherever it runs (schedule.c). */
static void adopt_arena(struct m *mp, void *self)
{
    if (tls_malloc_note_main(self))
        mp->curmain = true; /* the main G runs on M0, on its own TCB */
}

/* Where glibc lists the adopting thread: the main thread on the user list; a thread that
 * started the runtime in its place, on one list or the other (fork.c: the relisting). */
static void adopt_note_list(struct m *mp, void *self)
{
    bool main_thread = mp->tid == (int)rt_syscall(SYS_getpid, 0, 0, 0);
    mp->listed = main_thread ? TLS_LISTED_OWN : TLS_LISTED_UNKNOWN;
    tls_relist_note(self, mp->listed, main_thread);
}

/* The kernel's PROCMAP_QUERY (Linux 6.11, uapi linux/fs.h, which Debian 12's headers
 * predate): the mapping that covers query_addr, or (COVERING_OR_NEXT) the next one. */
struct vma_query {
    uint64_t size, query_flags, query_addr, vma_start, vma_end, vma_flags, vma_page_size;
    uint64_t vma_offset, inode;
    uint32_t dev_major, dev_minor, vma_name_size, build_id_size;
    uint64_t vma_name_addr, build_id_addr;
};
#define VMA_QUERY _IOWR('f', 17, struct vma_query)
enum { VMA_COVERING_OR_NEXT = 0x10, VMA_STEPS = 32 };

extern void *__libc_stack_end;

static bool vma_query(long fd, uintptr_t addr, uint64_t flags, struct vma_query *q)
{
    memset(q, 0, sizeof *q);
    q->size = sizeof *q;
    q->query_flags = flags;
    q->query_addr = addr;
    return rt_syscall(SYS_ioctl, fd, VMA_QUERY, q) == 0;
}

/*
 * The main thread's stack, as glibc's pthread_getattr_np gives it: from the page above
 * __libc_stack_end down by the soft RLIMIT_STACK less what its mapping holds above that
 * page, rounded down to a page, and no lower than the end of the mapping below. glibc
 * finds the two mappings in /proc/self/maps, 0.1 ms of every threaded start here;
 * PROCMAP_QUERY names them. False (glibc's way then) where the kernel lacks it, or with
 * no limit (glibc's answer is then the gap down to the mapping below, found by steps).
 */
static bool main_stack_query(long fd, void **lo, size_t *size)
{
    struct rlimit rl;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), at = (uintptr_t)__libc_stack_end;
    uintptr_t top = (at & -page) + page;
    struct vma_query st, q;
    if (rt_syscall6(SYS_prlimit64, 0, RLIMIT_STACK, 0, (long)&rl, 0, 0) != 0 ||
        rl.rlim_cur == RLIM_INFINITY || !vma_query(fd, at, 0, &st) || st.vma_end < top ||
        st.vma_end - top > rl.rlim_cur)
        return false;
    uintptr_t want = (rl.rlim_cur - (st.vma_end - top)) & -page;
    if (want > top)
        return false;
    /* The mappings from top - want up to the stack's: the last one's end bounds it. */
    uintptr_t below = 0;
    if (!vma_query(fd, top - want, VMA_COVERING_OR_NEXT, &q))
        return false;
    for (int i = 0; q.vma_start < st.vma_start; i++) {
        below = q.vma_end;
        if (i == VMA_STEPS || !vma_query(fd, q.vma_end, VMA_COVERING_OR_NEXT, &q))
            return false;
    }
    *size = want > top - below ? top - below : want;
    *lo = (void *)(top - *size);
    return true;
}

void sched_main_stack(void **lo, size_t *size)
{
    long fd =
        rt_syscall6(SYS_openat, AT_FDCWD, (long)"/proc/self/maps", O_RDONLY | O_CLOEXEC, 0, 0, 0);
    bool done = fd >= 0 && main_stack_query(fd, lo, size);
    if (fd >= 0)
        rt_syscall(SYS_close, fd, 0, 0);
    pthread_attr_t attr;
    if (!done && libc_pthread_getattr_np(libc_pthread_self(), &attr) == 0) {
        pthread_attr_getstack(&attr, lo, size);
        pthread_attr_destroy(&attr);
    }
}

/* The main G's slice begins now, not when sysmon began to watch the Ps (sysmon_start,
 * before the adoption): else the program's first thread, the first G to wait, found it
 * past a slice, and a preemption was asked at once. */
static void main_slice_begins(struct p *pp)
{
    int64_t now = nanotime();
    __atomic_store_n(&pp->schedwhen, now, __ATOMIC_RELAXED);
    __atomic_store_n(&pp->switchwhen, now, __ATOMIC_RELAXED);
    __atomic_store_n(&pp->schedtick, pp->schedtick + 1, __ATOMIC_RELEASE);
    __atomic_store_n(&pp->nschedule, pp->nschedule + 1, __ATOMIC_RELEASE);
}

int sched_adopt_main(void)
{
    if (!sched.started || sched_self() != NULL)
        return EINVAL;
    struct m *mp = allocm();
    struct g *gp = malg();
    if (!mp || !gp)
        return ENOMEM;

    /* M0's scheduler stack and, with per-G TLS, its own TCB. */
    struct gstack g0stack = early.g0stack;
    if (!early.g0ok && stack_alloc(NULL, M_STACK_SIZE, M_STACK_GUARD, &g0stack) != 0)
        return ENOMEM;
    early.g0ok = false; /* M0's now */
    void *self = tls_self();
    void *g0tcb = self;
    if (tls_full()) {
        g0tcb = tls_tcb_new();
        if (!g0tcb)
            return ENOMEM;
        tls_tcb_set_stack(g0tcb, g0stack.lo - g0stack.guard,
                          (size_t)(g0stack.hi - g0stack.lo) + g0stack.guard, g0stack.guard);
    }
    if (rt_syscall(SYS_arch_prctl, ARCH_SET_GS, mp, 0) != 0) {
        rt_print(2, "goshim: cannot set the GS base of the main thread\n");
        return ENOSYS;
    }
    mp->tid = (int)rt_syscall(SYS_gettid, 0, 0, 0);
    mp->cpuclock = libc_thread_cpuclock(mp->tid);
    preempt_m_init(mp);
    mp->g0tcb = g0tcb;
    mp->curfs = self;
    cputime_m_ready(mp); /* the main thread's CPU-time clock runs from here (cputime.c) */
    mp->real_tcb = self;
    adopt_note_list(mp, self);
    mp->g0_sp = (uintptr_t)g0stack.hi & ~(uintptr_t)15;
    if (g0tcb != self)
        m_mark_own_tls(mp, g0tcb); /* errno mode: g0 shares main's TLS, no marker */
    mp->g0_lo = g0stack.lo;
    mp->g0_fiber = san_fiber_create();
    stack_t alt = adopt_altstack(mp);

    /* The main G: this very thread, its stack and TCB. */
    void *stackaddr = early.mainlo;
    size_t stacksize = early.mainsize;
    if (!stackaddr)
        sched_main_stack(&stackaddr, &stacksize);
    if (stackaddr)
        stack_user(stackaddr, stacksize, &gp->stack);
    gp->tcb = self;
    gp->flags = G_STARTED | G_MAIN;
    gp->cpu_ns = thread_cpu_so_far();
    gp->sigmask = mp->sigmask = thread_sigmask();
    gp->altstack = alt;
    m_apply_altstack(mp, gp);
    gp->san_fiber = san_fiber_current();
    gp->goid = __atomic_add_fetch(&sched.goidgen, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&sched.nspawned, 1, __ATOMIC_RELAXED);
    gp->atomicstatus = Grunning;
    gp->m = mp;
    mp->curg = gp;
    tls_g = gp;

    runtime_lock(&sched.lock);
    struct p *pp = pidleget();
    mp->id = sched.mids++;
    sched.mcount++;
    mp->alllink = sched.allm;
    sched.allm = mp;
    runtime_unlock(&sched.lock);
    if (!pp)
        goshim_throw("sched_adopt_main: no idle P");
    acquirep(pp);
    main_slice_begins(pp);
    adopt_arena(mp, self);
    mmaker_init(); /* after M0 took its id and P: the maker's first act is a reserve M */
    return 0;
}
