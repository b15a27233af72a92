/*
 * pthread_barrier_* on gfutex, inside the user's pthread_barrier_t.
 *
 * glibc's layout (nptl/pthreadP.h struct pthread_barrier, 20 of 32 bytes):
 *   in             arrivals in the current round
 *   current_round  round number: the gfutex word waiters park on
 *   count          participants (pthread_barrier_init, glibc's, checks it)
 *   shared         0 private; glibc's process-shared barriers (non-zero)
 *                  go to glibc on every call
 *   out            woken waiters that have not left yet
 * The count-th arrival resets `in`, adds its count - 1 waiters to `out`,
 * bumps the round and wakes everyone; it alone gets
 * PTHREAD_BARRIER_SERIAL_THREAD. A waiter's last access is its `out`
 * decrement and pthread_barrier_destroy waits for out == 0, so the barrier
 * may be destroyed as soon as any pthread_barrier_wait returns, as in glibc.
 * Destroying a barrier threads still wait on is undefined; glibc's waits
 * for the round to complete, and so does this one (it never says EBUSY).
 *
 * Every caller takes this path once the runtime runs (see mutex.c). A
 * barrier that glibc used before start-up keeps glibc's counters (its `in`
 * runs across rounds): not supported, re-initialise it.
 */
#include <limits.h>
#include <stdint.h>

#include "shim/shim.h"
#include "shim/sync.h"

struct gbarrier {
    uint32_t in;
    uint32_t current_round;
    uint32_t count;
    int shared;
    uint32_t out;
};

_Static_assert(sizeof(struct gbarrier) <= sizeof(pthread_barrier_t), "barrier fits");

static inline struct gbarrier *gbarrier_of(pthread_barrier_t *b)
{
    return (struct gbarrier *)(void *)b;
}

static inline bool barrier_ours(struct gbarrier *gb)
{
    return __builtin_expect(goshim_on, 1) && __atomic_load_n(&gb->shared, __ATOMIC_RELAXED) == 0;
}

GOSHIM_EXPORT int pthread_barrier_wait(pthread_barrier_t *b)
{
    struct gbarrier *gb = gbarrier_of(b);
    uint32_t round, n;

    if (!barrier_ours(gb))
        return REAL(pthread_barrier_wait)(b);
    round = __atomic_load_n(&gb->current_round, __ATOMIC_ACQUIRE);
    n = __atomic_add_fetch(&gb->in, 1, __ATOMIC_ACQ_REL);
    if (n == gb->count) {
        __atomic_store_n(&gb->in, 0, __ATOMIC_RELAXED);
        __atomic_fetch_add(&gb->out, gb->count - 1, __ATOMIC_RELAXED);
        __atomic_store_n(&gb->current_round, round + 1, __ATOMIC_RELEASE);
        if (gb->count > 1)
            gfutex_wake(&gb->current_round, INT_MAX);
        return PTHREAD_BARRIER_SERIAL_THREAD;
    }
    while (__atomic_load_n(&gb->current_round, __ATOMIC_ACQUIRE) == round)
        shim_wait_word(WAIT_BARRIER, gb, &gb->current_round, round, -1, 0);
    __atomic_fetch_sub(&gb->out, 1, __ATOMIC_RELEASE); /* last access to b */
    return 0;
}

GOSHIM_EXPORT int pthread_barrier_destroy(pthread_barrier_t *b)
{
    struct gbarrier *gb = gbarrier_of(b);

    if (barrier_ours(gb)) {
        /* As glibc's: a round in progress is waited for (glibc's futex wait on `in`
         * would never be woken by goshim's round, and it would count its own arrival
         * into `out`), then the waiters that have not left yet. Never EBUSY. */
        uint32_t round;
        while (round = __atomic_load_n(&gb->current_round, __ATOMIC_ACQUIRE),
               __atomic_load_n(&gb->in, __ATOMIC_ACQUIRE) != 0)
            shim_wait_word(WAIT_BARRIER, gb, &gb->current_round, round, -1, 0);
        while (__atomic_load_n(&gb->out, __ATOMIC_ACQUIRE) != 0)
            gsync_yield();
    }
    return REAL(pthread_barrier_destroy)(b);
}
