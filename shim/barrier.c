/*
 * pthread_barrier_* on gfutex, inside the user's pthread_barrier_t, in
 * glibc's own representation.
 *
 * glibc's layout (nptl/pthreadP.h struct pthread_barrier, 20 of 32 bytes)
 * and the meanings goshim gives it, which are glibc's:
 *   in             arrivals so far; arrival i (from 1) belongs to the round
 *                  that ends with arrival count * ceil(i / count)
 *   current_round  arrivals whose rounds are complete (a multiple of
 *                  count): the gfutex word waiters park on
 *   count          participants (pthread_barrier_init, glibc's, checks it)
 *   shared         0 private; glibc's process-shared barriers (non-zero)
 *                  go to glibc on every call
 *   out            departures so far
 * The arrival that ends a round (i % count == 0) moves current_round up to
 * i — never down: an earlier round's last arrival may get there later —
 * wakes everyone parked there and alone gets PTHREAD_BARRIER_SERIAL_THREAD;
 * the others park until current_round reaches their round's end. Every
 * caller leaves by counting itself in `out`.
 *
 * The counters only grow, so before they wrap they are reset, at RESET_AT
 * arrivals rounded down to a multiple of count (glibc's threshold, half
 * the range, as glibc was seen to reset: a barrier glibc used is below
 * it): an arrival past that point waits on `in` until the departure that
 * makes `out` reach it, the last caller of the rounds before, has set all
 * three to zero; then it arrives again.
 *
 * Why glibc's representation: every caller takes this path once the
 * runtime runs (see mutex.c), also for a barrier glibc used before (a
 * library's constructor runs before goshim's, through glibc). glibc leaves
 * an idle barrier with in == current_round == out, a multiple of count and
 * not zero once a round has passed; a count of the current round's
 * arrivals, zeroed at each round's end (goshim's earlier algorithm), reads
 * that as a round in progress that never completes. Here it is simply an
 * idle barrier, and goshim's idle barriers are glibc's. The cost is one
 * division per wait (which round an arrival is in); the reset test is a
 * compare.
 *
 * pthread_barrier_destroy waits until every caller that has arrived has
 * left (a waiter's last access is its `out` increment, but for the one
 * that resets), so the barrier may be destroyed as soon as any
 * pthread_barrier_wait returns, as in glibc; never EBUSY. It moves the
 * reset point to the arrivals so far: the last of them to leave resets the
 * barrier and wakes `in`, where destroy parks (glibc's own destroy would
 * block its M in the kernel there).
 */
#include <limits.h>
#include <stdint.h>

#include "shim/shim.h"

struct gbarrier {
    uint32_t in;
    uint32_t current_round;
    uint32_t count;
    int shared;
    uint32_t out;
};

_Static_assert(sizeof(struct gbarrier) <= sizeof(pthread_barrier_t), "barrier fits");

/* Arrivals after which the counters are reset, rounded down to a multiple of count
 * (glibc's BARRIER_IN_THRESHOLD). */
#define RESET_AT (UINT_MAX / 2)

static inline struct gbarrier *gbarrier_of(pthread_barrier_t *b)
{
    return (struct gbarrier *)(void *)b;
}

static inline bool barrier_ours(struct gbarrier *gb)
{
    return __builtin_expect(goshim_on, 1) && __atomic_load_n(&gb->shared, __ATOMIC_RELAXED) == 0;
}

/* Whether n arrivals (or departures) have reached the reset point; the cheap test first. */
static inline bool past_reset(uint32_t n, uint32_t count)
{
    return __builtin_expect(n > RESET_AT - count, 0) && n >= RESET_AT - RESET_AT % count;
}

/* The counters reached the reset point: wait until the last caller of the rounds before
 * it has left and zeroed them. */
static void await_reset(struct gbarrier *gb, uint32_t count)
{
    uint32_t in;

    while (in = __atomic_load_n(&gb->in, __ATOMIC_ACQUIRE), past_reset(in, count))
        shim_wait_word(WAIT_BARRIER, gb, &gb->in, in, -1, 0);
}

GOSHIM_EXPORT int pthread_barrier_wait(pthread_barrier_t *b)
{
    struct gbarrier *gb = gbarrier_of(b);
    uint32_t count, i, cr, end;
    bool serial;

    if (!barrier_ours(gb))
        return GLIBC_WAIT(REAL(pthread_barrier_wait)(b));
    count = gb->count;
    for (;;) {
        /* acq_rel: the round's last arrival sees every arrival's earlier writes. */
        i = __atomic_add_fetch(&gb->in, 1, __ATOMIC_ACQ_REL);
        if (!past_reset(i - 1, count))
            break;
        await_reset(gb, count);
    }
    serial = i % count == 0;
    if (serial) {
        cr = __atomic_load_n(&gb->current_round, __ATOMIC_RELAXED);
        while (cr < i && !__atomic_compare_exchange_n(&gb->current_round, &cr, i, true,
                                                      __ATOMIC_RELEASE, __ATOMIC_RELAXED))
            ;
        if (count > 1)
            gfutex_wake(&gb->current_round, INT_MAX);
    } else {
        end = i - i % count + count;
        while (cr = __atomic_load_n(&gb->current_round, __ATOMIC_ACQUIRE), cr < end)
            shim_wait_word(WAIT_BARRIER, gb, &gb->current_round, cr, -1, 0);
    }
    /* The last access to b, but by the caller that completes the rounds before the reset. */
    if (past_reset(__atomic_add_fetch(&gb->out, 1, __ATOMIC_ACQ_REL), count)) {
        __atomic_store_n(&gb->current_round, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&gb->out, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&gb->in, 0, __ATOMIC_RELEASE);
        gfutex_wake(&gb->in, INT_MAX);
    }
    return serial ? PTHREAD_BARRIER_SERIAL_THREAD : 0;
}

GOSHIM_EXPORT int pthread_barrier_destroy(pthread_barrier_t *b)
{
    struct gbarrier *gb = gbarrier_of(b);
    uint32_t in, reset;

    if (!barrier_ours(gb))
        return REAL(pthread_barrier_destroy)(b);
    /* Bring the reset point forward to now: the departure of the last caller that has arrived
     * resets the barrier and wakes `in`. None still to leave: it is idle already. */
    in = __atomic_load_n(&gb->in, __ATOMIC_ACQUIRE);
    reset = RESET_AT - RESET_AT % gb->count;
    if (__atomic_fetch_add(&gb->out, reset - in, __ATOMIC_ACQ_REL) < in) {
        while ((in = __atomic_load_n(&gb->in, __ATOMIC_ACQUIRE)) != 0)
            shim_wait_word(WAIT_BARRIER, gb, &gb->in, in, -1, 0);
    }
    return 0;
}
