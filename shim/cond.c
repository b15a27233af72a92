/*
 * pthread_cond_* on gfutex: a sequence counter in the user's pthread_cond_t.
 *
 * Fields of glibc's struct __pthread_cond_s that goshim uses:
 *   __g_signals[0]  seq: bumped by every signal/broadcast that finds waiters;
 *                   waiters park on it with the value they saw (gfutex word)
 *   __g_refs[0]     nwaiters: waiters between registering and leaving, two
 *                   each (bit 0 is glibc's, below); a signal with no waiters
 *                   costs one load
 *   __wrefs         read only: bit 0 process-shared, bit 1 CLOCK_MONOTONIC,
 *                   as glibc's pthread_cond_init (not interposed) writes them
 * All-zero (PTHREAD_COND_INITIALIZER) is an idle CLOCK_REALTIME cond.
 * Process-shared conds go to glibc on every call.
 *
 * A waiter registers, reads seq and releases the mutex, then parks while
 * seq is unchanged. A signal after the release changes seq, so no wake-up
 * is lost; a waiter that saw an older seq may return without being the one
 * woken, which POSIX allows (spurious wake-up). Signal wakes one parked
 * waiter, broadcast all (no requeue onto the mutex: the woken contend).
 * A waiter's last access to the cond is its nwaiters decrement, and
 * pthread_cond_destroy waits for nwaiters == 0, so destroying a cond right
 * after a broadcast is safe as in glibc.
 *
 * Like the mutex, every caller takes this path once the runtime runs (see
 * mutex.c), also for a cond glibc used before (a library's constructor
 * runs before goshim's, through glibc). An idle glibc cond has no waiter
 * registered anywhere. Of the fields goshim reads, __wrefs keeps glibc's
 * flags, and glibc too counts waiters in __g_refs[0] in twos, with bit 0 a
 * request that the waiter who brings the count to zero wake a signaller
 * switching groups. That waiter clears the bit; but when the signaller
 * sets it just after the last waiter left, it stays set with no waiter
 * until a later one leaves. Counting in twos and ignoring bit 0 makes that
 * an idle cond too (counting in ones, destroy waited for ever). glibc's
 * last value in __g_signals[0] does no harm: the sequence is only ever
 * compared with itself. A glibc thread still blocked in pthread_cond_wait
 * at start-up is not woken by a signal after it (foreign threads only).
 *
 * Differences from glibc: waiting with a recursive mutex locked N > 1
 * times releases it completely and takes it back N times deep (glibc
 * releases one level and so deadlocks). Process-shared conds stay glibc's
 * but are cancellation points as natively: pthread_cancel wakes a waiter
 * there with a broadcast (see wake_pshared_waiter in shim/cancel.c).
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <time.h>

#include "shim/cancel.h"
#include "shim/shim.h"
#include "shim/sync.h"

enum {
    COND_SHARED = 1,    /* glibc's __PTHREAD_COND_SHARED_MASK */
    COND_MONOTONIC = 2, /* glibc's __PTHREAD_COND_CLOCK_MONOTONIC_MASK */
};

#define COND_SEQ(c)      (&(c)->__data.__g_signals[0])
#define COND_NWAITERS(c) (&(c)->__data.__g_refs[0])
#define COND_WAITER      2u /* one waiter in COND_NWAITERS; bit 0 is glibc's */

static inline unsigned cond_flags(pthread_cond_t *c)
{
    return __atomic_load_n(&c->__data.__wrefs, __ATOMIC_RELAXED);
}

static inline bool valid_nsec(long nsec)
{
    return nsec >= 0 && nsec < 1000000000;
}

static int cond_wait(pthread_cond_t *c, pthread_mutex_t *m, bool timed, clockid_t clk,
                     const struct timespec *abstime)
{
    int64_t deadline = -1;
    unsigned saved, seq;
    int r, r2;

    if (timed) {
        r = gfutex_deadline(clk, abstime, &deadline);
        if (r != 0)
            return r;
    }
    shim_testcancel(); /* a cancellation point: the mutex is held, as POSIX wants */
    __atomic_fetch_add(COND_NWAITERS(c), COND_WAITER, __ATOMIC_SEQ_CST);
    seq = __atomic_load_n(COND_SEQ(c), __ATOMIC_SEQ_CST);
    /* A waiter from here: the mutex's next holder may see the program exit before this
     * thread has parked (the unlock handed it the mutex and ran it first), and
     * GOSHIM_STATS's list of the threads still waiting at exit must name it. */
    sched_set_wait(WAIT_COND, c);
    r = gmutex_cond_unlock(m, &saved);
    if (r != 0) {
        sched_set_wait(WAIT_NONE, NULL);
        __atomic_fetch_sub(COND_NWAITERS(c), COND_WAITER, __ATOMIC_RELEASE);
        return r;
    }
    bool timedout =
        shim_wait_word(WAIT_COND, c, COND_SEQ(c), seq, deadline, 0) == SHIM_WAIT_TIMEDOUT;
    __atomic_fetch_sub(COND_NWAITERS(c), COND_WAITER, __ATOMIC_RELEASE); /* last access to c */
    r2 = gmutex_cond_lock(m, saved);
    if (r2 != 0)
        return r2;
    shim_testcancel(); /* cancelled while waiting: unwind with the mutex re-acquired */
    return timedout ? ETIMEDOUT : 0;
}

