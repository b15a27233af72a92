/*
 * Ps: creation, the idle list, and attaching a P to an M.
 *
 * The number of Ps is fixed when the runtime starts (GOSHIM_PROCS); they
 * are never destroyed. An M runs G code only while it holds a P, so at
 * most gomaxprocs Ms run task code at once. Idle Ps sit on sched.pidle
 * under sched.lock; sched.npidle is also read without the lock as a hint
 * (wakep, spinning limits).
 */
#include <stdlib.h>

#include "libc.h"
#include "sched.h"
#include "throw.h"

/* Create nprocs Ps, all idle. Called once by sched_init. */
int procresize(int32_t nprocs)
{
    if (nprocs < 1 || nprocs > MAX_PROCS)
        return -1;
    /* P0 last, on a page of its own that the kept count, M0 and the main G, made next,
     * share (rtpool.c). */
    for (int32_t i = nprocs - 1; i >= 0; i--) {
        if (i == 0)
            rtpool_new_page();
        struct p *pp = rtpool_alloc(sizeof *pp, 64);
        if (!pp || (i == 0 && !(sched.nkept = rtpool_alloc(sizeof *sched.nkept, 64))))
            return -1;
        pp->id = i;
        pp->status = Pidle;
        sched.allp[i] = pp;
    }
    sched.gomaxprocs = nprocs;
    runtime_lock(&sched.lock);
    for (int32_t i = nprocs - 1; i >= 0; i--)
        pidleput(sched.allp[i]);
    runtime_unlock(&sched.lock);
    return 0;
}

/* Attach pp to the current M. pp must be idle and off the idle list. */
void acquirep(struct p *pp)
{
    struct m *mp = getm();
    if (mp->p != NULL)
        goshim_throw("acquirep: already in go");
    /* Atomic loads: a G back from a system call may CAS the status of the
     * P it left (exitsyscall) while this M takes it. */
    if (__atomic_load_n(&pp->m, __ATOMIC_ACQUIRE) != NULL ||
        __atomic_load_n(&pp->status, __ATOMIC_ACQUIRE) != Pidle)
        goshim_throw("acquirep: invalid p state");
    mp->p = pp;
    __atomic_store_n(&pp->m, mp, __ATOMIC_RELEASE); /* sysmon reads it */
    __atomic_store_n(&pp->status, Prunning, __ATOMIC_RELEASE);
}

/* Detach the current M's P and return it (now Pidle, on no list). */
struct p *releasep(void)
{
    struct m *mp = getm();
    struct p *pp = mp->p;
    if (pp == NULL)
        goshim_throw("releasep: no p");
    /* Atomic loads, as in acquirep: a G back from a system call may try to CAS the status
     * of the P it left, which this M holds now (exitsyscall_try; TSan saw the race). */
    if (__atomic_load_n(&pp->m, __ATOMIC_RELAXED) != mp ||
        __atomic_load_n(&pp->status, __ATOMIC_RELAXED) != Prunning)
        goshim_throw("releasep: invalid p state");
    mp->p = NULL;
    __atomic_store_n(&pp->m, NULL, __ATOMIC_RELAXED);
    __atomic_store_n(&pp->status, Pidle, __ATOMIC_RELEASE);
    return pp;
}

/* Put pp on the idle list. sched.lock must be held. */
void pidleput(struct p *pp)
{
    if (!runqempty(pp))
        goshim_throw("pidleput: P has non-empty run queue");
    pp->link = sched.pidle;
    sched.pidle = pp;
    __atomic_fetch_add(&sched.npidle, 1, __ATOMIC_RELAXED);
}

/* Take a P from the idle list, or NULL. sched.lock must be held. */
struct p *pidleget(void)
{
    struct p *pp = sched.pidle;
    if (pp) {
        sched.pidle = pp->link;
        pp->link = NULL;
        __atomic_fetch_sub(&sched.npidle, 1, __ATOMIC_RELAXED);
    }
    return pp;
}
