/*
 * System calls that may block: entersyscall / exitsyscall.
 *
 * A G about to make a call that can block the OS thread (a pipe read, a
 * waitpid, a flock) gives its P away first, so the other Gs keep running
 * on another M; without that, one blocked reader with GOSHIM_PROCS=1 stops
 * the whole program, and the writer it waits for never runs.
 *
 * Two entries, as Go: entersyscall leaves the P attached in state Psyscall
 * (a few stores); if the call lasts, sysmon retakes the P (CAS Psyscall ->
 * Pidle) and hands it to another M. exitsyscall's fast path CASes it back
 * to running. entersyscallblock, for calls that block as a rule (waitpid,
 * sigwait, flock, pause), hands the P off at once.
 *
 * During the call the G stays Gsyscall on its M, which keeps the G's TCB
 * as its FS base; no other M can run the G. Afterwards the G takes an idle
 * P (its old one if it is still idle). If there is none, it goes to the
 * global run queue and its M stops: exitsyscall0 runs on g0, moves the FS
 * base and the alternate signal stack off the G first (the invariant of
 * proc.c), then queues it.
 */
#include <ucontext.h>

#include "preempt.h"
#include "sched.h"
#include "stack.h"
#include "throw.h"
#include "timer.h"

enum { PLESS_NO, PLESS_YES, PLESS_TAKING }; /* m->pless */

/* Give pp to an M if there is work for it, else to the idle list. Go's handoffp. */
void handoffp(struct p *pp)
{
    if (!runqempty(pp) || __atomic_load_n(&sched.runqsize, __ATOMIC_RELAXED) > 0) {
        startm(pp, false);
        return;
    }
    runtime_lock(&sched.lock);
    if (sched.runqsize > 0) { /* arrived meanwhile */
        runtime_unlock(&sched.lock);
        startm(pp, false);
        return;
    }
    pidleput(pp);
    runtime_unlock(&sched.lock);
    /* Its M may have been the one that would run the timers at its next
     * schedule: make sure an idle M watches them now. */
    int64_t next = timers_next();
    if (next >= 0)
        timer_wakeup(next);
}

/* Common entry: the G becomes Gsyscall and its M lets go of the P (which
 * stays the M's oldp). NULL when nothing is done (see sched.h). */
static struct p *syscall_enter(struct m *mp)
{
    /* sysmon may be handing the P off (sched_handoff_asleep): wait; if it
     * did, the call just goes through (the G takes a P back at the gate). */
    while (__atomic_load_n(&mp->pless, __ATOMIC_SEQ_CST) == PLESS_TAKING)
        procyield(20);
    if (__atomic_load_n(&mp->pless, __ATOMIC_SEQ_CST) == PLESS_YES)
        return NULL;
    struct g *gp = mp->curg;
    if (__atomic_load_n(&mp->ong0, __ATOMIC_RELAXED) || mp->p == NULL || gp == NULL ||
        readgstatus(gp) != Grunning)
        return NULL;
    mp->nsyscall++;
    setgstatus_owned(gp, Grunning, Gsyscall, "entersyscall"); /* inside m_locks: sysmon keeps off */
    struct p *pp = mp->p;
    p_tick_call(pp);
    mp->oldp = pp;
    __atomic_store_n(&pp->callm, mp, __ATOMIC_RELAXED);
    return pp;
}

bool entersyscall(void)
{
    struct m *mp = getm();
    m_locks_enter(mp);
    struct p *pp = syscall_enter(mp);
    if (pp) {
        /* The P stays ours unless sysmon retakes it (Psyscall -> Pidle). */
        mp->p = NULL;
        __atomic_store_n(&pp->m, NULL, __ATOMIC_RELAXED);
        __atomic_store_n(&pp->status, Psyscall, __ATOMIC_SEQ_CST);
    }
    m_locks_leave(mp);
    return pp != NULL;
}

/* Whether the P of a call that blocks as a rule may stay attached (Psyscall) all the same:
 * nothing waits for a P, so a hand-off would only make it idle, under sched.lock - after a
 * fork (waitpid) a page the parent copies while its child lives. Work that comes takes it
 * as it would take it idle (wakep: take_kept_p, then a spinning M), and sysmon retakes it
 * as from any call when the work is for it. A sleep in the kernel (sleep.c) keeps it only
 * while another P is idle (idle_too): at one P, the Gs it readies would each need a
 * hand-off to another M where a parked sleeper leaves its M to them. */
static bool block_may_keep_p(struct m *mp, bool idle_too)
{
    struct p *pp = mp->p;
    return pp && (!idle_too || __atomic_load_n(&sched.npidle, __ATOMIC_RELAXED) > 0) &&
           runqempty(pp) && __atomic_load_n(&sched.runqsize, __ATOMIC_RELAXED) == 0;
}