static void cond_wake(pthread_cond_t *c, int n)
{
    if (__atomic_load_n(COND_NWAITERS(c), __ATOMIC_SEQ_CST) < COND_WAITER)
        return;
    __atomic_fetch_add(COND_SEQ(c), 1, __ATOMIC_SEQ_CST);
    gfutex_wake(COND_SEQ(c), n);
}

/* A wait on a process-shared cond, glibc's, made a cancellation point (pthread_cancel wakes
 * it: shim_pshared_cond_wait): on entry and once back, with the mutex held. It blocks in the
 * kernel as a rule: its P goes to another M at once. */
#define SHARED_WAIT(call)                                                                          \
    ({                                                                                             \
        shim_testcancel();                                                                         \
        shim_pshared_cond_wait(c, m);                                                              \
        int sr_ = shim_cancel_pending() ? 0 : GLIBC_WAIT_WITH(entersyscallblock, call);            \
        shim_pshared_cond_wait(NULL, NULL);                                                        \
        shim_testcancel();                                                                         \
        sr_;                                                                                       \
    })

GOSHIM_EXPORT int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m)
{
    if (!sync_on())
        return REAL(pthread_cond_wait)(c, m);
    if (cond_flags(c) & COND_SHARED)
        return SHARED_WAIT(REAL(pthread_cond_wait)(c, m));
    chaos_point();
    return cond_wait(c, m, false, CLOCK_REALTIME, NULL);
}

GOSHIM_EXPORT int pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m,
                                         const struct timespec *abstime)
{
    unsigned flags = cond_flags(c);

    if (!sync_on())
        return REAL(pthread_cond_timedwait)(c, m, abstime);
    if (flags & COND_SHARED)
        return SHARED_WAIT(REAL(pthread_cond_timedwait)(c, m, abstime));
    if (!valid_nsec(abstime->tv_nsec))
        return EINVAL;
    return cond_wait(c, m, true, (flags & COND_MONOTONIC) ? CLOCK_MONOTONIC : CLOCK_REALTIME,
                     abstime);
}

GOSHIM_EXPORT int pthread_cond_clockwait(pthread_cond_t *c, pthread_mutex_t *m, clockid_t clk,
                                         const struct timespec *abstime)
{
    if (!sync_on())
        return REAL(pthread_cond_clockwait)(c, m, clk, abstime);
    if (cond_flags(c) & COND_SHARED)
        return SHARED_WAIT(REAL(pthread_cond_clockwait)(c, m, clk, abstime));
    if ((clk != CLOCK_REALTIME && clk != CLOCK_MONOTONIC) || !valid_nsec(abstime->tv_nsec))
        return EINVAL;
    return cond_wait(c, m, true, clk, abstime);
}

GOSHIM_EXPORT int pthread_cond_signal(pthread_cond_t *c)
{
    if (!sync_on() || (cond_flags(c) & COND_SHARED))
        return REAL(pthread_cond_signal)(c);
    chaos_point();
    cond_wake(c, 1);
    return 0;
}

GOSHIM_EXPORT int pthread_cond_broadcast(pthread_cond_t *c)
{
    if (!sync_on() || (cond_flags(c) & COND_SHARED))
        return REAL(pthread_cond_broadcast)(c);
    chaos_point();
    cond_wake(c, INT_MAX);
    return 0;
}

GOSHIM_EXPORT int pthread_cond_destroy(pthread_cond_t *c)
{
    if (sync_on() && !(cond_flags(c) & COND_SHARED)) {
        /* Woken waiters may still be on their way out (a blocked waiter is UB, as in glibc). */
        while (__atomic_load_n(COND_NWAITERS(c), __ATOMIC_ACQUIRE) >= COND_WAITER)
            gsync_yield();
    }
    return REAL(pthread_cond_destroy)(c);
}
