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
 * base off the G first (the invariant of proc.c), then queues it.
 */
#include "sched.h"
#include "throw.h"

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
}

/* Common entry: the G becomes Gsyscall and its M lets go of the P (which
 * stays the M's oldp). NULL when nothing is done (see sched.h). */
static struct p *syscall_enter(struct m *mp)
{
    struct g *gp = mp->curg;
    if (mp->ong0 || mp->p == NULL || gp == NULL || readgstatus(gp) != Grunning)
        return NULL;
    mp->nsyscall++;
    if (!casgstatus(gp, Grunning, Gsyscall))
        goshim_throw("entersyscall: G not running");
    struct p *pp = mp->p;
    __atomic_add_fetch(&pp->syscalltick, 1, __ATOMIC_RELEASE);
    mp->oldp = pp;
    return pp;
}

bool entersyscall(void)
{
    struct m *mp = getm();
    mp->locks++;
    struct p *pp = syscall_enter(mp);
    if (pp) {
        /* The P stays ours unless sysmon retakes it (Psyscall -> Pidle). */
        mp->p = NULL;
        __atomic_store_n(&pp->m, NULL, __ATOMIC_RELAXED);
        __atomic_store_n(&pp->status, Psyscall, __ATOMIC_SEQ_CST);
    }
    mp->locks--;
    return pp != NULL;
}

bool entersyscallblock(void)
{
    struct m *mp = getm();
    mp->locks++;
    struct p *pp = syscall_enter(mp);
    if (pp) {
        releasep();
        handoffp(pp);
    }
    mp->locks--;
    return pp != NULL;
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
    restore_own_fs(mp); /* the G may run elsewhere as soon as it is queued */
    if (!casgstatus(gp, Gsyscall, Grunnable))
        goshim_throw("exitsyscall0: G not in a system call");
    runtime_lock(&sched.lock);
    struct p *pp = pidleget();
    if (!pp)
        globrunqput(gp);
    runtime_unlock(&sched.lock);
    if (pp) {
        acquirep(pp);
        execute(mp, gp, false);
    }
    stopm();
    schedule();
}

void exitsyscall(void)
{
    struct m *mp = getm();
    struct g *gp = mp->curg;
    mp->locks++;
    /* Fast path: the P is still ours (sysmon did not retake it). */
    struct p *oldp = mp->oldp;
    uint32_t st = Psyscall;
    if (oldp && __atomic_compare_exchange_n(&oldp->status, &st, Pidle, false, __ATOMIC_ACQ_REL,
                                            __ATOMIC_ACQUIRE)) {
        mp->oldp = NULL;
        acquirep(oldp);
        __atomic_add_fetch(&oldp->syscalltick, 1, __ATOMIC_RELEASE);
        if (!casgstatus(gp, Gsyscall, Grunning))
            goshim_throw("exitsyscall: G not in a system call");
        mp->locks--;
        return;
    }
    runtime_lock(&sched.lock);
    struct p *pp = pidleget_prefer(mp->oldp);
    runtime_unlock(&sched.lock);
    mp->oldp = NULL;
    if (pp) {
        acquirep(pp);
        if (!casgstatus(gp, Gsyscall, Grunning))
            goshim_throw("exitsyscall: G not in a system call");
        mp->locks--;
        return;
    }
    mp->locks--;
    switch_out_to(mp, gp, exitsyscall0);
}
