/*
 * pthread_rwlock_* on gfutex, inside the user's pthread_rwlock_t.
 *
 * State: the 64 bits at __readers/__writers (offsets 0 and 4; the object is
 * 8-aligned), changed with 64-bit CAS; waiters park on the low word:
 *   __readers  bits 0-2 glibc's (below), bits 3-28 readers holding (one
 *              reader is 8), bit 29 W (a writer holds), bit 30 WWAIT
 *              (writers are waiting), bit 31 WAIT (someone may be parked
 *              on this word)
 *   __writers  number of waiting writers (WWAIT == (__writers != 0))
 *   __cur_writer  owner id of the writer (mutex.c), for EDEADLK
 *   __flags, __shared  read only, as pthread_rwlock_init (glibc's, not
 *              interposed) and the static initializers write them
 * All-zero is a free lock, as PTHREAD_RWLOCK_INITIALIZER and
 * PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP make it. __shared != 0
 * goes to glibc every call.
 *
 * Readers enter while no writer holds; with the kind
 * PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP also not while a writer
 * waits (glibc treats PREFER_WRITER_NP like PREFER_READER_NP, and so do we).
 * A release that clears WAIT wakes every waiter (they re-arm WAIT before
 * parking again); after the releasing CAS only the address is used, so the
 * lock may be destroyed and freed at once. A writer that gives up (timeout)
 * withdraws its count and, when it was the last, clears WWAIT and wakes the
 * readers it held back.
 *
 * Every caller takes this path once the runtime runs (see mutex.c), also
 * for a lock glibc used before: a library's constructor runs before
 * goshim's, through glibc (GObject's takes GType's rwlock there). glibc's
 * __readers keeps its phase and flags in bits 0-2 (bit 0 the write phase,
 * bit 1 a writer holds or claims the lock, bit 2 readers wait for a
 * writer) and its reader count from bit 3; __writers counts its waiting
 * writers; a release clears __cur_writer. A lock nobody holds or waits for
 * thus has no reader, no waiting writer and bits 1-2 clear, but a write
 * unlock with no reader to hand over to leaves the lock in its write phase,
 * bit 0 set: every lock glibc last write-locked, GType's too, which a
 * reader count from bit 0 read as one reader for ever. So readers count
 * from bit 3 here as in glibc, and bits 0-2 are ignored: every idle glibc
 * state reads as free, with no test or extra step on any path, and a
 * writer's acquiring CAS clears them. But bit 1 set is a lock glibc's writer
 * holds: the runtime starts at the first pthread_create (GOSHIM_START), and
 * main may have write-locked it through glibc before (Open POSIX's
 * rwlock_rdlock/4-1 and six others: a reader got in beside it). So bit 1
 * counts as W (RW_HELD) and that writer's unlock, here, clears it; its
 * __cur_writer is the tid main still has. A glibc reader counts from bit 3
 * as ours. __wrphase_futex and __writers_futex are glibc's alone. A lock
 * waited on through glibc at start-up cannot be: main is the only thread.
 * Error codes follow glibc: EINVAL (bad clock or tv_nsec, checked first),
 * EDEADLK (rdlock/wrlock by the writer), EBUSY, EAGAIN (reader overflow),
 * ETIMEDOUT.
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <time.h>

#include "shim/shim.h"
#include "shim/sync.h"

enum {
    RW_GLIBC = 0x7,  /* glibc's phase and flags: ignored but for RW_GW */
    RW_GW = 0x2,     /* glibc's "a writer holds it": one did before start-up */
    RW_READER = 0x8, /* one reader */
    RW_RMASK = 0x1ffffff8,
    RW_W = 0x20000000,
    RW_WWAIT = 0x40000000,
    RW_WAIT = (int)0x80000000u,
    RW_HELD = RW_W | RW_GW, /* a writer holds it, ours or glibc's */
};

static inline bool rw_ours(pthread_rwlock_t *rw)
{
    return sync_on() && __atomic_load_n(&rw->__data.__shared, __ATOMIC_RELAXED) == 0;
}

/* rw_ours in a SYNC_WRAPPER body, which runs only with the runtime on. */
static inline bool rw_ours_on(pthread_rwlock_t *rw)
{
    sched_note_call();
    return __atomic_load_n(&rw->__data.__shared, __ATOMIC_RELAXED) == 0;
}

static inline uint64_t *rw_state(pthread_rwlock_t *rw)
{
    return (uint64_t *)(void *)&rw->__data.__readers;
}

static inline uint32_t *rw_word(pthread_rwlock_t *rw)
{
    return &rw->__data.__readers;
}

static inline uint32_t lo(uint64_t s)
{
    return (uint32_t)s;
}

static inline uint32_t hi(uint64_t s)
{
    return (uint32_t)(s >> 32);
}

static inline uint64_t mk(uint32_t l, uint32_t h)
{
    return (uint64_t)h << 32 | l;
}

