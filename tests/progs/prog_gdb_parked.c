/*
 * Fifty threads parked for good, for the gdb helper's tests
 * (tools/goshim-gdb.py): 15 on a mutex main holds, 15 on a condition
 * variable nobody signals, 10 in read() on a pipe nobody writes, 10 in a
 * one-hour sleep. Each is named after its kind ("mutex-3", "cond-0",
 * "pipe-9", "sleep-2") and waits in a function of its own (park_on_mutex,
 * park_on_cond, park_on_pipe, park_in_sleep), so a backtrace must show the
 * program's own names.
 *
 * Main prints "ready N" (N: threads started) once every thread has
 * reached the call it parks in, then waits in read() on stdin; when stdin
 * closes it prints "bye" and exits 0 without joining anyone.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <unistd.h>

enum { NMUTEX = 15, NCOND = 15, NPIPE = 10, NSLEEP = 10 };

static pthread_mutex_t held = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t cmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t never = PTHREAD_COND_INITIALIZER;
static int pfd[2];
static int arrived; /* atomic: threads about to park */

static void name_self(const char *kind, long i)
{
    char name[16];
    snprintf(name, sizeof name, "%s-%ld", kind, i);
    pthread_setname_np(pthread_self(), name);
    __atomic_add_fetch(&arrived, 1, __ATOMIC_SEQ_CST);
}

__attribute__((noinline)) static void *park_on_mutex(void *arg)
{
    name_self("mutex", (long)arg);
    pthread_mutex_lock(&held);
    pthread_mutex_unlock(&held);
    return NULL;
}

__attribute__((noinline)) static void *park_on_cond(void *arg)
{
    pthread_mutex_lock(&cmu);
    name_self("cond", (long)arg);
    for (;;)
        pthread_cond_wait(&never, &cmu);
    return NULL;
}

__attribute__((noinline)) static void *park_on_pipe(void *arg)
{
    char c;
    name_self("pipe", (long)arg);
    if (read(pfd[0], &c, 1) < 0)
        perror("read");
    return NULL;
}

__attribute__((noinline)) static void *park_in_sleep(void *arg)
{
    name_self("sleep", (long)arg);
    sleep(3600);
    return NULL;
}

int main(void)
{
    static void *(*const fns[])(void *) = {park_on_mutex, park_on_cond, park_on_pipe,
                                           park_in_sleep};
    static const int counts[] = {NMUTEX, NCOND, NPIPE, NSLEEP};
    int started = 0;
    char c;

    if (pipe(pfd) != 0)
        return 2;
    pthread_mutex_lock(&held);
    for (int k = 0; k < 4; k++) {
        for (long i = 0; i < counts[k]; i++) {
            pthread_t t;
            if (pthread_create(&t, NULL, fns[k], (void *)i) != 0)
                return 2;
            started++;
        }
    }
    while (__atomic_load_n(&arrived, __ATOMIC_SEQ_CST) < started)
        sched_yield();
    /* The condition waiters hold cmu until cond_wait lets it go. */
    pthread_mutex_lock(&cmu);
    pthread_mutex_unlock(&cmu);
    printf("ready %d\n", started);
    fflush(stdout);
    while (read(0, &c, 1) > 0)
        ;
    printf("bye\n");
    fflush(stdout);
    return 0;
}
