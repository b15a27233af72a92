/*
 * Threads that wait in the kernel, as Open POSIX's pthread_cond_broadcast/1-2
 * has them: a process-shared mutex and condition variable, which goshim
 * passes to glibc (another process may hold them), so every waiter blocks
 * its OS thread. The main thread makes WAITERS threads; each locks the
 * mutex, counts itself and waits on the condition variable until the
 * predicate is set. The main thread polls the count (lock, read, unlock,
 * sched_yield) until all wait, then sets the predicate, broadcasts and
 * joins them all. ROUNDS times.
 *
 *   prog_shared_waiters [WAITERS [ROUNDS]]     (defaults 200, 3)
 *
 * Under goshim each waiter's hand-off asks for an OS thread while the main
 * thread and the threads not started yet are queued: a request lost on the
 * way left them queued for good. Output: "WAITERS waiters x ROUNDS rounds
 * woken"; exit 0.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

#include "prog_check.h"

static pthread_mutex_t mtx;
static pthread_cond_t cnd;
static int count, predicate;

static void *waiter(void *arg)
{
    (void)arg;
    EXPECT(pthread_mutex_lock(&mtx), 0);
    count++;
    while (!predicate)
        EXPECT(pthread_cond_wait(&cnd, &mtx), 0);
    EXPECT(pthread_mutex_unlock(&mtx), 0);
    return NULL;
}

static void round_of(int waiters, pthread_t *ts)
{
    pthread_attr_t ta;
    EXPECT(pthread_attr_init(&ta), 0);
    EXPECT(pthread_attr_setstacksize(&ta, PTHREAD_STACK_MIN), 0);
    count = predicate = 0;
    for (int i = 0; i < waiters; i++)
        EXPECT(pthread_create(&ts[i], &ta, waiter, NULL), 0);
    EXPECT(pthread_attr_destroy(&ta), 0);
    for (;;) {
        EXPECT(pthread_mutex_lock(&mtx), 0);
        int all = count == waiters;
        if (all) {
            predicate = 1;
            EXPECT(pthread_cond_broadcast(&cnd), 0);
        }
        EXPECT(pthread_mutex_unlock(&mtx), 0);
        if (all)
            break;
        sched_yield();
    }
    for (int i = 0; i < waiters; i++)
        EXPECT(pthread_join(ts[i], NULL), 0);
}

int main(int argc, char **argv)
{
    int waiters = argc > 1 ? atoi(argv[1]) : 200;
    int rounds = argc > 2 ? atoi(argv[2]) : 3;
    if (waiters < 1 || rounds < 1) {
        fprintf(stderr, "usage: prog_shared_waiters [WAITERS [ROUNDS]]\n");
        return 2;
    }
    pthread_mutexattr_t ma;
    pthread_condattr_t ca;
    EXPECT(pthread_mutexattr_init(&ma), 0);
    EXPECT(pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED), 0);
    EXPECT(pthread_condattr_init(&ca), 0);
    EXPECT(pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED), 0);
    EXPECT(pthread_mutex_init(&mtx, &ma), 0);
    EXPECT(pthread_cond_init(&cnd, &ca), 0);
    pthread_t *ts = malloc(sizeof *ts * (size_t)waiters);
    CHECK(ts != NULL);
    for (int r = 0; r < rounds; r++)
        round_of(waiters, ts);
    free(ts);
    printf("%d waiters x %d rounds woken\n", waiters, rounds);
    return 0;
}
