/*
 * prog_sync_sem: unnamed semaphores. A producer/consumer count through two
 * semaphores; trywait EAGAIN; timedwait and clockwait ETIMEDOUT (both
 * clocks) and EINVAL; sem_post EOVERFLOW at SEM_VALUE_MAX; sem_init EINVAL;
 * getvalue; a process-shared semaphore (left to glibc). sem_post from a
 * signal handler: prog_sync_sem_signal.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "prog_check.h"

/* ---- producer/consumer ---- */

#define SLOTS 4
static sem_t empty, full;
static long ring[SLOTS], nitems;

static void *producer(void *arg)
{
    (void)arg;
    for (long i = 0; i < nitems; i++) {
        CHECK(wait_sem(&empty) == 0);
        ring[i % SLOTS] = i;
        CHECK(sem_post(&full) == 0);
    }
    return NULL;
}

static void producer_consumer(void)
{
    pthread_t t;
    long sum = 0;

    nitems = scaled(50000);
    CHECK(sem_init(&empty, 0, SLOTS) == 0);
    CHECK(sem_init(&full, 0, 0) == 0);
    CHECK(pthread_create(&t, NULL, producer, NULL) == 0);
    for (long i = 0; i < nitems; i++) {
        CHECK(wait_sem(&full) == 0);
        sum += ring[i % SLOTS];
        CHECK(sem_post(&empty) == 0);
    }
    CHECK(pthread_join(t, NULL) == 0);
    CHECK(sum == nitems * (nitems - 1) / 2);
    CHECK(sem_destroy(&empty) == 0 && sem_destroy(&full) == 0);
    printf("producer/consumer: sum ok\n");
}

/* ---- counters from many threads ---- */

static sem_t counter;

static void *poster(void *arg)
{
    for (long i = 0; i < (long)arg; i++)
        CHECK(sem_post(&counter) == 0);
    return NULL;
}

static void *taker(void *arg)
{
    for (long i = 0; i < (long)arg; i++)
        CHECK(wait_sem(&counter) == 0);
    return NULL;
}

static void many(void)
{
    enum { N = 8 };
    pthread_t th[2 * N];
    long per = scaled(5000);
    int v;

    CHECK(sem_init(&counter, 0, 0) == 0);
    for (int i = 0; i < 2 * N; i++)
        CHECK(pthread_create(&th[i], NULL, i % 2 ? poster : taker, (void *)per) == 0);
    for (int i = 0; i < 2 * N; i++)
        CHECK(pthread_join(th[i], NULL) == 0);
    CHECK(sem_getvalue(&counter, &v) == 0 && v == 0);
    CHECK(sem_destroy(&counter) == 0);
    printf("%d posters, %d takers: value back to 0\n", N, N);
}

/* ---- errors and timeouts ---- */

static void errors(int pshared, const char *name)
{
    sem_t s;
    struct timespec ts, t0, t1;
    int v;

    CHECK(sem_init(&s, pshared, 0) == 0);
    errno = 0;
    CHECK(sem_trywait(&s) == -1 && errno == EAGAIN);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ts = in_ms(CLOCK_REALTIME, 50);
    errno = 0;
    CHECK(sem_timedwait(&s, &ts) == -1 && errno == ETIMEDOUT);
    ts = in_ms(CLOCK_MONOTONIC, 50);
    errno = 0;
    CHECK(sem_clockwait(&s, CLOCK_MONOTONIC, &ts) == -1 && errno == ETIMEDOUT);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000 >= 95);
    ts = in_ms(CLOCK_REALTIME, 50);
    errno = 0;
    CHECK(sem_clockwait(&s, CLOCK_REALTIME, &ts) == -1 && errno == ETIMEDOUT);
    ts.tv_nsec = 1000000000;
    errno = 0;
    CHECK(sem_timedwait(&s, &ts) == -1 && errno == EINVAL);
    ts.tv_nsec = 0;
    errno = 0;
    CHECK(sem_clockwait(&s, CLOCK_PROCESS_CPUTIME_ID, &ts) == -1 && errno == EINVAL);
    ts = in_ms(CLOCK_REALTIME, -1000);
    errno = 0;
    CHECK(sem_timedwait(&s, &ts) == -1 && errno == ETIMEDOUT);
    CHECK(sem_post(&s) == 0 && sem_post(&s) == 0);
    CHECK(sem_getvalue(&s, &v) == 0 && v == 2);
    CHECK(sem_timedwait(&s, &ts) == 0); /* a token: no timeout even in the past */
    CHECK(sem_trywait(&s) == 0);
    CHECK(sem_getvalue(&s, &v) == 0 && v == 0);
    CHECK(sem_destroy(&s) == 0);

    CHECK(sem_init(&s, pshared, SEM_VALUE_MAX) == 0);
    errno = 0;
    CHECK(sem_post(&s) == -1 && errno == EOVERFLOW);
    CHECK(sem_getvalue(&s, &v) == 0 && v == SEM_VALUE_MAX);
    CHECK(sem_destroy(&s) == 0);
    errno = 0;
    CHECK(sem_init(&s, pshared, (unsigned)SEM_VALUE_MAX + 1) == -1 && errno == EINVAL);
    printf("%s: EAGAIN, ETIMEDOUT, EINVAL, EOVERFLOW ok\n", name);
}

int main(void)
{
    producer_consumer();
    many();
    errors(0, "private");
    errors(1, "process-shared");
    printf("done\n");
    return 0;
}
