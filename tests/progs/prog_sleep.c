/*
 * Sleeps: every kind lasts at least what was asked, errors as natively, and
 * 100 threads sleeping 100 ms at once all finish (under goshim they are
 * parked Gs on timers, not 100 blocked OS threads).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "prog_check.h"

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int short_sleeps;

static void *sleeper(void *arg)
{
    (void)arg;
    long t0 = now_ms();
    usleep(100000);
    if (now_ms() - t0 < 100)
        __atomic_fetch_add(&short_sleeps, 1, __ATOMIC_RELAXED);
    return NULL;
}

int main(void)
{
    long t0 = now_ms();
    struct timespec ts = {0, 30000000};
    EXPECT(nanosleep(&ts, NULL), 0);
    long d = now_ms() - t0;
    printf("nanosleep 30 ms: at least 30 ms: %d\n", d >= 30);

    t0 = now_ms();
    EXPECT(clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, NULL), 0);
    printf("clock_nanosleep relative 30 ms: at least 30 ms: %d\n", now_ms() - t0 >= 30);

    struct timespec abs = in_ms(CLOCK_REALTIME, 30);
    t0 = now_ms();
    EXPECT(clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &abs, NULL), 0);
    printf("clock_nanosleep absolute realtime +30 ms: at least 29 ms: %d\n", now_ms() - t0 >= 29);
    clock_gettime(CLOCK_MONOTONIC, &abs);
    abs.tv_sec -= 1;
    EXPECT(clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &abs, NULL), 0);
    printf("clock_nanosleep absolute in the past returns at once\n");

    struct timespec bad = {0, 1000000000};
    errno = 0;
    int r = nanosleep(&bad, NULL);
    printf("nanosleep bad nsec: %d errno EINVAL %d\n", r, errno == EINVAL);
    EXPECT(clock_nanosleep(CLOCK_MONOTONIC, 0, &bad, NULL), EINVAL);
    printf("clock_nanosleep bad nsec: EINVAL\n");

    t0 = now_ms();
    EXPECT(usleep(20000), 0);
    printf("usleep 20 ms: at least 20 ms: %d\n", now_ms() - t0 >= 20);
    EXPECT((int)sleep(0), 0);
    t0 = now_ms();
    EXPECT((int)sleep(1), 0);
    printf("sleep 1 s: at least 1000 ms: %d\n", now_ms() - t0 >= 1000);

    pthread_t t[100];
    for (int i = 0; i < 100; i++)
        pthread_create(&t[i], NULL, sleeper, NULL);
    for (int i = 0; i < 100; i++)
        pthread_join(t[i], NULL);
    printf("100 threads slept 100 ms at once: %d woke early\n", short_sleeps);
    return short_sleeps != 0;
}