static inline bool cas(pthread_rwlock_t *rw, uint64_t *old, uint64_t nv)
{
    return __atomic_compare_exchange_n(rw_state(rw), old, nv, false, __ATOMIC_ACQ_REL,
                                       __ATOMIC_RELAXED);
}

static inline bool prefer_writer(pthread_rwlock_t *rw)
{
    return rw->__data.__flags == PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP;
}

static inline bool reader_may_enter(uint32_t l, bool pw)
{
    return !(l & RW_HELD) && !(pw && (l & RW_WWAIT));
}

static inline bool valid_abstime(clockid_t clk, const struct timespec *abstime)
{
    return (clk == CLOCK_REALTIME || clk == CLOCK_MONOTONIC) && abstime->tv_nsec >= 0 &&
           abstime->tv_nsec < 1000000000;
}

static int rdlock(pthread_rwlock_t *rw, bool timed, clockid_t clk, const struct timespec *abstime)
{
    bool pw = prefer_writer(rw);
    int64_t deadline = -1;
    bool have_deadline = !timed;
    uint64_t s;

    if (timed && !valid_abstime(clk, abstime))
        return EINVAL;
    /* No writer, no owner id to compare (a reader's lock: no gsync_self call). */
    int writer = __atomic_load_n(&rw->__data.__cur_writer, __ATOMIC_RELAXED);
    if (writer != 0 && writer == gsync_self())
        return EDEADLK;
    s = __atomic_load_n(rw_state(rw), __ATOMIC_RELAXED);
    for (;;) {
        uint32_t l = lo(s);
        int r;

        if (reader_may_enter(l, pw)) {
            if ((l & RW_RMASK) == RW_RMASK)
                return EAGAIN;
            if (cas(rw, &s, s + RW_READER))
                return 0;
            continue;
        }
        if (!have_deadline) {
            r = gfutex_deadline(clk, abstime, &deadline);
            if (r != 0)
                return r;
            have_deadline = true;
        }
        if (!(l & RW_WAIT)) {
            if (!cas(rw, &s, s | (uint32_t)RW_WAIT))
                continue;
            l |= (uint32_t)RW_WAIT;
        }
        if (shim_wait_word(WAIT_RWLOCK, rw, rw_word(rw), l, deadline, 0) == SHIM_WAIT_TIMEDOUT)
            return ETIMEDOUT;
        s = __atomic_load_n(rw_state(rw), __ATOMIC_RELAXED);
    }
}

/* A waiting writer gives up: withdraw its count; the last one lets held-back readers in. */
static void writer_withdraw(pthread_rwlock_t *rw)
{
    uint64_t s = __atomic_load_n(rw_state(rw), __ATOMIC_RELAXED);
    uint32_t l, h;

    do {
        l = lo(s);
        h = hi(s) - 1;
        if (h == 0)
            l &= ~(uint32_t)RW_WWAIT;
    } while (!cas(rw, &s, mk(l, h)));
    if (h == 0 && (lo(s) & RW_WAIT) && prefer_writer(rw))
        gfutex_wake(rw_word(rw), INT_MAX);
}

static int wrlock(pthread_rwlock_t *rw, bool timed, clockid_t clk, const struct timespec *abstime)
{
    int self = gsync_self();
    int64_t deadline = -1;
    bool have_deadline = !timed, counted = false;
    uint64_t s;

    if (timed && !valid_abstime(clk, abstime))
        return EINVAL;
    if (__atomic_load_n(&rw->__data.__cur_writer, __ATOMIC_RELAXED) == self)
        return EDEADLK;
    s = __atomic_load_n(rw_state(rw), __ATOMIC_RELAXED);
    for (;;) {
        uint32_t l = lo(s), h = hi(s), nl, nh;
        int r;

        if ((l & (RW_RMASK | RW_HELD)) == 0) {
            nh = counted ? h - 1 : h;
            nl = (l | RW_W) & ~(uint32_t)(RW_WWAIT | RW_GLIBC);
            if (nh != 0)
                nl |= RW_WWAIT;
            if (cas(rw, &s, mk(nl, nh))) {
                __atomic_store_n(&rw->__data.__cur_writer, self, __ATOMIC_RELAXED);
                return 0;
            }
            continue;
        }
        if (!have_deadline) {
            r = gfutex_deadline(clk, abstime, &deadline);
            if (r != 0) {
                if (counted)
                    writer_withdraw(rw);
                return r;
            }
            have_deadline = true;
        }
        nl = l | (uint32_t)RW_WAIT | RW_WWAIT;
        nh = counted ? h : h + 1;
        if (nl != l || nh != h) {
            if (!cas(rw, &s, mk(nl, nh)))
                continue;
        }
        counted = true;
        if (shim_wait_word(WAIT_RWLOCK, rw, rw_word(rw), nl, deadline, 0) == SHIM_WAIT_TIMEDOUT) {
            writer_withdraw(rw);
            return ETIMEDOUT;
        }
        s = __atomic_load_n(rw_state(rw), __ATOMIC_RELAXED);
    }
}

