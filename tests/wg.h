/*
 * A WaitGroup for the scheduler's tests, benchmark and demo (Go's
 * sync.WaitGroup, the part they use): counts outstanding Gs; wait parks
 * a G, or blocks a thread that is no G, until the count is back to 0. It
 * lives beside them, not in sched/: nothing in the runtime or the shim
 * waits this way.
 */
#ifndef GOSHIM_TESTS_WG_H
#define GOSHIM_TESTS_WG_H

#include <string.h>

#include "sched/runtime.h"
#include "sched/throw.h"
#include "sched/sched.h"

struct sched_wg {
    struct runtime_lock lock;
    int64_t count;     /* lock */
    uint32_t gen;      /* bumped when count reaches 0; futex word for threads */
    struct g *waiters; /* lock */
};

static inline void sched_wg_init(struct sched_wg *wg)
{
    memset(wg, 0, sizeof *wg);
}

static inline void sched_wg_add(struct sched_wg *wg, int64_t n)
{
    runtime_lock(&wg->lock);
    wg->count += n;
    if (wg->count < 0)
        goshim_throw("sched_wg_add: negative counter");
    runtime_unlock(&wg->lock);
}

static inline void sched_wg_done(struct sched_wg *wg)
{
    runtime_lock(&wg->lock);
    if (--wg->count > 0) {
        runtime_unlock(&wg->lock);
        return;
    }
    if (wg->count < 0)
        goshim_throw("sched_wg_done: negative counter");
    struct g *list = wg->waiters;
    wg->waiters = NULL;
    __atomic_add_fetch(&wg->gen, 1, __ATOMIC_RELEASE);
    runtime_unlock(&wg->lock);
    futexwakeup(&wg->gen, 1 << 30);
    while (list) {
        struct g *gp = list;
        list = gp->schedlink;
        gp->schedlink = NULL;
        goready(gp);
    }
}

static inline void sched_wg_wait(struct sched_wg *wg)
{
    if (sched_self() && __atomic_load_n(&getm()->pless, __ATOMIC_SEQ_CST))
        exitsyscall();
    struct g *gp = sched_self();
    for (;;) {
        runtime_lock(&wg->lock);
        if (wg->count == 0) {
            runtime_unlock(&wg->lock);
            return;
        }
        if (gp) {
            gp->schedlink = wg->waiters;
            wg->waiters = gp;
            gopark(park_unlock, &wg->lock, waitReasonWaitGroup);
            return;
        }
        uint32_t gen = wg->gen;
        runtime_unlock(&wg->lock);
        futexsleep(&wg->gen, gen, -1);
    }
}

#endif
