/*
 * schedinit: bring the runtime up (Go's schedinit + procresize).
 *
 * Order matters: the TLS probes run first, on an ordinary thread, because
 * they decide whether Gs get their own TCBs (and they start and join a
 * probe thread); then stacks (glibc's default size, guard support, the
 * overflow handler); then the Ps. No M exists until the first G is
 * spawned: wakep starts them on demand.
 */
#include <errno.h>
#include <stdlib.h>

#include "sched.h"
#include "throw.h"
#include "tls.h"

extern __thread struct g *tls_g;

int sched_init(const struct sched_config *c)
{
    if (sched.started)
        return EBUSY;
    int nprocs = c->nprocs > 0 ? c->nprocs : sched_usable_cpus();
    if (nprocs > MAX_PROCS)
        nprocs = MAX_PROCS;
    sched.maxmcount = c->maxthreads > 0 ? c->maxthreads : 10000;

    int mode = tls_init(c->tls_mode);
    sched.tls_full = mode == TLS_MODE_FULL;
    sched.tls_g_off = (size_t)((char *)&tls_g - (char *)tls_self());

    int rc = stack_init(c->stack_size);
    if (rc != 0) {
        rt_print(2, "goshim: cannot set up thread stacks (error %d)\n", -rc);
        return -rc;
    }
    stack_overflow_init(sched_stack_lookup);
    if (procresize(nprocs) != 0)
        return ENOMEM;
    sched_steal_order_init((uint32_t)nprocs);
    sched.starttime = nanotime();
    sched.started = true;
    if (c->schedtrace_ms > 0)
        trace_start(c->schedtrace_ms, c->scheddetail);
    if (c->stats)
        atexit(stats_at_exit);
    return 0;
}
