/*
 * Unnamed semaphores (sem_t) on gfutex, in glibc's own representation.
 *
 * glibc x86-64 (nptl/semaphoreP.h, 64-bit atomics): a uint64_t `data` whose
 * low 32 bits are the value (the futex word) and high 32 bits the number of
 * waiters, then `private` (0 private, non-zero process-shared). goshim runs
 * glibc's algorithm with gfutex in place of the kernel futex, so sem_init,
 * sem_destroy, sem_getvalue and sem_trywait stay glibc's (not interposed)
 * and a semaphore used before start-up keeps working after it: glibc
 * leaves an idle one with its value and no waiter registered (a waiter
 * that timed out or was interrupted has taken its count back).
 * Process-shared semaphores go to glibc on every call.
 *
 * sem_post is an atomic increment plus, when waiters are registered,
 * gfutex_wake_async: async-signal-safe. Every caller takes this path once
 * the runtime runs, also a signal handler on an M's scheduler context:
 * glibc's kernel FUTEX_WAKE could not wake a parked G. A handler that
 * interrupts an M inside the runtime (holding a gfutex bucket lock,
 * sched.lock, or changing its P's queues) must not wake directly: the wake
 * is then deferred to the waker thread (see gfutex.c).
 *
 * A signal handler that interrupts sem_wait, sem_timedwait or
 * sem_clockwait runs on the waiting thread; the call then fails with EINTR
 * unless the handler has SA_RESTART, as glibc's on Linux.
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <time.h>

#include "shim/cancel.h"
#include "shim/shim.h"

struct gsem {
    uint64_t data; /* value | nwaiters << 32 */
    int private;
    int pad;
};

_Static_assert(sizeof(struct gsem) <= sizeof(sem_t), "sem fits");

enum { SEM_NWAITERS_SHIFT = 32 };
#define SEM_VALUE_MASK ((uint64_t)0xffffffffu)
#define SEM_ONE_WAITER ((uint64_t)1 << SEM_NWAITERS_SHIFT)

static inline struct gsem *gsem_of(sem_t *s)
{
    return (struct gsem *)(void *)s;
}

static inline uint32_t *sem_word(struct gsem *gs)
{
    return (uint32_t *)(void *)&gs->data; /* little-endian: the value half */
}

static inline bool sem_ours(struct gsem *gs)
{
    return __builtin_expect(goshim_on, 1) && __atomic_load_n(&gs->private, __ATOMIC_RELAXED) == 0;
}

/* glibc's __new_sem_wait_fast: take a token if there is one. */
static inline bool sem_take(struct gsem *gs)
{
    uint64_t d = __atomic_load_n(&gs->data, __ATOMIC_RELAXED);

    while ((d & SEM_VALUE_MASK) != 0) {
        if (__atomic_compare_exchange_n(&gs->data, &d, d - 1, true, __ATOMIC_ACQUIRE,
                                        __ATOMIC_RELAXED))
            return true;
    }
    return false;
}

/* glibc's __new_sem_wait_slow: register as a waiter, park while the value is 0. */
static int sem_wait_slow(struct gsem *gs, int64_t deadline)
{
    uint64_t d = __atomic_fetch_add(&gs->data, SEM_ONE_WAITER, __ATOMIC_RELAXED) + SEM_ONE_WAITER;

    for (;;) {
        if ((d & SEM_VALUE_MASK) == 0) {
            if (shim_cancel_pending()) { /* a cancellation point */
                __atomic_fetch_sub(&gs->data, SEM_ONE_WAITER, __ATOMIC_RELAXED);
                shim_testcancel();
            }
            /* Interrupted: the handler ran in shim_wait; without SA_RESTART the wait fails. */
            enum shim_wait w = shim_wait_word(WAIT_SEM, gs, sem_word(gs), 0, deadline, 0);
            if (w == SHIM_WAIT_TIMEDOUT || w == SHIM_WAIT_INTERRUPTED) {
                __atomic_fetch_sub(&gs->data, SEM_ONE_WAITER, __ATOMIC_RELAXED);
                return w == SHIM_WAIT_TIMEDOUT ? ETIMEDOUT : EINTR;
            }
            d = __atomic_load_n(&gs->data, __ATOMIC_RELAXED);
        } else if (__atomic_compare_exchange_n(&gs->data, &d, d - 1 - SEM_ONE_WAITER, true,
                                               __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
            return 0;
        }
    }
}

static int sem_timed(sem_t *s, clockid_t clk, const struct timespec *abstime)
{
    struct gsem *gs = gsem_of(s);
    int64_t deadline;
    int r;

    if (abstime->tv_nsec < 0 || abstime->tv_nsec >= 1000000000) {
        errno = EINVAL;
        return -1;
    }
    if (sem_take(gs))
        return 0;
    r = gfutex_deadline(clk, abstime, &deadline);
    if (r == 0)
        r = sem_wait_slow(gs, deadline);
    if (r != 0) {
        errno = r;
        return -1;
    }
    return 0;
}

/* glibc's wait on its own semaphore: tried first, as GLIBC_LOCK (not the timed waits:
 * glibc checks their arguments first). */
#define SEM_GLIBC(wait)                                                                            \
    ({                                                                                             \
        int e_ = errno, sr_ = REAL(sem_trywait)(s);                                                \
        if (sr_ != 0 && errno == EAGAIN) {                                                         \
            errno = e_; /* as glibc's wait leaves it, unless it fails */                           \
            sr_ = GLIBC_WAIT(wait);                                                                \
        }                                                                                          \
        sr_;                                                                                       \
    })

GOSHIM_EXPORT int sem_wait(sem_t *s)
{
    struct gsem *gs = gsem_of(s);

    if (!sem_ours(gs))
        return SEM_GLIBC(REAL(sem_wait)(s));
    chaos_point();
    if (sem_take(gs))
        return 0;
    int err = sem_wait_slow(gs, -1);
    if (err) {
        errno = err;
        return -1;
    }
    return 0;
}

GOSHIM_EXPORT int sem_timedwait(sem_t *s, const struct timespec *abstime)
{
    if (!sem_ours(gsem_of(s)))
        return GLIBC_WAIT(REAL(sem_timedwait)(s, abstime));
    return sem_timed(s, CLOCK_REALTIME, abstime);
}

GOSHIM_EXPORT int sem_clockwait(sem_t *s, clockid_t clk, const struct timespec *abstime)
{
    if (!sem_ours(gsem_of(s)))
        return GLIBC_WAIT(REAL(sem_clockwait)(s, clk, abstime));
    if (clk != CLOCK_REALTIME && clk != CLOCK_MONOTONIC) {
        errno = EINVAL;
        return -1;
    }
    return sem_timed(s, clk, abstime);
}

GOSHIM_EXPORT int sem_post(sem_t *s)
{
    struct gsem *gs = gsem_of(s);
    uint64_t d;

    if (!sem_ours(gs))
        return REAL(sem_post)(s);
    d = __atomic_load_n(&gs->data, __ATOMIC_RELAXED);
    do {
        if ((d & SEM_VALUE_MASK) == SEM_VALUE_MAX) {
            errno = EOVERFLOW;
            return -1;
        }
    } while (!__atomic_compare_exchange_n(&gs->data, &d, d + 1, true, __ATOMIC_RELEASE,
                                          __ATOMIC_RELAXED));
    /* Only the address from here on: a waiter may destroy the semaphore at once. */
    if ((d >> SEM_NWAITERS_SHIFT) != 0)
        gfutex_wake_async(sem_word(gs), 1);
    return 0;
}
