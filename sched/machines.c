/*
 * Ms: OS threads that carry Gs.
 *
 * An M is created (with the real pthread_create) only when there is a P to run and no idle
 * M to run it: startm takes an idle M from sched.midle or makes a new one, hands it the P
 * through m->nextp and wakes it. An M with nothing to do releases its P and sleeps on its
 * note in stopm. Idle Ms beyond one per P and a few more end their threads after
 * M_RETIRE_NS of idleness (m_retire): a program that once had a thousand threads blocked
 * in the kernel would otherwise keep a thousand OS threads, and copy them at every fork.
 * One idle M at a time sleeps with a timeout, until the earliest timer (stopm,
 * timer_wakeup): an idle process wakes up exactly for its timers, and one with no timers
 * sleeps forever. While Gs wait for fds, one idle M blocks in netpoll instead of on its
 * note (poll_m). The count is capped by GOSHIM_MAXTHREADS (default 10000, as Go).
 *
 * Each M records itself in its GS base (arch_prctl(ARCH_SET_GS), once), so getm() is one
 * load and works whatever the FS base is: the FS base belongs to the G running on the M
 * (every G has its own glibc TCB), so per-M state must never live in __thread. glibc does
 * not use GS on x86-64.
 *
 * The M's own stack is its scheduler stack (g0): mcall resets to the same spot (m->g0_sp)
 * each time, so g0 never accumulates frames.
 *
 * An idle M blocks the signals the shim routes (signal.c says which, and how it routes
 * one that lands on it while it sleeps).
 */
#include <asm/prctl.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>

#include "libc.h"
#include "sched.h"
#include "ldt.h"
#include "netpoll.h"
#include "preempt.h"
#include "throw.h"
#include "timer.h"
#include "tls.h"

#define SCAVENGE_IDLE_NS 2000000 /* idle this long before stack_scavenge (stays_idle) */

/* An M on no page boundary: after a fork, the forking M's first writes to its struct (its
 * locks, its system call's) copy one page in the parent, not two (fork.c). */
enum { M_ALIGN = 512 };
_Static_assert(sizeof(struct m) <= M_ALIGN, "struct m fits in one M_ALIGN slot");

struct m *allocm(void)
{
    struct m *mp = rtpool_alloc(sizeof *mp, M_ALIGN);
    if (!mp || !(mp->stacks = rtpool_alloc(sizeof *mp->stacks, 64)))
        return NULL;
    mp->self = mp;
    mp->id = -1;
    static int64_t nallocated;
    int64_t n = __atomic_add_fetch(&nallocated, 1, __ATOMIC_RELAXED);
    mp->fastrand =
        sched_chaos ? chaos_seed_for(n) : (uint64_t)nanotime() * 0x9E3779B97F4A7C15ULL | 1;
    return mp;
}

/*
 * In the ldt FS method an M's own glibc descriptor lies above 4 GiB, so
 * installing it is a system call, which an M would pay each time it goes
 * idle (restore_own_fs_altstack). So its scheduler context (g0) gets a TCB of the
 * low arena instead, as M0's g0 has a TCB of its own (sched_adopt_main);
 * the glibc descriptor (real_tcb) is installed only for fork and set*id.
 * The last thing mstart does before it schedules: the FS base changes
 * here, and nothing after it in mstart touches TLS.
 */
static void m_low_g0tcb(struct m *mp)
{
    if (!tls_full() || tls_fs_method != TLS_FS_LDT)
        return;
    void *t = tls_tcb_new();
    if (t && !ldt_owns(t)) { /* past the LDT cap: no gain */
        tls_tcb_destroy(t);
        t = NULL;
    }
    if (!t)
        return;
    tls_tcb_set_stack(t, mp->g0_lo, (size_t)((char *)mp->g0_sp - (char *)mp->g0_lo), 0);
    m_mark_own_tls(mp, t);
    tls_malloc_move(mp->real_tcb, t);
    ctx_setfs(t);
    mp->g0tcb = t;
    mp->curfs = t;
}

