/*
 * System calls that may block: entersyscall / exitsyscall.
 *
 * A G about to make a call that can block the OS thread (a pipe read, a
 * waitpid, a flock) gives its P away first, so the other Gs keep running
 * on another M; without that, one blocked reader with GOSHIM_PROCS=1 stops
 * the whole program, and the writer it waits for never runs. This is Go's
 * entersyscallblock: the P is handed off at once, because there is no
 * sysmon yet to retake it from a call that turned out to block (Go's
 * cheaper entersyscall leaves the P attached and lets sysmon retake it
 * after a tick: that comes with sysmon, issue 4).
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
static void handoffp(struct p *pp)
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

bool entersyscall(void)
{
    struct m *mp = getm();
    struct g *gp = mp->curg;
    /* Not from a G that holds a P: a signal handler that runs inside
     * another wrapped call, or on g0. Then the call just goes through. */
    if (mp->ong0 || mp->p == NULL || gp == NULL || readgstatus(gp) != Grunning)
        return false;
    mp->locks++;
    mp->nsyscall++;
    if (!casgstatus(gp, Grunning, Gsyscall))
        goshim_throw("entersyscall: G not running");
    struct p *pp = releasep();
    mp->oldp = pp;
    handoffp(pp);
    mp->locks--;
    return true;
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