/*
 * The process may idle in this call for long, and no M passes through stopm meanwhile,
 * where exited threads' stacks are given back (idle_release): one idle M is woken without
 * a P to do it, once its quiet 2 ms are over (stays_idle), then it sleeps again. Else a
 * process whose threads had exited while its Ms were busy, then slept this way, kept
 * their memory for good (prog_tcb_block deep beside the million-thread test: 4 runs in
 * 192). At most one at a time: idle_release clears the flag.
 */
static void scavenge_ask(void)
{
    if (!stack_scavenge_due() || __atomic_load_n(&sched.scavasked, __ATOMIC_RELAXED) ||
        __atomic_exchange_n(&sched.scavasked, 1, __ATOMIC_ACQ_REL))
        return;
    runtime_lock(&sched.lock);
    struct m *mp = mget();
    runtime_unlock(&sched.lock);
    if (mp)
        notewakeup(&mp->park);
    else
        __atomic_store_n(&sched.scavasked, 0, __ATOMIC_RELEASE);
}

/*
 * Enter a blocking call keeping the P, as block_may_keep_p allows. Until the call returns
 * a G readied while no P is idle takes that P (take_kept_p, from wakep) as it would have
 * taken it idle, rather than wait for sysmon's retake: a sleep in the kernel while a burst
 * of work comes must not hold a CPU's worth of scheduling back.
 */
static bool keep_idle_p(struct m *mp, bool idle_too)
{
    if (!block_may_keep_p(mp, idle_too) || !entersyscall())
        return false;
    struct p *pp = mp->oldp;
    __atomic_store_n(&pp->kepttick, __atomic_load_n(&pp->syscalltick, __ATOMIC_ACQUIRE),
                     __ATOMIC_RELEASE);
    mp->kept = true;
    __atomic_add_fetch(sched.nkept, 1, __ATOMIC_SEQ_CST);
    scavenge_ask();
    return true;
}

/* wakep with no P idle: hand off a P kept by a blocking call still under way, if any. */
void take_kept_p(void)
{
    for (int32_t i = 0; i < sched.gomaxprocs; i++) {
        struct p *pp = sched.allp[i];
        uint32_t st = Psyscall, tick = __atomic_load_n(&pp->syscalltick, __ATOMIC_ACQUIRE);
        if (__atomic_load_n(&pp->status, __ATOMIC_ACQUIRE) != Psyscall ||
            __atomic_load_n(&pp->kepttick, __ATOMIC_ACQUIRE) != tick ||
            !__atomic_compare_exchange_n(&pp->status, &st, Pidle, false, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE))
            continue;
        p_tick_call(pp);
        handoffp(pp);
        return;
    }
}

bool entersyscall_idle(void)
{
    return keep_idle_p(getm(), true);
}

/* wait: parks first, while no M can be had for the P's queued work (mmaker.c). */
static bool enter_block(bool wait)
{
    struct m *mp, *nmp;
    uint32_t seen;
    if (keep_idle_p(getm(), false))
        return true;
    for (;;) {
        mp = getm();
        nmp = NULL;
        m_locks_enter(mp);
        if (!mp->p || __atomic_load_n(&mp->pless, __ATOMIC_SEQ_CST) ||
            !mmaker_m_for_block(mp->p, &nmp, &seen) || !wait)
            break;
        m_locks_leave(mp);
        mmaker_wait(seen); /* parked: the G may resume on another M */
    }
    struct p *pp = syscall_enter(mp);
    if (pp) {
        releasep();
        if (nmp)
            mwake(nmp, pp, false);
        else
            handoffp(pp);
    } else if (nmp) { /* still asleep on its note: back on the list */
        runtime_lock(&sched.lock);
        mput(nmp);
        runtime_unlock(&sched.lock);
    }
    m_locks_leave(mp);
    return pp != NULL;
}

bool entersyscallblock(void)
{
    return enter_block(false);
}

bool entersyscallblock_waiting(void)
{
    return enter_block(true);
}

/*
 * The handoff of a P whose G does not come back to the runtime: sysmon
 * asks, the preemption signal's handler runs this on the M itself, outside
 * the runtime (checked by the handler), and it is entersyscall after the
 * fact: the G turns Gsyscall, the P Psyscall, and sysmon retakes the P as
 * from any system call. The G runs on without a P ("P-less") until it
 * enters goshim again: sched_pless_reacquire at the shim's gate, or
 * exitsyscall where it must switch (exit, yield). P-less, its waits block
 * the OS thread (gfutex_wait) and what it readies goes to the global queue.
 */
/* The transition itself, once mp->pless is PLESS_TAKING; false (and
 * PLESS_NO again) if mp is inside the runtime (more than own_locks held:
 * the handler holds one) or its G is not running. Read in that order: with
 * locks and ong0 seen clear after the mark, the M cannot be changing its
 * P or G (runtime.h), and every way back in waits for the mark to go. */
