/*
 * A fork child's first use of the runtime, whatever it is, while the parent's threads
 * were busy with it at the fork: goshim resets a child's runtime only when the child
 * first needs it, so each of these first acts must find it reset.
 *
 *   prog_fork_first [CHILDREN]   (default 64, scaled by GOSHIM_TEST_SCALE)
 *
 * The parent keeps four kinds of threads busy: waiters on a condition variable (a
 * futex queue), timed waiters (timers), lockers of one contended mutex (its wake-ups),
 * and yielders (run queues). Main then makes the children one at a time;
 * child i starts with act i % 5, then does all the rest:
 *   0  raise(SIGUSR1): the handler (installed by the parent) posts a semaphore and
 *      takes and releases a mutex of its own, in the signal handler;
 *   1  a 1 ms timed wait on a condition variable nobody signals: ETIMEDOUT;
 *   2  fork again: the grandchild does the same acts, the child waits for it;
 *   3  sched_yield, then a 1 ms nanosleep;
 *   4  pthread_create: four threads, each locking the child's mutex, joined.
 * A child exits 0 only if every act did what it must; one that does not end within
 * 10 s is reported as hung and killed.
 *
 * Output, exit 0: "children that found the runtime whole: N of N".
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "prog_check.h"

static atomic_int stop;
static pthread_mutex_t busy_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t busy_cv = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t child_mu = PTHREAD_MUTEX_INITIALIZER;
static sem_t handler_sem;

static void on_usr1(int sig)
{
    (void)sig;
    sem_post(&handler_sem);
    pthread_mutex_lock(&child_mu);
    pthread_mutex_unlock(&child_mu);
}

static void *waiter(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&busy_mu);
    while (!atomic_load(&stop))
        pthread_cond_wait(&busy_cv, &busy_mu);
    pthread_mutex_unlock(&busy_mu);
    return NULL;
}

static void *timed_waiter(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&busy_mu);
    while (!atomic_load(&stop)) {
        struct timespec ts = in_ms(CLOCK_REALTIME, 1);
        pthread_cond_timedwait(&busy_cv, &busy_mu, &ts);
    }
    pthread_mutex_unlock(&busy_mu);
    return NULL;
}

static void *locker(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop)) {
        pthread_mutex_lock(&busy_mu);
        pthread_mutex_unlock(&busy_mu);
    }
    return NULL;
}

static void *yielder(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop))
        sched_yield();
    return NULL;
}

static void *child_thread(void *arg)
{
    pthread_mutex_lock(&child_mu);
    pthread_mutex_unlock(&child_mu);
    return arg;
}

static int run_acts(int first, int depth);

/* One act; 0 if it did what it must. */
static int act(int which, int depth)
{
    switch (which) {
    case 0:
        if (raise(SIGUSR1) != 0 || sem_trywait(&handler_sem) != 0)
            return 1;
        return 0;
    case 1: {
        pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
        struct timespec ts = in_ms(CLOCK_REALTIME, 1);
        pthread_mutex_lock(&child_mu);
        int r = pthread_cond_timedwait(&cv, &child_mu, &ts);
        pthread_mutex_unlock(&child_mu);
        return r != ETIMEDOUT;
    }
    case 2: {
        if (depth > 0)
            return 0;
        pid_t pid = fork();
        if (pid < 0)
            return 1;
        if (pid == 0)
            _exit(run_acts(1, depth + 1));
        int st;
        return waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    case 3: {
        struct timespec ms = {0, 1000000};
        return sched_yield() != 0 || nanosleep(&ms, NULL) != 0;
    }
    default: {
        pthread_t t[4];
        for (long i = 0; i < 4; i++)
            if (pthread_create(&t[i], NULL, child_thread, (void *)i) != 0)
                return 1;
        int bad = 0;
        for (long i = 0; i < 4; i++) {
            void *r;
            bad |= pthread_join(t[i], &r) != 0 || r != (void *)i;
        }
        return bad;
    }
    }
}

/* Every act once, the first one first: 0 if all did what they must. */
static int run_acts(int first, int depth)
{
    int bad = 0;
    for (int k = 0; k < 5; k++)
        bad |= act((first + k) % 5, depth) << k;
    return bad;
}

/* Wait up to 10 s for pid; its exit status, or -1 if it hung (then killed). */
static int wait_child(pid_t pid)
{
    int st;
    for (int i = 0; i < 10000; i++) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        CHECK(r == 0);
        usleep(1000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
}

int main(int argc, char **argv)
{
    long n = scaled(argc > 1 ? atol(argv[1]) : 64);
    CHECK(sem_init(&handler_sem, 0, 0) == 0);
    struct sigaction sa = {.sa_handler = on_usr1};
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
    void *(*kinds[])(void *) = {waiter, waiter, timed_waiter, locker, locker, yielder};
    enum { NT = sizeof kinds / sizeof kinds[0] };
    pthread_t t[NT];
    for (int i = 0; i < NT; i++)
        CHECK(pthread_create(&t[i], NULL, kinds[i], NULL) == 0);
    long whole = 0;
    for (long i = 0; i < n; i++) {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0)
            _exit(run_acts((int)(i % 5), 0));
        int st = wait_child(pid);
        if (st == 0)
            whole++;
        else if (st < 0)
            fprintf(stderr, "child %ld (first act %ld) hung\n", i, i % 5);
        else
            fprintf(stderr, "child %ld (first act %ld) ended with %d\n", i, i % 5, st);
    }
    atomic_store(&stop, 1);
    pthread_mutex_lock(&busy_mu);
    pthread_cond_broadcast(&busy_cv);
    pthread_mutex_unlock(&busy_mu);
    for (int i = 0; i < NT; i++)
        CHECK(pthread_join(t[i], NULL) == 0);
    printf("children that found the runtime whole: %ld of %ld\n", whole, n);
    return whole == n ? 0 : 1;
}