/* An M's g0, on the stack below mstart's frame: its first P, or idle; then it schedules. */
GOSHIM_NO_TSAN static void m_run(void *arg)
{
    struct m *mp = arg;
    struct p *pp = mp->nextp;
    mp->nextp = NULL;
    if (pp)
        acquirep(pp);
    else
        stopm(); /* made by the maker: idle until startm needs it, unless work waits */
    cputime_m_ready(mp);
    schedule();
}

/* Thread body of every M but M0: bind GS, then schedule until it retires. */
GOSHIM_NO_TSAN static void *mstart(void *arg)
{
    struct m *mp = arg;
    long rc = rt_syscall(SYS_arch_prctl, ARCH_SET_GS, mp, 0);
    if (rc != 0)
        goshim_throw("mstart: arch_prctl(ARCH_SET_GS) failed");
    rt_syscall6(SYS_rt_sigprocmask, SIG_SETMASK, (long)&mp->sigmask, 0, sizeof mp->sigmask, 0,
                0); /* the creator's (newm) */
    mp->tid = (int)rt_syscall(SYS_gettid, 0, 0, 0);
    mp->cpuclock = libc_thread_cpuclock(mp->tid);
    preempt_m_init(mp);
    mp->g0tcb = tls_self();
    mp->curfs = mp->g0tcb;
    mp->real_tcb = mp->g0tcb;
    if (mp->stacks->own.map) { /* newm gave it (m_stack): it waits for this thread to be gone */
        mp->ownstack_tcb = mp->real_tcb;
        mp->listed = TLS_LISTED_OWN;
    } else {
        mp->listed = TLS_LISTED_GLIBC;
    }
    tls_relist_note(mp->real_tcb, mp->listed, false);
    mp->sigmask = thread_sigmask();
    __atomic_store_n(&mp->ong0, 1, __ATOMIC_SEQ_CST);
    m_mark_own_tls(mp, mp->g0tcb);
    stack_thread_init(&mp->stacks->alt);
    m_record_altstack(mp);
    /* Everything below this point of the thread stack is the g0 stack; mstart's frame,
     * above it, holds the context m_retire resumes (ctx_mcall saves it there). */
    uintptr_t sp;
    __asm__ volatile("mov %%rsp, %0" : "=r"(sp));
    mp->g0_sp = (sp - 1024) & ~(uintptr_t)15;
    mp->g0_lo = (char *)mp->g0_sp - M_STACK_SIZE / 2;
    mp->g0_fiber = san_fiber_current();
    m_low_g0tcb(mp);
    ctx_mcall(&mp->exitctx, m_run, mp, mp->g0_sp);
    m_exit(mp);
    return NULL;
}

/* Whether a G is runnable anywhere (a hint: queues read racily). */
static bool any_runnable(void)
{
    if (__atomic_load_n(&sched.runqsize, __ATOMIC_RELAXED) > 0)
        return true;
    for (int32_t i = 0; i < sched.gomaxprocs; i++)
        if (!runqempty(sched.allp[i]))
            return true;
    return false;
}

/*
 * No M could be made for a P: say so once per process. The kernel's refusal
 * (err) always, whoever asked: sysmon's hand-off of a P blocked in a system
 * call is what it strands most. The cap (GOSHIM_MAXTHREADS) only when a
 * running thread's work is what waits: a G asked for the M (pthread_create,
 * a wake, a system call handing its P off) and a G is runnable. When the
 * scheduler itself asks (an M back from the netpoller with the one G it is
 * about to run, as in every subshell of a shell script), that M runs the
 * work and nothing waits: no line then.
 */