SYNC_WRAPPER(pthread_rwlock_rdlock, (pthread_rwlock_t * rw), (rw))
{
    if (!rw_ours_on(rw))
        return GLIBC_LOCK(REAL(pthread_rwlock_tryrdlock)(rw), REAL(pthread_rwlock_rdlock)(rw));
    chaos_point();
    return rdlock(rw, false, CLOCK_REALTIME, NULL);
}

GOSHIM_EXPORT int pthread_rwlock_timedrdlock(pthread_rwlock_t *rw, const struct timespec *abstime)
{
    if (!rw_ours(rw))
        return GLIBC_WAIT(REAL(pthread_rwlock_timedrdlock)(rw, abstime));
    return rdlock(rw, true, CLOCK_REALTIME, abstime);
}

GOSHIM_EXPORT int pthread_rwlock_clockrdlock(pthread_rwlock_t *rw, clockid_t clk,
                                             const struct timespec *abstime)
{
    if (!rw_ours(rw))
        return GLIBC_WAIT(REAL(pthread_rwlock_clockrdlock)(rw, clk, abstime));
    return rdlock(rw, true, clk, abstime);
}

SYNC_WRAPPER(pthread_rwlock_wrlock, (pthread_rwlock_t * rw), (rw))
{
    if (!rw_ours_on(rw))
        return GLIBC_LOCK(REAL(pthread_rwlock_trywrlock)(rw), REAL(pthread_rwlock_wrlock)(rw));
    chaos_point();
    return wrlock(rw, false, CLOCK_REALTIME, NULL);
}

GOSHIM_EXPORT int pthread_rwlock_timedwrlock(pthread_rwlock_t *rw, const struct timespec *abstime)
{
    if (!rw_ours(rw))
        return GLIBC_WAIT(REAL(pthread_rwlock_timedwrlock)(rw, abstime));
    return wrlock(rw, true, CLOCK_REALTIME, abstime);
}

GOSHIM_EXPORT int pthread_rwlock_clockwrlock(pthread_rwlock_t *rw, clockid_t clk,
                                             const struct timespec *abstime)
{
    if (!rw_ours(rw))
        return GLIBC_WAIT(REAL(pthread_rwlock_clockwrlock)(rw, clk, abstime));
    return wrlock(rw, true, clk, abstime);
}

SYNC_WRAPPER(pthread_rwlock_tryrdlock, (pthread_rwlock_t * rw), (rw))
{
    bool pw;
    uint64_t s;

    if (!rw_ours_on(rw))
        return REAL(pthread_rwlock_tryrdlock)(rw);
    pw = prefer_writer(rw);
    s = __atomic_load_n(rw_state(rw), __ATOMIC_RELAXED);
    while (reader_may_enter(lo(s), pw)) {
        if ((lo(s) & RW_RMASK) == RW_RMASK)
            return EAGAIN;
        if (cas(rw, &s, s + RW_READER))
            return 0;
    }
    return EBUSY;
}

SYNC_WRAPPER(pthread_rwlock_trywrlock, (pthread_rwlock_t * rw), (rw))
{
    uint64_t s;

    if (!rw_ours_on(rw))
        return REAL(pthread_rwlock_trywrlock)(rw);
    s = __atomic_load_n(rw_state(rw), __ATOMIC_RELAXED);
    while ((lo(s) & (RW_RMASK | RW_HELD)) == 0) {
        if (cas(rw, &s, mk((lo(s) | RW_W) & ~(uint32_t)RW_GLIBC, hi(s)))) {
            __atomic_store_n(&rw->__data.__cur_writer, gsync_self(), __ATOMIC_RELAXED);
            return 0;
        }
    }
    return EBUSY;
}

SYNC_WRAPPER(pthread_rwlock_unlock, (pthread_rwlock_t * rw), (rw))
{
    uint64_t s;
    uint32_t l, nl;

    if (!rw_ours_on(rw))
        return REAL(pthread_rwlock_unlock)(rw);
    chaos_point();
    s = __atomic_load_n(rw_state(rw), __ATOMIC_RELAXED);
    if (lo(s) & RW_HELD) {
        __atomic_store_n(&rw->__data.__cur_writer, 0, __ATOMIC_RELAXED);
        do {
            l = lo(s);
            nl = l & ~(uint32_t)(RW_W | RW_WAIT | RW_GLIBC);
        } while (!cas(rw, &s, mk(nl, hi(s))));
    } else {
        do {
            l = lo(s);
            if ((l & RW_RMASK) == 0)
                return 0; /* not locked: undefined; glibc returns 0 too */
            nl = l - RW_READER;
            if ((nl & RW_RMASK) == 0)
                nl &= ~(uint32_t)RW_WAIT;
        } while (!cas(rw, &s, mk(nl, hi(s))));
    }
    /* Only the address from here on: the lock may already be destroyed. */
    if ((l & RW_WAIT) && !(nl & RW_WAIT))
        gfutex_wake(rw_word(rw), INT_MAX);
    return 0;
}
