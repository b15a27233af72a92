/*
 * Per-thread facts the Open POSIX Test Suite checks (issue 13, item 5).
 *
 *   prog_thread_facts joined    join and detach of a thread already joined: ESRCH
 *   prog_thread_facts masks     pthread_sigmask never adds SIGKILL or SIGSTOP, and reports
 *                               SIGURG blocked when the program blocked it
 *   prog_thread_facts pending   a new thread's pending set is empty while its creator has
 *                               SIGUSR1 pending (blocked)
 *   prog_thread_facts semintr   sem_timedwait fails with EINTR when a handler interrupts it
 *
 * Output is fixed for each mode; exit 0.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "prog_check.h"

static void *nothing(void *arg)
{
    return arg;
}

static int mode_joined(void)
{
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, nothing, NULL), 0);
    EXPECT(pthread_join(t, NULL), 0);
    int j = pthread_join(t, NULL), d = pthread_detach(t);
    printf("second join: %s; detach after join: %s\n", j == ESRCH ? "ESRCH" : strerror(j),
           d == ESRCH ? "ESRCH" : strerror(d));
    return 0;
}

static int mode_masks(void)
{
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGKILL);
    sigaddset(&set, SIGSTOP);
    sigaddset(&set, SIGURG);
    EXPECT(pthread_sigmask(SIG_BLOCK, &set, NULL), 0);
    EXPECT(pthread_sigmask(SIG_SETMASK, NULL, &old), 0);
    printf("SIGKILL blocked: %s, SIGSTOP blocked: %s, SIGURG blocked: %s\n",
           sigismember(&old, SIGKILL) == 1 ? "yes" : "no",
           sigismember(&old, SIGSTOP) == 1 ? "yes" : "no",
           sigismember(&old, SIGURG) == 1 ? "yes" : "no");
    return 0;
}

static void *reports_pending(void *arg)
{
    sigset_t *pend = arg;
    CHECK(sigpending(pend) == 0);
    return NULL;
}

static int mode_pending(void)
{
    sigset_t usr1, mine, theirs;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    EXPECT(pthread_sigmask(SIG_BLOCK, &usr1, NULL), 0);
    EXPECT(pthread_kill(pthread_self(), SIGUSR1), 0);
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, reports_pending, &theirs), 0);
    EXPECT(pthread_join(t, NULL), 0);
    CHECK(sigpending(&mine) == 0);
    printf("creator has SIGUSR1 pending: %s; the new thread: %s\n",
           sigismember(&mine, SIGUSR1) == 1 ? "yes" : "no",
           sigismember(&theirs, SIGUSR1) == 1 ? "yes" : "no");
    return 0;
}

static sem_t sem;
static volatile sig_atomic_t handled;

static void on_usr1(int sig)
{
    (void)sig;
    handled = 1;
}

static void *interrupts(void *arg)
{
    pthread_t main_thread = *(pthread_t *)arg;
    struct timespec ts = {0, 50 * 1000 * 1000}; /* pacing: it is in sem_timedwait by then */
    for (int i = 0; i < 100 && !handled; i++) {
        nanosleep(&ts, NULL);
        pthread_kill(main_thread, SIGUSR1);
    }
    return NULL;
}

static int mode_semintr(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1; /* no SA_RESTART */
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
    EXPECT(sem_init(&sem, 0, 0), 0);
    pthread_t self = pthread_self(), t;
    EXPECT(pthread_create(&t, NULL, interrupts, &self), 0);
    struct timespec dl = in_ms(CLOCK_REALTIME, 10000);
    int r = sem_timedwait(&sem, &dl);
    int e = errno;
    EXPECT(pthread_join(t, NULL), 0);
    printf("sem_timedwait: %d %s\n", r, r == -1 && e == EINTR ? "EINTR" : strerror(e));
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "joined"))
        return mode_joined();
    if (!strcmp(mode, "masks"))
        return mode_masks();
    if (!strcmp(mode, "pending"))
        return mode_pending();
    if (!strcmp(mode, "semintr"))
        return mode_semintr();
    fprintf(stderr, "usage: prog_thread_facts joined|masks|pending|semintr\n");
    return 2;
}
