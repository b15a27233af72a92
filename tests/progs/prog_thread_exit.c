/*
 * pthread_exit and cancellation run cleanup handlers innermost first, keep
 * the return value, and main's pthread_exit lets the others finish, after
 * which the process exits with status 0 (and atexit handlers run).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
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
    pthread_create(&t, NULL, popper, NULL);
    pthread_join(t, &r);
    printf("pop: value %ld, handlers ran as %.*s\n", (long)r, norder, order);

    atexit(at_exit);
    pthread_create(&t, NULL, late, NULL);
    fflush(stdout);
    pthread_exit(NULL);
}