static bool handoff(struct m *mp, int32_t own_locks)
{
    if (__atomic_load_n(&mp->locks, __ATOMIC_SEQ_CST) != own_locks ||
        __atomic_load_n(&mp->ong0, __ATOMIC_SEQ_CST)) {
        __atomic_store_n(&mp->pless, PLESS_NO, __ATOMIC_RELEASE);
        return false;
    }
    struct p *pp = mp->p;
    struct g *gp = mp->curg;
    if (!pp || !gp || !casgstatus(gp, Grunning, Gsyscall)) {
        __atomic_store_n(&mp->pless, PLESS_NO, __ATOMIC_RELEASE);
        return false;
    }
    p_tick_call(pp);
    mp->oldp = pp;
    __atomic_store_n(&pp->callm, mp, __ATOMIC_RELAXED);
    /* gfutex_wait reads it before its acquirem, which then undoes this hand-off. */
    __atomic_store_n(&mp->p, NULL, __ATOMIC_RELAXED);
    __atomic_store_n(&pp->m, NULL, __ATOMIC_RELAXED);
    __atomic_store_n(&pp->status, Psyscall, __ATOMIC_SEQ_CST);
    __atomic_store_n(&mp->pless, PLESS_YES, __ATOMIC_RELEASE);
    return true;
}

bool sched_handoff_self(struct m *mp)
{
    uint32_t no = PLESS_NO;
    return __atomic_compare_exchange_n(&mp->pless, &no, PLESS_TAKING, false, __ATOMIC_SEQ_CST,
                                       __ATOMIC_SEQ_CST) &&
           handoff(mp, 1);
}

/*
 * From sysmon, for an M asleep in the kernel outside goshim (no signal:
 * it would cut a call like glibc's sem_timedwait short with EINTR). The
 * M may wake at any moment, so the fields it owns are changed only while
 * mp->pless says PLESS_TAKING: every entry of the M into the runtime
 * (acquirem, the shim's gate) waits while it does, and sysmon gives up if
 * the M is inside the runtime (locks, g0) or, checked after the mark, no
 * longer asleep (still_asleep).
 */
bool sched_handoff_asleep(struct m *mp, bool (*still_asleep)(struct m *))
{
    uint32_t no = PLESS_NO;
    if (!__atomic_compare_exchange_n(&mp->pless, &no, PLESS_TAKING, false, __ATOMIC_SEQ_CST,
                                     __ATOMIC_SEQ_CST))
        return false;
    if (!m_fence_remote() || !still_asleep(mp)) {
        __atomic_store_n(&mp->pless, PLESS_NO, __ATOMIC_RELEASE);
        return false;
    }
    return handoff(mp, 0);
}

/* Take back the old P, or any idle one, without switching; false if none. */
static bool exitsyscall_try(struct m *mp, struct g *gp);

void sched_pless_reacquire(void)
{
    struct m *mp = getm();
    while (__atomic_load_n(&mp->pless, __ATOMIC_ACQUIRE) == PLESS_TAKING)
        procyield(20); /* sysmon is handing the P off right now */
    struct g *gp = mp->curg;
    if (__atomic_load_n(&mp->pless, __ATOMIC_ACQUIRE) == PLESS_YES && gp && exitsyscall_try(mp, gp))
        __atomic_store_n(&mp->pless, PLESS_NO, __ATOMIC_RELEASE);
}

/*
 * The shim's gate, for a G whose P was handed off because it stayed away
 * from the runtime (refused preemptions in libc, slept in the kernel
 * outside a wrapper): it takes a P back, and if other Gs wait meanwhile
 * (in a run queue, or behind a due timer that only a scheduling M runs),
 * it goes behind them at once. The wrapper's entry is a safe point (no
 * libc frame below it holds a lock the shim knows of), and without this
 * a G that loops between libc and a wrapper took the P back microseconds
 * after every hand-off, before the woken M could use it: a sleeper's
 * timer never ran at one P.
 */
void sched_pless_return(void)
{
    struct m *mp = getm();
    sched_pless_reacquire();
    /* Read once: outside the runtime, sysmon may hand the P off at any moment (a P is never
     * freed, so looking at its queue after that is harmless; sched_gosched takes one back). */
    struct p *pp = __atomic_load_n(&mp->p, __ATOMIC_ACQUIRE);
    if (__atomic_load_n(&mp->pless, __ATOMIC_ACQUIRE) != PLESS_NO || pp == NULL ||
        __atomic_load_n(&mp->locks, __ATOMIC_SEQ_CST) != 0)
        return;
    int64_t next = timers_next();
    if (!runqempty(pp) || __atomic_load_n(&sched.runqsize, __ATOMIC_RELAXED) > 0 ||
        (next >= 0 && next <= nanotime())) {
        sched_gosched();
        if (sched_hooks.resumed) /* signals sent to it while it waited for a P */
            sched_hooks.resumed();
    }
}

