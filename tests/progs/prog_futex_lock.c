/*
 * A lock and a one-shot event built on raw futex system calls, as Rust's
 * std and other runtimes build theirs: syscall(SYS_futex) with
 * FUTEX_WAIT_PRIVATE / FUTEX_WAKE_PRIVATE (the lock) and
 * FUTEX_WAIT_BITSET_PRIVATE with an absolute CLOCK_MONOTONIC deadline (a
 * timed wait that must time out, then an event that must arrive).
 *
 *   prog_futex_lock [THREADS [ITERS]]      (defaults 8, 20000)
 *
 * The lock is the classic three-state one (0 free, 1 locked, 2 locked with
 * waiters). Every thread adds ITERS times to a shared counter under it.
 * Output: "futex lock: THREADS x ITERS = TOTAL ok", "futex timed wait:
 * timed out", "futex event: woken"; exit 0.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "prog_check.h"

static uint32_t lock_word;
static long counter;
static long iters;

static long futex(uint32_t *addr, int op, uint32_t val, const struct timespec *ts, uint32_t val3)
{
    return syscall(SYS_futex, addr, op, val, ts, NULL, val3);
}

static void lock(void)
{
    uint32_t c = 0;
    if (__atomic_compare_exchange_n(&lock_word, &c, 1, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
        return;
    if (c != 2)
        c = __atomic_exchange_n(&lock_word, 2, __ATOMIC_ACQUIRE);
    while (c != 0) {
        long r = futex(&lock_word, FUTEX_WAIT_PRIVATE, 2, NULL, 0);
        CHECK(r == 0 || errno == EAGAIN || errno == EINTR);
        c = __atomic_exchange_n(&lock_word, 2, __ATOMIC_ACQUIRE);
    }
}

static void unlock(void)
{
    if (__atomic_exchange_n(&lock_word, 0, __ATOMIC_RELEASE) == 2)
        CHECK(futex(&lock_word, FUTEX_WAKE_PRIVATE, 1, NULL, 0) >= 0);
}

static void *adder(void *arg)
{
    (void)arg;
    for (long i = 0; i < iters; i++) {
        lock();
        long v = counter;
        if (i % 64 == 0)
            sched_yield(); /* hold the lock across a switch now and then: waiters pile up */
        counter = v + 1;
        unlock();
    }
    return NULL;
}

static uint32_t event;

static void *signaller(void *arg)
{
    (void)arg;
    __atomic_store_n(&event, 1, __ATOMIC_RELEASE);
    CHECK(futex(&event, FUTEX_WAKE_PRIVATE, 1, NULL, 0) >= 0);
    return NULL;
}

int main(int argc, char **argv)
{
    long nthreads = argc > 1 ? atol(argv[1]) : 8;
    iters = argc > 2 ? atol(argv[2]) : 20000;
    if (nthreads < 1 || nthreads > 1000 || iters < 1) {
        fprintf(stderr, "usage: prog_futex_lock [THREADS(1..1000) [ITERS]]\n");
        return 1;
    }
    pthread_t t[1000];
    for (long i = 0; i < nthreads; i++)
        EXPECT(pthread_create(&t[i], NULL, adder, NULL), 0);
    for (long i = 0; i < nthreads; i++)
        EXPECT(pthread_join(t[i], NULL), 0);
    if (counter != nthreads * iters) {
        printf("futex lock: lost updates: %ld, want %ld\n", counter, nthreads * iters);
        return 1;
    }
    printf("futex lock: %ld x %ld = %ld ok\n", nthreads, iters, counter);

    /* A wait for a value nobody changes times out at its absolute deadline, not before. */
    struct timespec now, dl;
    clock_gettime(CLOCK_MONOTONIC, &now);
    dl = now;
    dl.tv_nsec += 20 * 1000000;
    if (dl.tv_nsec >= 1000000000) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000;
    }
    long r = futex(&event, FUTEX_WAIT_BITSET_PRIVATE, 0, &dl, FUTEX_BITSET_MATCH_ANY);
    CHECK(r == -1 && errno == ETIMEDOUT);
    clock_gettime(CLOCK_MONOTONIC, &now);
    CHECK(now.tv_sec > dl.tv_sec || (now.tv_sec == dl.tv_sec && now.tv_nsec >= dl.tv_nsec));
    printf("futex timed wait: timed out\n");

    /* The event: set and woken by another thread. */
    pthread_t s;
    EXPECT(pthread_create(&s, NULL, signaller, NULL), 0);
    while (__atomic_load_n(&event, __ATOMIC_ACQUIRE) == 0) {
        r = futex(&event, FUTEX_WAIT_PRIVATE, 0, NULL, 0);
        CHECK(r == 0 || errno == EAGAIN || errno == EINTR);
    }
    EXPECT(pthread_join(s, NULL), 0);
    printf("futex event: woken\n");
    return 0;
}
