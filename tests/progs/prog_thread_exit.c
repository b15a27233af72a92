/*
 * pthread_exit and cancellation run cleanup handlers innermost first, keep
 * the return value, and main's pthread_exit lets the others finish, after
 * which the process exits with status 0 (and atexit handlers run).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <semaphore.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char order[64];
static int norder;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void note(void *arg)
{
    pthread_mutex_lock(&lock);
    order[norder++] = *(const char *)arg;
    pthread_mutex_unlock(&lock);
}

static volatile int depth;
static void deep(int n)
{
    depth = n;
    if (n == 0)
        pthread_exit((void *)42L);
    if (depth >= 0) /* always: frames for the unwinder to pass */
        deep(n - 1);
}

static void *exiter(void *arg)
{
    (void)arg;
    pthread_cleanup_push(note, "a");
    pthread_cleanup_push(note, "b");
    deep(5);
    pthread_cleanup_pop(0);
    pthread_cleanup_pop(0);
    return NULL;
}

static void *cancellee(void *arg)
{
    (void)arg;
    pthread_cleanup_push(note, "c");
    for (;;) {
        pthread_testcancel();
        sched_yield();
    }
    pthread_cleanup_pop(0);
    return NULL;
}

static void *popper(void *arg)
{
    (void)arg;
    pthread_cleanup_push(note, "d");
    pthread_cleanup_pop(1); /* runs now */
    pthread_cleanup_push(note, "x");
    pthread_cleanup_pop(0); /* never runs */
    return (void *)1L;
}

static pthread_mutex_t cm = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cc = PTHREAD_COND_INITIALIZER;
static int cond_waiting;

static void unlock_cm(void *arg)
{
    (void)arg;
    note("m");
    pthread_mutex_unlock(&cm); /* the cancelled cond_wait re-acquired it */
}

static void *cond_waiter(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&cm);
    pthread_cleanup_push(unlock_cm, NULL);
    cond_waiting = 1;
    pthread_cond_signal(&cc);
    for (;;)
        pthread_cond_wait(&cc, &cm); /* nobody signals: only cancellation ends it */
    pthread_cleanup_pop(0);
    return NULL;
}

static sem_t never;
static void *sem_waiter(void *arg)
{
    (void)arg;
    pthread_cleanup_push(note, "s");
    sem_wait(&never);
    pthread_cleanup_pop(0);
    return NULL;
}

static void *forever(void *arg)
{
    (void)arg;
    for (;;)
        sem_wait(&never);
    return NULL;
}

static void *joiner(void *arg)
{
    pthread_cleanup_push(note, "j");
    pthread_join(*(pthread_t *)arg, NULL);
    pthread_cleanup_pop(0);
    return NULL;
}

static pthread_once_t once2 = PTHREAD_ONCE_INIT;
static int once2_runs;
static void once2_init(void)
{
    if (once2_runs++ == 0)
        pthread_exit(NULL); /* the first init never finishes */
}
static void *once2_thread(void *arg)
{
    (void)arg;
    pthread_once(&once2, once2_init);
    return (void *)1L;
}

static volatile int late_done;
static void *late(void *arg)
{
    (void)arg;
    for (int i = 0; i < 1000; i++)
        sched_yield();
    printf("late thread finished after main's pthread_exit\n");
    fflush(stdout);
    late_done = 1;
    return NULL;
}

static void at_exit(void)
{
    printf("atexit ran, late thread done: %d\n", late_done);
}

int main(void)
{
    void *r;
    pthread_t t;
    pthread_create(&t, NULL, exiter, NULL);
    pthread_join(t, &r);
    printf("exit: value %ld, handlers ran as %.*s\n", (long)r, norder, order);

    norder = 0;
    pthread_create(&t, NULL, cancellee, NULL);
    pthread_cancel(t);
    pthread_join(t, &r);
    printf("cancel: canceled %d, handler ran as %.*s\n", r == PTHREAD_CANCELED, norder, order);

    norder = 0;
    pthread_create(&t, NULL, cond_waiter, NULL);
    pthread_mutex_lock(&cm);
    while (!cond_waiting)
        pthread_cond_wait(&cc, &cm);
    pthread_mutex_unlock(&cm);
    pthread_cancel(t);
    pthread_join(t, &r);
    int relock = pthread_mutex_trylock(&cm);
    if (relock == 0)
        pthread_mutex_unlock(&cm);
    printf("cancel in cond_wait: canceled %d, handler ran as %.*s, mutex free %d\n",
           r == PTHREAD_CANCELED, norder, order, relock == 0);

    norder = 0;
    sem_init(&never, 0, 0);
    pthread_create(&t, NULL, sem_waiter, NULL);
    for (int i = 0; i < 100; i++)
        sched_yield();
    pthread_cancel(t);
    pthread_join(t, &r);
    printf("cancel in sem_wait: canceled %d, handler ran as %.*s\n", r == PTHREAD_CANCELED, norder,
           order);

    norder = 0;
    pthread_t target, j;
    pthread_create(&target, NULL, forever, NULL);
    pthread_create(&j, NULL, joiner, &target);
    for (int i = 0; i < 100; i++)
        sched_yield();
    pthread_cancel(j);
    pthread_join(j, &r);
    printf("cancel in pthread_join: canceled %d, handler ran as %.*s\n", r == PTHREAD_CANCELED,
           norder, order);
    pthread_cancel(target);
    pthread_join(target, &r);
    printf("its target stayed joinable: canceled %d\n", r == PTHREAD_CANCELED);

    norder = 0;
    pthread_create(&t, NULL, popper, NULL);
    pthread_join(t, &r);
    printf("pop: value %ld, handlers ran as %.*s\n", (long)r, norder, order);

    void *r1, *r2;
    pthread_create(&t, NULL, once2_thread, NULL);
    pthread_join(t, &r1);
    pthread_create(&t, NULL, once2_thread, NULL);
    pthread_join(t, &r2);
    printf("once whose init exited: ran %d times, returns %ld then %ld\n", once2_runs, (long)r1,
           (long)r2);

    atexit(at_exit);
    pthread_create(&t, NULL, late, NULL);
    fflush(stdout);
    pthread_exit(NULL);
}