void sched_gate_slow(void)
{
    struct m *mp = getm();
    if (__atomic_load_n(&mp->pless, __ATOMIC_SEQ_CST))
        sched_pless_return();
    else
        preempt_at_gate(mp);
}

/* Take pp off the idle list if it is there, else any idle P, or NULL. sched.lock held. */
static struct p *pidleget_prefer(struct p *want)
{
    for (struct p **link = &sched.pidle; want && *link; link = &(*link)->link) {
        if (*link == want) {
            *link = want->link;
            want->link = NULL;
            __atomic_fetch_sub(&sched.npidle, 1, __ATOMIC_RELAXED);
            return want;
        }
    }
    return pidleget();
}

/* On g0: no P was free. Queue the G and stop the M. */
GOSHIM_NO_TSAN static void exitsyscall0(void *arg)
{
    (void)arg;
    san_switch_end(NULL);
    struct m *mp = getm();
    struct g *gp = mp->curg;
    mp->curg = NULL;
    restore_own_fs_altstack(mp); /* the G may run elsewhere as soon as it is queued */
    if (!casgstatus(gp, Gsyscall, Grunnable))
        goshim_throw("exitsyscall0: G not in a system call");
    runtime_lock(&sched.lock);
    struct p *pp = pidleget();
    if (!pp)
        globrunqput(gp);
    runtime_unlock(&sched.lock);
    if (!pp)
        sysmon_kick(0);
    if (pp) {
        acquirep(pp);
        execute(mp, gp, false);
    }
    stopm();
    cputime_m_ready(mp);
    schedule();
}

static bool exitsyscall_try(struct m *mp, struct g *gp)
{
    /* Fast path: the P is still ours (sysmon did not retake it). */
    struct p *oldp = mp->oldp;
    uint32_t st = Psyscall;
    struct p *pp = NULL;
    if (oldp && __atomic_compare_exchange_n(&oldp->status, &st, Pidle, false, __ATOMIC_ACQ_REL,
                                            __ATOMIC_ACQUIRE)) {
        pp = oldp;
        p_tick_call(pp);
    } else {
        runtime_lock(&sched.lock);
        pp = pidleget_prefer(oldp);
        runtime_unlock(&sched.lock);
    }
    if (!pp)
        return false;
    mp->oldp = NULL;
    acquirep(pp);
    setgstatus_owned(gp, Gsyscall, Grunning, "exitsyscall"); /* its M's alone (struct g) */
    return true;
}

void exitsyscall(void)
{
    struct m *mp = getm();
    struct g *gp = mp->curg;
    if (mp->kept) {
        mp->kept = false;
        __atomic_sub_fetch(sched.nkept, 1, __ATOMIC_SEQ_CST);
    }
    m_locks_enter(mp);
    while (__atomic_load_n(&mp->pless, __ATOMIC_ACQUIRE) == PLESS_TAKING)
        procyield(20);
    /* Called on a read of pless that saw sysmon's TAKING of a hand-off it
     * then gave up (the M was no longer asleep): the G still runs on its
     * P, there is nothing to exit (going on would throw "exitsyscall0: G
     * not in a system call"). */
    if (__atomic_load_n(&mp->pless, __ATOMIC_ACQUIRE) == PLESS_NO && mp->p != NULL && gp != NULL &&
        readgstatus(gp) == Grunning) {
        m_locks_leave(mp);
        return;
    }
    __atomic_store_n(&mp->pless, PLESS_NO, __ATOMIC_RELEASE);
    if (exitsyscall_try(mp, gp)) {
        m_locks_leave(mp);
        return;
    }
    mp->oldp = NULL;
    switch_out_to(mp, gp, exitsyscall0); /* drops the lock */
    if (sched_hooks.resumed && __atomic_load_n(&getm()->locks, __ATOMIC_SEQ_CST) == 0)
        sched_hooks.resumed(); /* signals sent to it while it waited for a P */
}

extern const char sched_checked_syscall_check[], sched_checked_syscall_insn[];

/* A handler ran where sched_checked_syscall had checked its word and not yet entered the
 * kernel (or where the kernel rewound a call it restarts): it resumes at the check. */
void sched_checked_syscall_rewind(void *ucontext)
{
    greg_t *ip = &((ucontext_t *)ucontext)->uc_mcontext.gregs[REG_RIP];
    if (*ip >= (greg_t)sched_checked_syscall_check && *ip <= (greg_t)sched_checked_syscall_insn)
        *ip = (greg_t)sched_checked_syscall_check;
}