static void warn_no_m(int err, bool injected, bool for_g)
{
    static int warned;
    if (err != 0) { /* the kernel's refusal: said once, whoever asked */
        if (fault_first(FAULT_M))
            rt_print(2,
                     "goshim: cannot create an OS thread (error %d; RLIMIT_NPROC?): the "
                     "program's threads share the OS threads goshim has, and it tries again "
                     "when work waits%s\n",
                     err, fault_note(injected));
        return;
    }
    /* (the maker's: the G saw its work queued when it asked; it may have run since) */
    if (!for_g || (!any_runnable() && sched_self() != NULL) ||
        __atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
        return;
    rt_print(2,
             "goshim: thread limit reached (%d OS threads, GOSHIM_MAXTHREADS): "
             "runnable tasks wait for a running thread\n",
             sched.maxmcount);
}

/* Move pp's runnable Gs to the global queue: pp has no M now, and no other M steals
 * from it (it is in hand-off, or idle). */
void runq_to_global(struct p *pp)
{
    struct gqueue q = {NULL, NULL};
    int32_t nq = 0;
    bool inherit;
    for (struct g *gp; (gp = runqget(pp, &inherit)) != NULL; nq++) {
        gp->schedlink = NULL;
        if (q.tail)
            q.tail->schedlink = gp;
        else
            q.head = gp;
        q.tail = gp;
    }
    if (nq)
        globrunqputbatch(&q, nq);
}

/*
 * Create an M that starts by running pp, or (pp NULL: the maker's) idle; why: who
 * wanted it (warn_no_m), a reserve's failure is not said.
 * glibc's pthread_create calls the program's calloc (the new thread's DTV), and a
 * program's malloc may take a pthread mutex (jemalloc's do): if a G in pp's queue holds
 * it, only another M can let it go, and none steals from pp meanwhile. So pp's Gs go to
 * the global queue first (mmaker.c says more).
 */
bool newm(struct p *pp, bool spinning, enum newm_for why)
{
    int err = 0;
    bool injected = false;
    runtime_lock(&sched.lock);
    if (sched.mcount >= sched.maxmcount) {
        runtime_unlock(&sched.lock);
        goto fail;
    }
    sched.mcount++;
    struct m *mp = m_reuse();
    runtime_unlock(&sched.lock);

    if (pp)
        runq_to_global(pp);
    err = ENOMEM;
    if (!mp && !(mp = m_alloc_listed()))
        goto undo;
    mp->nextp = pp;
    mp->spinning = spinning;
    mp->coming = pp == NULL;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    char *stack = m_stack(mp);
    if (stack)
        pthread_attr_setstack(&attr, stack, M_STACK_SIZE);
    else
        pthread_attr_setstacksize(&attr, M_STACK_SIZE);
    /* The new thread inherits the creator's mask and GS base: until mstart points GS at
     * the new M, the dispatcher would take it for the creator's M, running the
     * creator's G, and run a process signal's handler here, on no thread of the program
     * (as when a main thread parked in sleep has its P handed to a new M).
     * So it starts with every signal blocked but glibc's two (set*id reaches every
     * thread) and installs the creator's mask, kept in mp->sigmask, once it is an M. */
    uint64_t old = rt_mask_swap(RT_MASK_OWN_THREAD);
    mp->sigmask = old;
    pthread_t th;
    injected = fault_inject(FAULT_M);
    err = injected ? EAGAIN : libc_pthread_create(&th, &attr, mstart, mp);
    rt_mask_swap(old);
    pthread_attr_destroy(&attr);
    if (err == 0) {
        /* Counted once its thread exists (it may reach stopm first: -1 for a moment).
         * Not before: a G that sees one coming does not wait for the maker
         * (mmaker_m_for_block), which may be waiting for the program's lock in there. */
        runtime_lock(&sched.lock);
        sched.nmcoming += pp == NULL;
        if (pp == NULL && why != NEWM_RESERVE)
            mmaker_counted(); /* the maker's, for a request: no longer wanted, coming */
        runtime_unlock(&sched.lock);
        return true;
    }
undo:
    runtime_lock(&sched.lock);
    sched.mcount--;
    if (mp)
        m_unstarted(mp);
    runtime_unlock(&sched.lock);
fail:
    if (why == NEWM_RESERVE)
        return false; /* a reserve, not needed yet: said when one is */
    __atomic_fetch_add(&sched.nmthreadfail, 1, __ATOMIC_RELAXED);
    warn_no_m(err, injected, why == NEWM_G);
    if (!pp)
        return false; /* the maker's: the P it was for stays idle, its Gs queued (m_retry) */
    /* No M for pp: its Gs go to the global queue, where the next M that
     * comes back (from a system call, say) finds them; pp goes idle. */
    runq_to_global(pp);
    runtime_lock(&sched.lock);
    pidleput(pp);
    runtime_unlock(&sched.lock);
    if (spinning)
        __atomic_fetch_sub(&sched.nmspinning, 1, __ATOMIC_RELAXED);
    return false;
}

/*
 * sysmon, each round: once an M could not be made, a P may sit idle while work waits
 * for it (runnable Gs, or a due timer, which only an M with a P runs) and every M
 * is blocked in the kernel, where no wakep runs: try again, as the next wakep would.
 */
void m_retry(int64_t now)
{
    if (__atomic_load_n(&sched.nmthreadfail, __ATOMIC_RELAXED) == 0 ||
        __atomic_load_n(&sched.npidle, __ATOMIC_RELAXED) == 0 ||
        __atomic_load_n(&sched.nmspinning, __ATOMIC_RELAXED) > 0)
        return;
    int64_t t = timers_next();
    if ((t < 0 || t > now) && !any_runnable())
        return;
    startm(NULL, false);
}

/*
 * Schedule some M to run pp (or any idle P if pp is NULL). With spinning,
 * the caller already counted the new M in sched.nmspinning; if no P is
 * idle the count is undone.
 */
/* The M whose handler routes a signal while it sleeps (sched_route_asleep): startm's pick. */
__thread struct m *asleep_self __attribute__((tls_model("initial-exec")));

void startm(struct p *pp, bool spinning)
{
    runtime_lock(&sched.lock);
    if (pp == NULL) {
        pp = pidleget();
        if (pp == NULL) {
            runtime_unlock(&sched.lock);
            if (spinning)
                __atomic_fetch_sub(&sched.nmspinning, 1, __ATOMIC_RELAXED);
            return;
        }
    }
    /* A handler on an idle M readied the G: that M runs it, woken already. */
    struct m *self = asleep_self;
    struct m *nmp = self && mremove(self) ? self : mget();
    bool last = sched.nmidle == 0;
    runtime_unlock(&sched.lock);
    if (nmp == NULL) {
        if (!mmaker_ask(pp, spinning))
            newm(pp, spinning, sched_self() ? NEWM_G : NEWM_SCHED);
        return;
    }
    if (last)
        mmaker_poke();
    mwake(nmp, pp, spinning);
}

/* Hand pp to the idle M nmp (taken off sched.midle) and wake it. */
void mwake(struct m *nmp, struct p *pp, bool spinning)
{
    if (nmp->spinning)
        goshim_throw("startm: m is spinning");
    if (nmp->nextp)
        goshim_throw("startm: m has p");
    nmp->spinning = spinning;
    nmp->nextp = pp;
    __atomic_fetch_add(&nmp->nwoken, 1, __ATOMIC_RELAXED);
    notewakeup(&nmp->park);
}

/*
 * The idle M that sleeps with a timeout for the earliest timer, and until
 * when; sched.lock. It is on sched.midle; whoever takes it off the list
 * (mget, timer_wakeup, or the M itself on timeout, all through mremove)
 * clears timer_m. Another M may still sleep with a later timeout (it was
 * the watcher before a new earliest timer came): it wakes once, finds
 * nothing, and sleeps again.
 */
static struct m *timer_m;
static int64_t timer_m_until;

/* An M blocked in netpoll (off sched.midle), and until when (-1 forever);
 * sched.lock. */
static struct m *poll_m;
static int64_t poll_m_until;

/* Fork child: the Ms that watched the timers or polled were the parent's. */
void machines_fork_child(void)
{
    FORK_SET(timer_m, NULL);
    FORK_SET(poll_m, NULL);
}

/*
 * Block in netpoll until an fd event, the earliest timer or netpoll_break,
 * as the one polling M. Returns with a P if there is work for one; false
 * (no P) otherwise. Called without sched.lock, without a P.
 */
static bool poll_blocking(struct m *mp, int64_t until)
{
    netpoll(until);
    runtime_lock(&sched.lock);
    poll_m = NULL;
    struct p *pp = NULL;
    int64_t next = timers_next();
    if (sched.runqsize > 0 || (next >= 0 && next <= nanotime()))
        pp = pidleget();
    runtime_unlock(&sched.lock);
    if (!pp)
        return false;
    (void)mp;
    acquirep(pp);
    return true;
}

/* Sleep on the M's note until woken or until the monotonic time until.
 * Returns true if woken. */
static bool m_sleep_until(struct m *mp, int64_t until)
{
    int64_t ns = until - nanotime();
    if (ns <= 0)
        return __atomic_load_n(&mp->park.key, __ATOMIC_ACQUIRE) != 0;
    return notetsleep(&mp->park, ns) != 0;
}

/* sched.lock held: every M taken off sched.midle (the list returned, linked by schedlink),
 * the timer watcher forgotten (the woken one takes the timers up again); *polling: an M
 * blocks in netpoll. For sched_idle_block (signal.c). */
struct m *midle_take_all(bool *polling)
{
    struct m *idle = sched.midle;
    sched.midle = NULL;
    sched.nmidle = 0;
    timer_m = NULL;
    *polling = poll_m != NULL;
    return idle;
}

/*
 * Stop the current M until startm gives it a P. Called without a P;
 * returns holding one.
 *
 * If timers are pending and no other M sleeps until an earlier (or the
 * same) deadline, this M sleeps at most until the earliest timer. On
 * timeout it takes itself off sched.midle (if it is no longer there,
 * startm or timer_wakeup is waking it: wait for the note as usual) and
 * takes an idle P to run the timers (findrunnable runs due timers first).
 * If no P is idle, the Ms running the Ps run the timers at their next
 * schedule: this M sleeps without a timeout until woken. Woken without a P
 * (timer_wakeup: a new earliest timer), it sleeps again with the new
 * deadline. With no timers it sleeps until startm wakes it.
 */
/*
 * stays_idle: before stack_scavenge, the M sleeps SCAVENGE_IDLE_NS (less
 * if its timer comes sooner); true if nobody woke it meanwhile. A loop
 * that creates and joins batches of threads idles between them for
 * microseconds: scavenging at once there (a mincore per stack) would be
 * a sizeable part of every batch, for stacks the next batch takes again
 * within the millisecond. The sleep's wake-up, if
 * any, is the next sleep's (the note stays set).
 */
static bool stays_idle(struct m *mp, int64_t until)
{
    int64_t ns = SCAVENGE_IDLE_NS;
    if (until >= 0 && until - nanotime() < ns)
        ns = until - nanotime();
    if (ns <= 0)
        return __atomic_load_n(&mp->park.key, __ATOMIC_ACQUIRE) == 0;
    return notetsleep(&mp->park, ns) == 0;
}

static bool stays_idle_flagged(struct m *mp, int64_t until)
{
    __atomic_store_n(&mp->idle_sleep, 1, __ATOMIC_RELEASE);
    route_posted_here(); /* see stopm */
    bool stays = stays_idle(mp, until);
    __atomic_store_n(&mp->idle_sleep, 0, __ATOMIC_RELEASE);
    return stays;
}

/* Idle time releases exited threads' stack pages, and ended Ms' stacks beyond those kept. */
static void idle_release(struct m *mp, int64_t until)
{
    if (stack_scavenge_due() && stays_idle_flagged(mp, until))
        stack_scavenge(&mp->park);
    __atomic_store_n(&sched.scavasked, 0, __ATOMIC_RELEASE); /* scavenge_ask */
    m_stacks_trim();
}

/* Work queued with a P idle and no M for it (sched.lock held): what mmaker_ask leaves
 * while the maker makes an M; this may be the one it made, or one back early. */
static struct p *p_for_queued_work(void)
{
    return sched.runqsize > 0 && sched.pidle ? pidleget() : NULL;
}

/*
 * A new M arriving (sched.lock): an idle P to steal with, if Gs wait on a running P's queue
 * and no M spins. A wakep that found no idle M asked the maker, and the M it gets may come
 * after the Gs were queued (a program's first pthread_creates, as the runtime starts, while
 * the reserve M is still on its way): that wake-up is the new M's to do, or nobody steals
 * them and they wait for their P's G to block (its first threads ran on one CPU).
 */
static struct p *p_to_steal_with(void)
{
    if (!sched.pidle || __atomic_load_n(&sched.nmspinning, __ATOMIC_SEQ_CST) != 0 ||
        !any_runq_nonempty())
        return NULL;
    return pidleget();
}

/* An M going idle (sched.lock held): it becomes the one that wakes for the
 * earliest timer if none does it sooner; when it is to wake, or -1. Read under
 * sched.lock: timer_add publishes when0 before it takes sched.lock in
 * timer_wakeup, so either this sees the new timer or timer_wakeup sees the M
 * on the idle list. */
static int64_t watch_timers(struct m *mp)
{
    int64_t when = timers_next();
    if (when < 0 || (timer_m != NULL && timer_m_until <= when))
        return -1;
    timer_m = mp;
    timer_m_until = when;
    return when;
}

/*
 * mp's timed sleep in stopm ended with nobody waking it. Returns a P to run the timers
 * with, or NULL: then *again says it looks again (stopm's loop) rather than waits for
 * the wake-up that is coming (someone took it off sched.midle). A surplus M ends here
 * unless the idle Ms fell to idle_keep meanwhile.
 */
static struct p *idle_timed_out(struct m *mp, bool surplus, bool *again)
{
    runtime_lock(&sched.lock);
    *again = mremove(mp);
    if (!*again || surplus) {
        if (surplus && *again && sched.nmidle >= m_idle_keep())
            m_retire(mp);
        runtime_unlock(&sched.lock);
        return NULL;
    }
    struct p *pp = pidleget();
    runtime_unlock(&sched.lock);
    return pp;
}

/* stopm's sleep on the idle list (mput), until woken or until: the P to run, or NULL to
 * look again, *watch saying whether with a timeout for the timers. */
static struct p *idle_sleep(struct m *mp, int64_t until, bool surplus, bool *watch)
{
    __atomic_fetch_add(&mp->nstopm, 1, __ATOMIC_RELAXED);
    idle_release(mp, until);
    __atomic_store_n(&mp->idle_sleep, 1, __ATOMIC_RELEASE);
    route_posted_here(); /* posted since the loop's: from now on its handler routes */
    bool woken = until < 0 ? (notesleep(&mp->park), true) : m_sleep_until(mp, until);
    __atomic_store_n(&mp->idle_sleep, 0, __ATOMIC_RELEASE);
    if (!woken) {
        /* Timed out: the timers need a P, or a surplus M ends. */
        bool again;
        struct p *pp = idle_timed_out(mp, surplus, &again);
        if (pp)
            return pp;
        if (again) {
            *watch = *watch && surplus; /* else every P runs: their Ms run the timers */
            return NULL;
        }
        notesleep(&mp->park); /* startm or timer_wakeup is waking us */
    }
    noteclear(&mp->park);
    m_end_if_shed(mp);
    struct p *pp = mp->nextp;
    mp->nextp = NULL;
    *watch = true; /* without a P: timer_wakeup, a new earliest timer */
    return pp;
}

/* Unlock sched.lock as an M that is busy after all: with came (it was coming), the
 * maker may have left the reserve to it (mmaker_reserve_left). */
static void unlock_busy(bool came)
{
    bool none = mmaker_reserve_left(came);
    runtime_unlock(&sched.lock);
    if (none)
        mmaker_poke();
}

void stopm(void)
{
    struct m *mp = getm();
    if (mp->p)
        goshim_throw("stopm: holding p");
    if (mp->spinning)
        goshim_throw("stopm: spinning");
    bool watch = true;   /* may sleep with a timeout for the timers */
    bool came = false;   /* it was coming or going (a poke if it is busy after all) */
    routes_soon_end(mp); /* it may sleep: a handler that lands here posts with a kick */
    if (sched_lone()) {
        sched_helpers_start(); /* a fork child's: its thread parks, they serve it now */
        sysmon_lone_parked();
    }
    for (;;) {
        int64_t until = -1;
        route_posted_here(); /* what it readies goes to the global queue, found below */
        block_while_idle(mp);
        runtime_lock(&sched.lock);
        bool arrived = mp->coming;
        /* The maker's new M, or one that gave its P back: idle below, or it takes a P. */
        if (mp->coming || mp->going) {
            sched.nmcoming -= mp->coming;
            sched.nmgoing -= mp->going;
            mp->coming = mp->going = false;
            came = true;
        }
        if (idle_unblocked(mp)) { /* sched_idle_block came meanwhile */
            runtime_unlock(&sched.lock);
            continue;
        }
        int64_t next = timers_next();
        if (poll_m == NULL && netpoll_anywaiters() && sched.runqsize == 0 &&
            (next < 0 || (watch && next > nanotime()))) {
            /* Gs wait for fds: this M blocks in epoll, until the next timer. */
            poll_m = mp;
            poll_m_until = next;
            unlock_busy(came);
            if (poll_blocking(mp, next))
                return;
            continue;
        }
        struct p *pp = p_for_queued_work();
        if (pp) {
            unlock_busy(came);
            acquirep(pp);
            return;
        }
        if (arrived && (pp = p_to_steal_with())) {
            mp->spinning = true;
            __atomic_add_fetch(&sched.nmspinning, 1, __ATOMIC_SEQ_CST);
            unlock_busy(came);
            acquirep(pp);
            return;
        }
        mput(mp);
        if (watch)
            until = watch_timers(mp);
        bool surplus = until < 0 && (until = m_surplus_until(mp)) >= 0;
        runtime_unlock(&sched.lock);
        if ((pp = idle_sleep(mp, until, surplus, &watch))) {
            acquirep(pp);
            return;
        }
    }
}

/*
 * timer_add made a timer the earliest, due at when: make sure an M wakes
 * up for it. Shorten the sleep of the M that waits for a later deadline;
 * if none waits with a timeout, wake an idle M (it comes back here through
 * stopm and sleeps until when) or, with an idle P but no idle M, start one.
 * With no idle P, every P's M runs the timers at its next schedule.
 */
void timer_wakeup(int64_t when)
{
    if (!__atomic_load_n(&sched.started, __ATOMIC_ACQUIRE))
        return;
    struct m *mp = NULL;
    runtime_lock(&sched.lock);
    if (poll_m != NULL && (poll_m_until < 0 || poll_m_until > when)) {
        runtime_unlock(&sched.lock);
        if (netpoll_break()) /* it polls again with the new deadline */
            return;
        runtime_lock(&sched.lock); /* it may not wake: another M serves the timer */
    }
    if (timer_m != NULL) {
        if (timer_m_until <= when) {
            runtime_unlock(&sched.lock);
            return;
        }
        mp = timer_m;
        if (!mremove(mp))
            goshim_throw("timer_wakeup: timer m not idle");
    } else if (__atomic_load_n(&sched.npidle, __ATOMIC_RELAXED) == 0) {
        runtime_unlock(&sched.lock);
        return;
    } else {
        mp = mget();
    }
    runtime_unlock(&sched.lock);
    if (mp == NULL) {
        wakep();
        return;
    }
    if (mp->nextp)
        goshim_throw("timer_wakeup: m has p");
    notewakeup(&mp->park);
}

/* Put mp on the idle list. sched.lock must be held. */
void mput(struct m *mp)
{
    mp->schedlink = sched.midle;
    sched.midle = mp;
    sched.nmidle++;
}

/* Take mp off the idle list; false if it is not there. sched.lock must be
 * held. O(idle Ms): used only for the timer M. */
bool mremove(struct m *mp)
{
    for (struct m **pm = &sched.midle; *pm; pm = &(*pm)->schedlink) {
        if (*pm == mp) {
            *pm = mp->schedlink;
            mp->schedlink = NULL;
            sched.nmidle--;
            if (timer_m == mp)
                timer_m = NULL;
            return true;
        }
    }
    return false;
}

/* Take an M from the idle list, or NULL: preferably not the one that
 * watches the timers. sched.lock must be held. */
struct m *mget(void)
{
    struct m *mp = sched.midle;
    if (mp && mp == timer_m && mp->schedlink)
        mp = mp->schedlink;
    if (mp && !mremove(mp))
        goshim_throw("mget: idle list corrupt");
    return mp;
}

struct m *mget_surplus(void)
{
    if (sched.nmidle <= m_idle_keep())
        return NULL;
    for (struct m *mp = sched.midle; mp; mp = mp->schedlink)
        if (mp != timer_m && m_can_end(mp)) {
            mremove(mp);
            return mp;
        }
    return NULL;
}
