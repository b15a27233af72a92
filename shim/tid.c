/*
 * Per-thread kernel settings a task cannot have: CPU affinity and
 * scheduling policy and priority. A G has no kernel thread of its own (its
 * tid is not the kernel's), so pthread_setaffinity_np, pthread_setschedparam
 * and pthread_setschedprio are accepted, checked as the kernel would, kept
 * in the thread's record and reported back by the getters; they are not
 * enforced (README, Limits). A thread goshim does not manage goes to glibc.
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shim/shim.h"
#include "shim/thread.h"

GOSHIM_EXPORT int pthread_getaffinity_np(pthread_t t, size_t size, cpu_set_t *set)
{
    STHREAD_OR_GLIBC(st, t, pthread_getaffinity_np, size, set);
    runtime_lock(&st->lock);
    bool have = st->affinity != NULL;
    cpu_set_t mine;
    if (have)
        mine = *st->affinity;
    runtime_unlock(&st->lock);
    if (!have)
        return sched_getaffinity(0, size, set) == 0 ? 0 : errno;
    if (size < sizeof(cpu_set_t)) {
        memset(set, 0, size);
        memcpy(set, &mine, size);
        return 0;
    }
    memset(set, 0, size);
    memcpy(set, &mine, sizeof mine);
    return 0;
}

GOSHIM_EXPORT int pthread_setaffinity_np(pthread_t t, size_t size, const cpu_set_t *set)
{
    STHREAD_OR_GLIBC(st, t, pthread_setaffinity_np, size, set);
    cpu_set_t allowed, want;
    CPU_ZERO(&want);
    memcpy(&want, set, size < sizeof want ? size : sizeof want);
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
        return errno;
    CPU_AND(&allowed, &allowed, &want);
    if (CPU_COUNT(&allowed) == 0)
        return EINVAL; /* as the kernel: no usable CPU in the mask */
    cpu_set_t *fresh = malloc(sizeof *fresh);
    runtime_lock(&st->lock);
    if (!st->affinity) {
        st->affinity = fresh;
        fresh = NULL;
    }
    if (st->affinity)
        *st->affinity = want;
    runtime_unlock(&st->lock);
    if (fresh || !st->affinity) {
        free(fresh);
        if (!st->affinity)
            return ENOMEM;
    }
    return 0;
}

GOSHIM_EXPORT int pthread_getschedparam(pthread_t t, int *policy, struct sched_param *param)
{
    STHREAD_OR_GLIBC(st, t, pthread_getschedparam, policy, param);
    runtime_lock(&st->lock);
    *policy = st->policy;
    *param = st->param;
    runtime_unlock(&st->lock);
    return 0;
}

static int check_sched(int policy, int prio)
{
    int lo = sched_get_priority_min(policy), hi = sched_get_priority_max(policy);
    if (lo < 0 || hi < 0 || prio < lo || prio > hi)
        return EINVAL;
    return 0;
}

GOSHIM_EXPORT int pthread_setschedparam(pthread_t t, int policy, const struct sched_param *param)
{
    STHREAD_OR_GLIBC(st, t, pthread_setschedparam, policy, param);
    int err = check_sched(policy, param->sched_priority);
    if (err)
        return err;
    runtime_lock(&st->lock);
    st->policy = policy;
    st->param = *param;
    runtime_unlock(&st->lock);
    return 0;
}

GOSHIM_EXPORT int pthread_setschedprio(pthread_t t, int prio)
{
    STHREAD_OR_GLIBC(st, t, pthread_setschedprio, prio);
    runtime_lock(&st->lock);
    int err = check_sched(st->policy, prio);
    if (!err)
        st->param.sched_priority = prio;
    runtime_unlock(&st->lock);
    return err;
}
