/*
 * Deferred (and asynchronous) cancellation of goshim's threads:
 * pthread_cancel, the cancel state and type, the cancellation points'
 * test, and the cancel of a wait on a process-shared condition variable,
 * which glibc does. A cancel acts by unwinding the thread (unwind.c's
 * sthread_unwind), through its C cleanup buffers and C++ frames, to the
 * thread's start, where it exits with PTHREAD_CANCELED.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <unistd.h>

#include "shim/cancel.h"
#include "shim/shim.h"
#include "shim/thread.h"

GOSHIM_EXPORT int pthread_setcancelstate(int state, int *old)
{
    struct sthread *st;
    if (!goshim_active() || !(st = sthread_self()))
        return REAL(pthread_setcancelstate)(state, old);
    if (state != PTHREAD_CANCEL_ENABLE && state != PTHREAD_CANCEL_DISABLE)
        return EINVAL;
    if (old)
        *old = st->cancelstate;
    st->cancelstate = state;
    return 0; /* a request made while disabled is acted on at the next cancellation point */
}

GOSHIM_EXPORT int pthread_setcanceltype(int type, int *old)
{
    struct sthread *st;
    if (!goshim_active() || !(st = sthread_self()))
        return REAL(pthread_setcanceltype)(type, old);
    if (type != PTHREAD_CANCEL_DEFERRED && type != PTHREAD_CANCEL_ASYNCHRONOUS)
        return EINVAL;
    if (old)
        *old = st->canceltype;
    st->canceltype = type;
    return 0;
}

bool shim_cancel_pending(void)
{
    struct sthread *st = shim_in_g() ? sthread_self() : NULL;
    return st && st->cancelstate == PTHREAD_CANCEL_ENABLE &&
           __atomic_load_n(&st->cancelreq, __ATOMIC_ACQUIRE);
}

void shim_testcancel(void)
{
    if (shim_cancel_pending()) {
        struct sthread *st = sthread_self();
        st->cancelstate = PTHREAD_CANCEL_DISABLE; /* as glibc: no second cancel while unwinding */
        st->retval = PTHREAD_CANCELED;
        sthread_unwind(st);
    }
}

/* With PTHREAD_CANCEL_ASYNCHRONOUS, a pending cancellation acts at any point where the
 * thread's state is whole: back from a mutex or join wait, a yield, a preemption. */
void shim_async_cancel(void)
{
    struct sthread *st = shim_in_g() ? sthread_self() : NULL;
    if (st && st->canceltype == PTHREAD_CANCEL_ASYNCHRONOUS)
        shim_testcancel();
}

GOSHIM_EXPORT void pthread_testcancel(void)
{
    if (!goshim_active() || !sthread_self()) {
        REAL(pthread_testcancel)();
        return;
    }
    shim_testcancel();
}

/*
 * A process-shared cond is glibc's (shim/cond.c): a thread waiting on one sleeps in glibc's
 * futex wait, on its M, where goshim's wake-ups do not reach, and glibc's own cancellation
 * signals a kernel tid the thread does not have. So pthread_cancel wakes every waiter of
 * that cond with a broadcast (a spurious wake-up for the others, which POSIX allows and
 * they wait again after); the target comes back from glibc with the mutex re-acquired and
 * acts on the cancellation there, as a cancellation point does. Unless the canceller holds
 * the wait's mutex, the target may be between announcing the wait and glibc's registering
 * it as a waiter (it holds the mutex all that time): then the broadcast is repeated until
 * it has left the wait, a few times at once, then every millisecond, for a second at most.
 * Under st->lock, so the cond is never touched after its waiter left it (the program may
 * destroy it then). Rejected: a signal to its M that runs glibc's own
 * cancellation there, which would unwind through glibc's internal cleanup (its cond
 * wait's, which re-takes the mutex) that goshim's unwinder does not run; waits in slices,
 * which wake every waiter of every process-shared cond all the time.
 */
static void wake_pshared_waiter(struct sthread *st)
{
    unsigned me = tls_full() ? tls_tcb_tid(tls_self()) : 0;
    for (int i = 0; i < 1000; i++) {
        runtime_lock(&st->lock);
        pthread_cond_t *c = st->pshared_cond;
        bool held = c && me && (unsigned)st->pshared_mutex->__data.__owner == me;
        if (c)
            REAL(pthread_cond_broadcast)(c);
        runtime_unlock(&st->lock);
        if (!c || held) /* held: the target waits in glibc already, and has been woken */
            return;
        if (i < 8) {
            sched_goyield();
        } else {
            struct timespec ms = {0, 1000000};
            nanosleep(&ms, NULL);
        }
    }
}

void shim_pshared_cond_wait(pthread_cond_t *c, pthread_mutex_t *m)
{
    struct sthread *st = shim_in_g() ? sthread_self() : NULL;
    if (!st)
        return;
    runtime_lock(&st->lock);
    st->pshared_cond = c;
    st->pshared_mutex = m;
    runtime_unlock(&st->lock);
}

GOSHIM_EXPORT int pthread_cancel(pthread_t t)
{
    struct sthread *st;
    if (!goshim_active() || !(st = sthread_lookup(t)))
        return REAL(pthread_cancel)(t);
    if (__atomic_load_n(&st->exited, __ATOMIC_ACQUIRE))
        return 0; /* glibc: cancelling a terminated, unjoined thread succeeds */
    __atomic_store_n(&st->cancelreq, 1, __ATOMIC_SEQ_CST);
    if (st == sthread_self()) {
        pthread_testcancel();
        return 0;
    }
    /* Wake it if it waits at a cancellation point (any other wait of it
     * just sees a spurious wake-up and waits again). */
    runtime_lock(&st->lock);
    bool pshared = false;
    if (st->gp && st->cancelstate == PTHREAD_CANCEL_ENABLE) {
        gfutex_interrupt(st->gp);
        shim_sleep_wake(st);
        if (st->canceltype == PTHREAD_CANCEL_ASYNCHRONOUS)
            sched_preempt_g(st->gp); /* running: cancelled where it is preempted */
        pshared = st->pshared_cond != NULL;
    }
    runtime_unlock(&st->lock);
    if (pshared)
        wake_pshared_waiter(st);
    return 0;
}
