/*
 * prog_sync_cond: condition variables. A ping-pong of N rounds between two
 * threads; timedwait ETIMEDOUT on a CLOCK_REALTIME cond (the default and
 * PTHREAD_COND_INITIALIZER) and a CLOCK_MONOTONIC one (condattr), with the
 * mutex held again afterwards (also a recursive one); clockwait with both
 * clocks; EINVAL for a bad tv_nsec or clock; EPERM when waiting with an
 * errorcheck mutex one does not hold; broadcast to many waiters; signal
 * wakes one; destroy right after a broadcast.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "prog_check.h"

/* ---- ping-pong ---- */

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static long turn, rounds;

static void *pong(void *arg)
{
    (void)arg;
    EXPECT(pthread_mutex_lock(&m), 0);
    for (long i = 0; i < rounds; i++) {
        while (turn % 2 == 0)
            EXPECT(pthread_cond_wait(&cv, &m), 0);
        turn++;
        EXPECT(pthread_cond_signal(&cv), 0);
    }
    EXPECT(pthread_mutex_unlock(&m), 0);
    return NULL;
}

static void ping_pong(void)
{
    pthread_t t;

    rounds = scaled(20000);
    EXPECT(pthread_create(&t, NULL, pong, NULL), 0);
    EXPECT(pthread_mutex_lock(&m), 0);
    for (long i = 0; i < rounds; i++) {
        while (turn % 2 == 1)
            EXPECT(pthread_cond_wait(&cv, &m), 0);
        turn++;
        EXPECT(pthread_cond_signal(&cv), 0);
    }
    while (turn != 2 * rounds)
        EXPECT(pthread_cond_wait(&cv, &m), 0);
    EXPECT(pthread_mutex_unlock(&m), 0);
    EXPECT(pthread_join(t, NULL), 0);
    printf("ping-pong: %s\n", turn == 2 * rounds ? "ok" : "wrong count");
}

/* ---- timeouts ---- */

static void timeouts(pthread_cond_t *c, clockid_t clk, const char *name)
{
    pthread_mutex_t rm = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
    struct timespec t0, ts, bad;

    EXPECT(pthread_mutex_lock(&m), 0);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ts = in_ms(clk, 50);
    EXPECT(pthread_cond_timedwait(c, &m, &ts), ETIMEDOUT);
    if (ms_since(&t0) < 45) {
        fprintf(stderr, "prog_sync_cond: %s: 50 ms timedwait returned after %ld ms\n", name,
                ms_since(&t0));
        exit(1);
    }
    EXPECT(pthread_mutex_trylock(&m), EBUSY); /* held again */
    ts = in_ms(CLOCK_MONOTONIC, 20);
    EXPECT(pthread_cond_clockwait(c, &m, CLOCK_MONOTONIC, &ts), ETIMEDOUT);
    ts = in_ms(CLOCK_REALTIME, 20);
    EXPECT(pthread_cond_clockwait(c, &m, CLOCK_REALTIME, &ts), ETIMEDOUT);
    ts = in_ms(clk, -1000); /* in the past */
    EXPECT(pthread_cond_timedwait(c, &m, &ts), ETIMEDOUT);
    bad = ts;
    bad.tv_nsec = 1000000000;
    EXPECT(pthread_cond_timedwait(c, &m, &bad), EINVAL);
    EXPECT(pthread_cond_clockwait(c, &m, CLOCK_MONOTONIC, &bad), EINVAL);
    EXPECT(pthread_cond_clockwait(c, &m, CLOCK_PROCESS_CPUTIME_ID, &ts), EINVAL);
    EXPECT(pthread_mutex_unlock(&m), 0);

    /* A recursive mutex held once comes back held once. */
    EXPECT(pthread_mutex_lock(&rm), 0);
    ts = in_ms(clk, 10);
    EXPECT(pthread_cond_timedwait(c, &rm, &ts), ETIMEDOUT);
    EXPECT(pthread_mutex_unlock(&rm), 0);
    EXPECT(pthread_mutex_unlock(&rm), EPERM);
    printf("%s: ETIMEDOUT, EINVAL, mutex held after timeout ok\n", name);
}

/* ---- errorcheck mutex not held ---- */

static void eperm(void)
{
    pthread_mutex_t em = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;
    struct timespec ts = in_ms(CLOCK_REALTIME, 1000);

    EXPECT(pthread_cond_wait(&cv, &em), EPERM);
    EXPECT(pthread_cond_timedwait(&cv, &em, &ts), EPERM);
    printf("errorcheck mutex not held: EPERM\n");
}

/* ---- broadcast ---- */

#define NWAITERS 50
static pthread_cond_t bc = PTHREAD_COND_INITIALIZER;
static int waiting, go, woke;

static void *bwaiter(void *arg)
{
    (void)arg;
    EXPECT(pthread_mutex_lock(&m), 0);
    waiting++;
    EXPECT(pthread_cond_signal(&cv), 0);
    while (!go)
        EXPECT(pthread_cond_wait(&bc, &m), 0);
    woke++;
    EXPECT(pthread_mutex_unlock(&m), 0);
    return NULL;
}

