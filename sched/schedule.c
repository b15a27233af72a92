/*
 * The scheduler loop: schedule, findrunnable, execute, work stealing and
 * waking idle Ps. After Go's proc.go; Go's names and constants.
 *
 * findrunnable looks, in order: every 61st schedtick the global queue
 * first (so that two Gs ping-ponging through runnext cannot starve it;
 * a G just woken into runnext goes first once, fair_defer);
 * runnext and the local ring; the global queue (a batch); then, if fewer
 * than half the busy Ps have a spinning M, it becomes a spinning M and
 * steals from random victims, 4 rounds, half a queue at a time, runnext
 * only in the last round. Having found nothing, a G that merely yielded
 * continues; otherwise the M spins a little more (IDLE_SPIN_NS: waking a
 * sleeping M costs more than most gaps between tasks), then gives its P
 * back and sleeps on its note.
 *
 * Spinning Ms are the key to never leaving a P idle beside runnable work
 * without waking every M for every G: whoever makes a G runnable calls
 * wakep, which starts an M only when there is an idle P and no M is
 * spinning already. A spinning M that finds work stops spinning and calls
 * wakep itself (resetspinning), so the search passes on. The last spinning
 * M re-checks every run queue after dropping its spinning count, which
 * closes the race with a producer that saw it still spinning (the two
 * sides order their accesses with sequentially consistent atomics).
 *
 * Timers (timer.c) come first in findrunnable: when the earliest one is
 * due, the M installs its own FS base and commits the pending release
 * before it runs them, because a timer's function takes locks (a futex
 * bucket) that the G this M just parked may still hold until its release
 * is committed. An M that goes idle sleeps at most until the earliest
 * timer (stopm).
 *
 * The netpoller comes last before going idle: when Gs wait for fds that
 * only epoll can report, a non-blocking netpoll readies them (to this P,
 * or the global queue); an M with nothing at all to do blocks in netpoll
 * (stopm).
 */
#include "sched.h"
#include "netpoll.h"
#include "throw.h"
#include "timer.h"
#include "tls.h"

extern __thread struct g *tls_g;

enum { IDLE_SPIN_NS = 20000 };

static uint32_t coprimes[MAX_PROCS] GOSHIM_LARGE;
static uint32_t ncoprimes;

