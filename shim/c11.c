/*
 * C11 <threads.h> on the shim.
 *
 * glibc implements thrd_*, mtx_*, cnd_*, tss_* and call_once by calling
 * its internal pthread functions directly, past every interposer. Left
 * alone, a C11 thread would be a native thread and a C11 mutex or
 * condition wait would block the M (and its P) in the kernel: with all Ps
 * blocked so, the thread that would wake them never runs. So each C11
 * function is mapped here onto the pthread function it stands for, which
 * the shim implements. mtx_t and cnd_t are glibc's pthread_mutex_t and
 * pthread_cond_t in the same storage (same size and layout), and
 * once_flag is a pthread_once_t: an object glibc's C11 functions used
 * before start-up is one its pthread functions used, which the pthread
 * shims take over idle (mutex.c, cond.c, pthread_once in once.c).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <threads.h>

#include "shim/shim.h"

/* An errno-style result as a thrd_* code, as glibc's thrd_err. */
static int thrd_err(int err)
{
    switch (err) {
    case 0:
        return thrd_success;
    case ENOMEM:
    case EAGAIN:
        return thrd_nomem;
    case ETIMEDOUT:
        return thrd_timedout;
    case EBUSY:
        return thrd_busy;
    default:
        return thrd_error;
    }
}

struct c11_start {
    thrd_start_t func;
    void *arg;
};

static void *c11_trampoline(void *p)
{
    struct c11_start s = *(struct c11_start *)p;
    free(p);
    return (void *)(intptr_t)s.func(s.arg);
}

GOSHIM_EXPORT int thrd_create(thrd_t *thr, thrd_start_t func, void *arg)
{
    if (!goshim_active() && !shim_start_deferred())
        return REAL(thrd_create)(thr, func, arg);
    struct c11_start *s = malloc(sizeof *s);
    if (!s)
        return thrd_nomem;
    s->func = func;
    s->arg = arg;
    pthread_t t;
    int err = pthread_create(&t, NULL, c11_trampoline, s);
    if (err) {
        free(s);
        return thrd_err(err);
    }
    *thr = t;
    return thrd_success;
}

GOSHIM_EXPORT int thrd_join(thrd_t thr, int *res)
{
    void *ret;
    int err = pthread_join(thr, &ret);
    if (err == 0 && res)
        *res = (int)(intptr_t)ret;
    return thrd_err(err);
}

GOSHIM_EXPORT int thrd_detach(thrd_t thr)
{
    return thrd_err(pthread_detach(thr));
}

GOSHIM_EXPORT void thrd_exit(int res)
{
    pthread_exit((void *)(intptr_t)res);
}

GOSHIM_EXPORT void thrd_yield(void)
{
    sched_yield();
}

GOSHIM_EXPORT int mtx_init(mtx_t *m, int type)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, (type & mtx_recursive) ? PTHREAD_MUTEX_RECURSIVE
                                                         : PTHREAD_MUTEX_NORMAL);
    int err = pthread_mutex_init((pthread_mutex_t *)m, &a);
    pthread_mutexattr_destroy(&a);
    return thrd_err(err);
}

GOSHIM_EXPORT int mtx_lock(mtx_t *m)
{
    return thrd_err(pthread_mutex_lock((pthread_mutex_t *)m));
}

GOSHIM_EXPORT int mtx_timedlock(mtx_t *restrict m, const struct timespec *restrict ts)
{
    return thrd_err(pthread_mutex_timedlock((pthread_mutex_t *)m, ts));
}

GOSHIM_EXPORT int mtx_trylock(mtx_t *m)
{
    return thrd_err(pthread_mutex_trylock((pthread_mutex_t *)m));
}

GOSHIM_EXPORT int mtx_unlock(mtx_t *m)
{
    return thrd_err(pthread_mutex_unlock((pthread_mutex_t *)m));
}

GOSHIM_EXPORT void mtx_destroy(mtx_t *m)
{
    pthread_mutex_destroy((pthread_mutex_t *)m);
}

GOSHIM_EXPORT int cnd_init(cnd_t *c)
{
    return thrd_err(pthread_cond_init((pthread_cond_t *)c, NULL));
}

GOSHIM_EXPORT int cnd_signal(cnd_t *c)
{
    return thrd_err(pthread_cond_signal((pthread_cond_t *)c));
}

GOSHIM_EXPORT int cnd_broadcast(cnd_t *c)
{
    return thrd_err(pthread_cond_broadcast((pthread_cond_t *)c));
}

GOSHIM_EXPORT int cnd_wait(cnd_t *c, mtx_t *m)
{
    return thrd_err(pthread_cond_wait((pthread_cond_t *)c, (pthread_mutex_t *)m));
}

GOSHIM_EXPORT int cnd_timedwait(cnd_t *restrict c, mtx_t *restrict m,
                                const struct timespec *restrict ts)
{
    return thrd_err(pthread_cond_timedwait((pthread_cond_t *)c, (pthread_mutex_t *)m, ts));
}

GOSHIM_EXPORT void cnd_destroy(cnd_t *c)
{
    pthread_cond_destroy((pthread_cond_t *)c);
}

GOSHIM_EXPORT int tss_create(tss_t *key, tss_dtor_t dtor)
{
    return thrd_err(pthread_key_create((pthread_key_t *)key, dtor));
}

GOSHIM_EXPORT void tss_delete(tss_t key)
{
    pthread_key_delete((pthread_key_t)key);
}

GOSHIM_EXPORT void call_once(once_flag *flag, void (*func)(void))
{
    pthread_once((pthread_once_t *)flag, func);
}