static void broadcast(void)
{
    pthread_t th[NWAITERS];

    for (int i = 0; i < NWAITERS; i++)
        EXPECT(pthread_create(&th[i], NULL, bwaiter, NULL), 0);
    EXPECT(pthread_mutex_lock(&m), 0);
    while (waiting < NWAITERS)
        EXPECT(pthread_cond_wait(&cv, &m), 0);
    go = 1;
    EXPECT(pthread_cond_broadcast(&bc), 0);
    EXPECT(pthread_mutex_unlock(&m), 0);
    for (int i = 0; i < NWAITERS; i++)
        EXPECT(pthread_join(th[i], NULL), 0);
    printf("broadcast: %d of %d waiters woke\n", woke, NWAITERS);
}

/* ---- signal wakes one at a time: a semaphore built on a cond ---- */

static int tokens, consumed;
static pthread_cond_t tc = PTHREAD_COND_INITIALIZER;

static void *consumer(void *arg)
{
    long n = (long)arg;

    for (long i = 0; i < n; i++) {
        EXPECT(pthread_mutex_lock(&m), 0);
        while (tokens == 0)
            EXPECT(pthread_cond_wait(&tc, &m), 0);
        tokens--;
        consumed++;
        EXPECT(pthread_mutex_unlock(&m), 0);
    }
    return NULL;
}

static void signal_tokens(void)
{
    enum { NC = 8 };
    pthread_t th[NC];
    long per = scaled(2000);

    for (int i = 0; i < NC; i++)
        EXPECT(pthread_create(&th[i], NULL, consumer, (void *)per), 0);
    for (long i = 0; i < NC * per; i++) {
        EXPECT(pthread_mutex_lock(&m), 0);
        tokens++;
        EXPECT(pthread_cond_signal(&tc), 0);
        EXPECT(pthread_mutex_unlock(&m), 0);
    }
    for (int i = 0; i < NC; i++)
        EXPECT(pthread_join(th[i], NULL), 0);
    printf("signal: %s\n", consumed == NC * per && tokens == 0 ? "every token consumed" : "lost");
}

/* ---- destroy right after broadcast ---- */

struct dcase {
    pthread_mutex_t mx;
    pthread_cond_t c;
    int ready, go;
};

static void *dwaiter(void *arg)
{
    struct dcase *d = arg;
    EXPECT(pthread_mutex_lock(&d->mx), 0);
    d->ready++;
    while (!d->go)
        EXPECT(pthread_cond_wait(&d->c, &d->mx), 0);
    EXPECT(pthread_mutex_unlock(&d->mx), 0);
    return NULL;
}

static void destroy_after_broadcast(void)
{
    for (int k = 0; k < 50; k++) {
        struct dcase *d = calloc(1, sizeof *d);
        pthread_t th[4];

        pthread_mutex_init(&d->mx, NULL);
        pthread_cond_init(&d->c, NULL);
        for (int i = 0; i < 4; i++)
            EXPECT(pthread_create(&th[i], NULL, dwaiter, d), 0);
        for (;;) {
            EXPECT(pthread_mutex_lock(&d->mx), 0);
            int r = d->ready;
            EXPECT(pthread_mutex_unlock(&d->mx), 0);
            if (r == 4)
                break;
            sched_yield();
        }
        EXPECT(pthread_mutex_lock(&d->mx), 0);
        d->go = 1;
        EXPECT(pthread_cond_broadcast(&d->c), 0);
        EXPECT(pthread_cond_destroy(&d->c), 0); /* no thread is blocked any more */
        EXPECT(pthread_mutex_unlock(&d->mx), 0);
        for (int i = 0; i < 4; i++)
            EXPECT(pthread_join(th[i], NULL), 0);
        EXPECT(pthread_mutex_destroy(&d->mx), 0);
        free(d);
    }
    printf("destroy after broadcast: ok\n");
}

int main(void)
{
    pthread_condattr_t a;
    pthread_cond_t mono, rt;
    clockid_t clk;

    ping_pong();
    timeouts(&cv, CLOCK_REALTIME, "PTHREAD_COND_INITIALIZER");
    EXPECT(pthread_condattr_init(&a), 0);
    EXPECT(pthread_cond_init(&rt, &a), 0);
    timeouts(&rt, CLOCK_REALTIME, "default condattr");
    EXPECT(pthread_condattr_setclock(&a, CLOCK_MONOTONIC), 0);
    EXPECT(pthread_condattr_getclock(&a, &clk), 0);
    EXPECT(clk == CLOCK_MONOTONIC, 1);
    EXPECT(pthread_cond_init(&mono, &a), 0);
    timeouts(&mono, CLOCK_MONOTONIC, "CLOCK_MONOTONIC condattr");
    EXPECT(pthread_condattr_setpshared(&a, PTHREAD_PROCESS_SHARED), 0);
    EXPECT(pthread_cond_destroy(&mono), 0);
    EXPECT(pthread_cond_init(&mono, &a), 0);
    timeouts(&mono, CLOCK_MONOTONIC, "process-shared CLOCK_MONOTONIC condattr");
    EXPECT(pthread_cond_destroy(&mono), 0);
    EXPECT(pthread_cond_destroy(&rt), 0);
    EXPECT(pthread_condattr_destroy(&a), 0);
    eperm();
    broadcast();
    signal_tokens();
    destroy_after_broadcast();
    printf("done\n");
    return 0;
}