static uint32_t gcd(uint32_t a, uint32_t b)
{
    while (b) {
        uint32_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Steal order: start at a random P, step by a random number coprime with
 * gomaxprocs, so every P is visited once in a random-ish order. */
static void steal_order_init(uint32_t n)
{
    ncoprimes = 0;
    for (uint32_t i = 1; i <= n; i++)
        if (gcd(i, n) == 1)
            coprimes[ncoprimes++] = i;
}

/*
 * Start a spinning M if a P is idle and none spins. Its callers have just
 * published new work with a locked instruction (runnext's CAS, the release
 * exchange of sched.lock or of a bucket lock, nmspinning's decrement), a
 * full fence on x86-64, so the loads below are not ordered before it: the
 * other half of the pair is findrunnable's decrement of nmspinning before
 * its last look at the queues. No fence of its own (an mfence on every
 * goready shows in a cond ping-pong).
 */
void wakep(void)
{
    fork_settled(); /* a fork child's idle Ps are its parent's until then */
    if (__atomic_load_n(&sched.npidle, __ATOMIC_SEQ_CST) == 0) {
        if (__atomic_load_n(sched.nkept, __ATOMIC_RELAXED) == 0)
            return;
        /* A P kept by a blocking call: to an M if work waits on it or globally; else idle,
         * and a spinning M takes it below to steal the work (a running P's queue). */
        take_kept_p();
        if (__atomic_load_n(&sched.npidle, __ATOMIC_SEQ_CST) == 0)
            return;
    }
    int32_t zero = 0;
    if (__atomic_load_n(&sched.nmspinning, __ATOMIC_SEQ_CST) != 0 ||
        !__atomic_compare_exchange_n(&sched.nmspinning, &zero, 1, 0, __ATOMIC_SEQ_CST,
                                     __ATOMIC_SEQ_CST))
        return;
    startm(NULL, true);
}

void resetspinning(struct m *mp)
{
    if (!mp->spinning)
        goshim_throw("resetspinning: not a spinning m");
    mp->spinning = false;
    if (__atomic_sub_fetch(&sched.nmspinning, 1, __ATOMIC_SEQ_CST) < 0)
        goshim_throw("findrunnable: negative nmspinning");
    /* We found work; let another M look for the rest. */
    wakep();
    /* And if Gs still wait while every P runs, sysmon must watch the
     * slices: a G readied while this M spun did not kick it. */
    if (__atomic_load_n(&sched.sysmon_longsleep, __ATOMIC_RELAXED) && any_runq_nonempty())
        sysmon_kick_slow(0);
}

/*
 * Steal a G from another P: STEAL_TRIES rounds over all Ps in random
 * order, runnext only in the last. *round says which round succeeded.
 */
struct g *stealwork(struct m *mp, struct p *pp, int *round)
{
    uint32_t n = (uint32_t)sched.gomaxprocs;
    if (n < 2)
        return NULL;
    for (int i = 0; i < STEAL_TRIES; i++) {
        bool last = i == STEAL_TRIES - 1;
        uint32_t pos = fastrandn(mp, n);
        uint32_t inc = coprimes[fastrandn(mp, ncoprimes)];
        for (uint32_t k = 0; k < n; k++, pos = (pos + inc) % n) {
            struct p *victim = sched.allp[pos];
            if (victim == pp || __atomic_load_n(&victim->status, __ATOMIC_RELAXED) == Pidle)
                continue;
            struct g *gp = runqsteal(pp, victim, last);
            if (gp) {
                if (round)
                    *round = i;
                return gp;
            }
        }
    }
    return NULL;
}

/* Whether the fairness tick waits one pick: a G just woken on this P
 * (runnext) goes first once, then the global queue (pp->fairdue). Not
 * Go's rule: with its 10 ms slice the global queue's head may as well run
 * first, but here it is often a computing G demoted there after its
 * slice, and taking it first made one woken G in 61 wait a whole slice
 * more (a 1 ms sleeper beside a spinner at one P: its p99 lateness). */
static bool fair_defer(struct p *pp)
{
    if (pp->fairdue) {
        pp->fairdue = false;
        return false;
    }
    if (__atomic_load_n(&pp->runnext, __ATOMIC_RELAXED) == NULL)
        return false;
    pp->fairdue = true;
    return true;
}

/* The non-blocking part of findrunnable: fairness tick, local, global. */
struct g *findrunnable_local(struct p *pp, bool *inherit)
{
    struct g *gp;
    *inherit = false;
    if ((pp->schedtick % SCHED_FAIR_TICK == 0 || pp->fairdue) &&
        __atomic_load_n(&sched.runqsize, __ATOMIC_RELAXED) > 0 && !fair_defer(pp)) {
        runtime_lock(&sched.lock);
        gp = globrunqget(pp, 1);
        runtime_unlock(&sched.lock);
        if (gp)
            return gp;
    }
    if ((gp = runqget(pp, inherit)))
        return gp;
    if (__atomic_load_n(&sched.runqsize, __ATOMIC_RELAXED) > 0) {
        runtime_lock(&sched.lock);
        gp = globrunqget(pp, 0);
        runtime_unlock(&sched.lock);
        if (gp)
            return gp;
    }
    return NULL;
}

bool any_runq_nonempty(void)
{
    if (__atomic_load_n(&sched.runqsize, __ATOMIC_SEQ_CST) > 0)
        return true;
    for (int32_t i = 0; i < sched.gomaxprocs; i++)
        if (!runqempty(sched.allp[i]))
            return true;
    return false;
}

/*
 * glibc's per-thread malloc words on the TCB the M installs next (tls_malloc_handover): gp's,
 * or g0's (gp NULL). Both are the M's OS thread's, and travel with it, as a G is never
 * switched out inside malloc; so two threads that run at once never share an arena (a P's
 * Gs sharing one contended its lock at every hand-off of a P-less G: 10x slower mallocs).
 * The main G keeps the main thread's main_arena wherever it runs, as natively: a program
 * whose main thread alone allocates has that one arena, which every fork locks and unlocks
 * (a page written in the parent and in the child, docs/measured.md), not one more for each
 * M the main G ran on. An arena glibc gives a G (its M's first, or another after a failure)
 * is its M's.
 */
static void malloc_words_to(struct m *mp, void *to, struct g *gp)
{
    if (!mp->curmain) /* g0's or a G's: the M's arena, as glibc left it (a G's first malloc) */
        mp->own_arena = tls_malloc_arena(mp->curfs);
    void *main = tls_malloc_main();
    bool main_g = gp && (gp->flags & G_MAIN) && main;
    tls_malloc_handover(mp->curfs, to, main_g ? main : mp->own_arena);
    mp->curmain = main_g;
}

/* Install the M's own TCB as FS base again (full TLS mode), and its own alternate signal
 * stack: before a G it left is released, which may then run on another M (signal.c). */
void restore_own_fs_altstack(struct m *mp)
{
    if (tls_full() && mp->curfs != mp->g0tcb) {
        malloc_words_to(mp, mp->g0tcb, NULL);
        ctx_setfs(mp->g0tcb);
        mp->curfs = mp->g0tcb;
    }
    m_apply_altstack(mp, NULL);
}

/* Timers first: run those due. The parked G's lock (unlockf) must be
 * free before timer functions run; its TCB must not be our FS base then. */
static void run_due_timers(struct m *mp)
{
    int64_t next = timers_next();
    if (next < 0)
        return;
    int64_t now = nanotime();
    if (next <= now) {
        restore_own_fs_altstack(mp);
        release_commit(mp);
        timers_run(now);
    }
}

/* The fairness tick, runnext, the local ring, the global queue; then, as
 * a spinning M if fewer than half the busy Ps have one, steal. */
static struct g *find_local_or_steal(struct m *mp, struct p *pp, bool *inherit)
{
    struct g *gp = findrunnable_local(pp, inherit);
    if (gp)
        return gp;
    int32_t busy = sched.gomaxprocs - __atomic_load_n(&sched.npidle, __ATOMIC_SEQ_CST);
    if (mp->spinning || 2 * __atomic_load_n(&sched.nmspinning, __ATOMIC_SEQ_CST) < busy) {
        if (!mp->spinning) {
            mp->spinning = true;
            __atomic_add_fetch(&sched.nmspinning, 1, __ATOMIC_SEQ_CST);
        }
        if ((gp = stealwork(mp, pp, NULL))) {
            *inherit = false;
            return gp;
        }
    }
    return NULL;
}

/* Nothing else to run: a G that only yielded goes on. */
static struct g *yielded_g(struct m *mp)
{
    if (mp->rel.kind != REL_GOSCHED && mp->rel.kind != REL_YIELD)
        return NULL;
    mp->rel.kind = REL_NONE;
    return mp->rel.gp;
}

/* Going idle, the release committed: whether work showed up meanwhile in
 * pp's queue, from a non-blocking poll (unless an M already blocks in
 * netpoll: lastpoll 0), or, for a spinning M, anywhere within a short spin. */
static bool work_appeared(struct m *mp, struct p *pp)
{
    route_posted_here(); /* a signal's parked thread lands on this P */
    if (!runqempty(pp))
        return true;
    if (netpoll_anywaiters() && netpoll_lastpoll() != 0 && netpoll(0) > 0 &&
        (!runqempty(pp) || __atomic_load_n(&sched.runqsize, __ATOMIC_RELAXED) > 0))
        return true;
    if (mp->spinning) {
        int64_t until = nanotime() + IDLE_SPIN_NS;
        while (nanotime() < until) {
            route_posted_here();
            if (any_runq_nonempty())
                return true;
            procyield(20);
        }
    }
    return false;
}

/* Under the scheduler lock: the global queue's G, or give pp back idle. An M that gives
 * its P back is on its way to stopm, neither running nor idle for a moment: counted
 * (sched.nmgoing), so that the maker waits for it rather than make another (mmaker.c; a
 * fourth M at two Ps in a burst of pthread_create). */
static struct g *global_or_release(struct m *mp, struct p *pp, bool *inherit)
{
    runtime_lock(&sched.lock);
    if (sched.runqsize != 0) {
        struct g *gp = globrunqget(pp, 0);
        runtime_unlock(&sched.lock);
        *inherit = false;
        return gp;
    }
    releasep();
    pidleput(pp);
    mp->going = true;
    sched.nmgoing++;
    runtime_unlock(&sched.lock);
    return NULL;
}

/* A spinning M without a P stops spinning; a producer may have seen it
 * spinning and woken nobody, so it looks once more, and with work about
 * takes an idle P back and spins again (true: look again). */
static bool unspin_and_retake(struct m *mp)
{
    if (!mp->spinning)
        return false;
    mp->spinning = false;
    if (__atomic_sub_fetch(&sched.nmspinning, 1, __ATOMIC_SEQ_CST) < 0)
        goshim_throw("findrunnable: negative nmspinning");
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (!any_runq_nonempty())
        return false;
    runtime_lock(&sched.lock);
    struct p *pp = pidleget();
    if (pp) { /* not on its way to stopm after all */
        mp->going = false;
        sched.nmgoing--;
    }
    runtime_unlock(&sched.lock);
    if (!pp)
        return false;
    acquirep(pp);
    mp->spinning = true;
    __atomic_add_fetch(&sched.nmspinning, 1, __ATOMIC_SEQ_CST);
    return true;
}

/*
 * Find a runnable G, blocking (stopm) until there is one. *self_resume
 * is set when the G that yielded is simply continued. Go's order, one
 * step a function; each pass that finds nothing ends asleep in stopm.
 */
static struct g *findrunnable(struct m *mp, bool *inherit, bool *self_resume)
{
    struct g *gp;
    *self_resume = false;
    for (;;) {
        __atomic_store_n(&mp->routes_soon, 1, __ATOMIC_RELEASE);
        run_due_timers(mp);
        struct p *pp = mp->p;
        if ((gp = find_local_or_steal(mp, pp, inherit)))
            return gp;
        if ((gp = yielded_g(mp))) {
            *self_resume = true;
            return gp;
        }
        /* Going idle: our own TCB back as FS and our own alternate stack, then the release
         * is safe. */
        restore_own_fs_altstack(mp);
        release_commit(mp);
        if (work_appeared(mp, pp))
            continue;
        if ((gp = global_or_release(mp, pp, inherit)))
            return gp;
        if (unspin_and_retake(mp))
            continue;
        stopm();
        cputime_m_ready(mp); /* the time it slept is nobody's */
    }
}

/* Run gp on the current M. Never returns. */
/* Last step on g0 before gp runs: gp resumes inside the runtime (after
 * its switch_out_to, or in gostart), so it gets locks == 1 before the M
 * stops counting as on g0 (runtime.h); it drops it there. */
static inline void m_leave_g0(struct m *mp)
{
    __atomic_store_n(&mp->locks, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&mp->ong0, 0, __ATOMIC_RELEASE);
}

/*
 * pp's next G is switched in: nschedule moves, and unless it inherits
 * runnext's time it begins a slice of its own, so the schedtick sysmon
 * watches moves too. While sysmon sleeps past a slice (nobody it serves
 * waits) it cannot see when, so a slice's start is stamped then (a vDSO
 * clock read: not on every switch). An inherited switch is
 * not stamped (that would be a clock read on every hand-off): sysmon
 * counts such a G's own run from the round that first sees it.
 */
static inline void new_slice(struct p *pp, bool inherit)
{
    if (!inherit) {
        if (__builtin_expect(__atomic_load_n(&sched.sysmon_longsleep, __ATOMIC_RELAXED) == 2, 0)) {
            int64_t now = nanotime();
            __atomic_store_n(&pp->schedwhen, now, __ATOMIC_RELAXED);
            __atomic_store_n(&pp->switchwhen, now, __ATOMIC_RELAXED);
        }
        __atomic_store_n(&pp->schedtick, pp->schedtick + 1, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&pp->nschedule, pp->nschedule + 1, __ATOMIC_RELEASE); /* sysmon reads both */
}

GOSHIM_NO_TSAN __attribute__((noreturn)) void execute(struct m *mp, struct g *gp, bool inherit)
{
    struct p *pp = mp->p;
    if (!casgstatus(gp, Grunnable, Grunning))
        goshim_throw("execute: G not runnable");
    preemptq_leave(gp);
    __atomic_store_n(&gp->m, mp, __ATOMIC_RELEASE); /* pthread_kill reads it */
    mp->curg = gp;
    new_slice(pp, inherit);
    gp->nswitch++;
    bool first = !(gp->flags & G_STARTED);
    if (first)
        bind_stack(mp, gp);
    if (tls_full()) {
        if (!(gp->flags & G_STARTED))
            bind_tcb(mp, gp);
        if (gp->tcb != mp->curfs) {
            malloc_words_to(mp, gp->tcb, gp);
            ctx_setfs(gp->tcb);
            mp->curfs = gp->tcb;
        }
    } else {
        tls_g = gp; /* errno mode: the M's own TLS */
    }
    gp->flags |= G_STARTED;
    if (first && tls_full()) {
        /* Late static TLS: the walk sees this TCB and G_STARTED, or this load sees its
         * generation (its membarrier orders our stores first; tls_static.c). */
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        if (__atomic_load_n(&sched.tls_static_gen, __ATOMIC_RELAXED) != gp->tls_gen)
            tls_static_catch_up(gp);
    }
    if (gp->sigmask != mp->sigmask)
        m_apply_sigmask(mp, gp->sigmask);
    m_apply_altstack(mp, gp);
    release_commit(mp);
    /* Signals posted while it looked for gp and switched to it (the FS write is where a
     * timer's land): handed on here, gp's own taken as it resumes. */
    route_posted_here();
    routes_soon_end(mp);
    san_switch_begin(NULL, gp->stack.lo, (size_t)(gp->stack.hi - gp->stack.lo), gp->san_fiber);
    m_leave_g0(mp);
    ctx_gogo(&gp->sched);
}

/* One round of the scheduler: find a G and run it. Never returns. */
GOSHIM_NO_TSAN void schedule(void)
{
    struct m *mp = getm();
    if (mp->p == NULL)
        goshim_throw("schedule: no p");
    bool inherit, self_resume;
    struct g *gp = findrunnable(mp, &inherit, &self_resume);
    if (mp->spinning)
        resetspinning(mp);
    if (self_resume) {
        preemptq_leave(gp);
        mp->curg = gp;
        new_slice(mp->p, false);
        if (!tls_full())
            tls_g = gp;
        if (gp->sigmask != mp->sigmask)
            m_apply_sigmask(mp, gp->sigmask);
        m_apply_altstack(mp, gp);
        routes_soon_end(mp);
        san_switch_begin(NULL, gp->stack.lo, (size_t)(gp->stack.hi - gp->stack.lo), gp->san_fiber);
        m_leave_g0(mp);
        ctx_gogo(&gp->sched);
    }
    execute(mp, gp, inherit);
}

void sched_steal_order_init(uint32_t n)
{
    steal_order_init(n);
}
