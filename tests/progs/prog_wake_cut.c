/*
 * prog_wake_cut: is a thread that waits of its own accord left to finish its burst when
 * a sleeper wakes beside it, as the kernel leaves a task it has just picked its slice?
 *
 *   prog_wake_cut [ROUNDS [BURST_US]]      (defaults: 200 rounds, 600 us)
 *
 * A worker thread does ROUNDS bursts, each BURST_US of computing (a loop on the
 * monotonic clock) followed by a 50 us sleep, as a server thread serves a request and
 * waits for the next. A ticker thread sleeps 200 us at a time until the worker is done,
 * so that it wakes, again and again, while the worker computes. Prints
 *   worker did R bursts; ticker woke
 * and exits 0 (1 on a usage error or when a pthread call fails).
 *
 * Under goshim with one P, a burst shorter than the base slice (0.7 ms at one P) ends
 * in the worker's own sleep: the ticker's wake-ups must not cut it short (the
 * "slices_cut" counter of GOSHIM_STATS), where a thread that computes until it is cut
 * would be cut at half the slice for them.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "prog_check.h"

static long rounds = 200, burst_us = 600;
static int done;
static long ticks;

static long long mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void nap_us(long us)
{
    struct timespec ts = {0, us * 1000};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static void *ticker(void *arg)
{
    (void)arg;
    while (!__atomic_load_n(&done, __ATOMIC_ACQUIRE)) {
        nap_us(200);
        ticks++;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        rounds = atol(argv[1]);
    if (argc > 2)
        burst_us = atol(argv[2]);
    if (argc > 3 || rounds < 1 || burst_us < 1) {
        fprintf(stderr, "usage: %s [ROUNDS [BURST_US]]\n", argv[0]);
        return 1;
    }
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, ticker, NULL), 0);
    volatile unsigned long sink = 0;
    for (long r = 0; r < rounds; r++) {
        long long end = mono_us() + burst_us;
        while (mono_us() < end)
            for (int i = 0; i < 1000; i++)
                sink += (unsigned long)i * 7;
        nap_us(50);
    }
    __atomic_store_n(&done, 1, __ATOMIC_RELEASE);
    EXPECT(pthread_join(t, NULL), 0);
    printf("worker did %ld bursts; ticker %s\n", rounds, ticks > 0 ? "woke" : "never woke");
    return 0;
}
