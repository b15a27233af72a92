/*
 * Per-thread signal masks and signals to threads.
 *
 *   prog_signals sigwait   the classic server: main blocks SIGUSR1 and SIGTERM, then makes
 *                          4 busy workers and one thread that sigwaits for both; main sends
 *                          5 SIGUSR1 to the process (kill, one at a time, each acknowledged)
 *                          then SIGTERM: the waiter takes all, no worker ever sees one
 *   prog_signals mask      a thread's mask is its own and follows it: a thread that blocked
 *                          SIGUSR2 and yields many times (moving between OS threads beside
 *                          busy threads) gets pthread_kill(SIGUSR2) only when it unblocks
 *                          it, and then on itself; a thread it creates starts with SIGUSR2
 *                          blocked; main, which never blocked it, still gets it at once
 *   prog_signals altstack  a thread with its own sigaltstack and one without, both moving
 *                          between OS threads (yields beside busy threads), each signal
 *                          themselves: an SA_ONSTACK handler runs on the alternate stack
 *                          of the first, on the normal stack of the second
 *   prog_signals suspend   a thread that blocks SIGUSR1 is sent it while it waits on a
 *                          semaphore, then calls sigsuspend with an empty mask: the
 *                          handler runs on it and sigsuspend returns EINTR; a thread's
 *                          raise() runs the handler on that thread; abort() in a thread
 *                          of a forked child ends the child with SIGABRT
 *   prog_signals targets   pthread_kill to a thread parked in a condition wait and to one
 *                          spinning: each handler runs on its target
 *
 * Output is fixed per mode; exit 0.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "prog_check.h"

static volatile sig_atomic_t stop_workers;

static void *busy(void *arg)
{
    (void)arg;
    while (!stop_workers)
        sched_yield();
    return NULL;
}

/* ---- sigwait ------------------------------------------------------------------------- */

static sem_t ack;

static void *waiter(void *arg)
{
    sigset_t *set = arg;
    int usr1 = 0, sig;
    for (;;) {
        EXPECT(sigwait(set, &sig), 0);
        if (sig == SIGTERM)
            break;
        usr1 += sig == SIGUSR1;
        CHECK(sem_post(&ack) == 0);
    }
    printf("sigwait got %d SIGUSR1 then SIGTERM\n", usr1);
    return NULL;
}

static int mode_sigwait(void)
{
    static sigset_t set;
    pthread_t w[4], wt;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGTERM);
    EXPECT(pthread_sigmask(SIG_BLOCK, &set, NULL), 0);
    CHECK(sem_init(&ack, 0, 0) == 0);
    for (int i = 0; i < 4; i++)
        EXPECT(pthread_create(&w[i], NULL, busy, NULL), 0);
    EXPECT(pthread_create(&wt, NULL, waiter, &set), 0);
    for (int i = 0; i < 5; i++) {
        CHECK(kill(getpid(), SIGUSR1) == 0);
        CHECK(sem_wait(&ack) == 0);
    }
    CHECK(kill(getpid(), SIGTERM) == 0);
    EXPECT(pthread_join(wt, NULL), 0);
    stop_workers = 1;
    for (int i = 0; i < 4; i++)
        EXPECT(pthread_join(w[i], NULL), 0);
    return 0;
}

/* ---- mask ---------------------------------------------------------------------------- */

static volatile pthread_t handled_on;
static volatile sig_atomic_t handled;

static void on_sig(int sig)
{
    (void)sig;
    handled_on = pthread_self();
    handled = handled + 1;
}

static sem_t blocked_ready, sent;

static void *inherits(void *arg)
{
    (void)arg;
    sigset_t cur;
    EXPECT(pthread_sigmask(SIG_BLOCK, NULL, &cur), 0);
    return (void *)(long)sigismember(&cur, SIGUSR2);
}

static void *blocker(void *arg)
{
    (void)arg;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR2);
    EXPECT(pthread_sigmask(SIG_BLOCK, &set, NULL), 0);
    pthread_t child;
    void *child_blocks;
    EXPECT(pthread_create(&child, NULL, inherits, NULL), 0);
    EXPECT(pthread_join(child, &child_blocks), 0);
    printf("a new thread starts with its creator's mask: %s\n", child_blocks ? "yes" : "no");
    CHECK(sem_post(&blocked_ready) == 0);
    CHECK(sem_wait(&sent) == 0);
    for (int i = 0; i < 2000; i++)
        sched_yield(); /* move between OS threads; it must stay blocked here */
    printf("handled while blocked: %d\n", (int)handled);
    EXPECT(pthread_sigmask(SIG_UNBLOCK, &set, NULL), 0);
    printf("handled after unblocking: %d, on this thread: %s\n", (int)handled,
           pthread_equal(handled_on, pthread_self()) ? "yes" : "no");
    return NULL;
}

static int mode_mask(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sig;
    CHECK(sigaction(SIGUSR2, &sa, NULL) == 0);
    CHECK(sem_init(&blocked_ready, 0, 0) == 0 && sem_init(&sent, 0, 0) == 0);
    pthread_t w[3], b;
    for (int i = 0; i < 3; i++)
        EXPECT(pthread_create(&w[i], NULL, busy, NULL), 0);
    EXPECT(pthread_create(&b, NULL, blocker, NULL), 0);
    CHECK(sem_wait(&blocked_ready) == 0);
    EXPECT(pthread_kill(b, SIGUSR2), 0);
    CHECK(sem_post(&sent) == 0);
    EXPECT(pthread_join(b, NULL), 0);
    handled = 0;
    EXPECT(pthread_kill(pthread_self(), SIGUSR2), 0);
    printf("main, unblocked, handled it at once: %s\n",
           handled == 1 && pthread_equal(handled_on, pthread_self()) ? "yes" : "no");
    stop_workers = 1;
    for (int i = 0; i < 3; i++)
        EXPECT(pthread_join(w[i], NULL), 0);
    return 0;
}

/* ---- altstack ------------------------------------------------------------------------ */

static __thread char *alt_lo, *alt_hi; /* this thread's alternate stack, if any */
static __thread volatile int on_alt;   /* where its last handler ran */

static void on_alt_sig(int sig)
{
    char here;
    (void)sig;
    on_alt = &here >= alt_lo && &here < alt_hi;
}

static void *alt_thread(void *arg)
{
    int with_alt = arg != NULL;
    if (with_alt) {
        stack_t ss = {.ss_size = 1 << 16};
        ss.ss_sp = malloc(ss.ss_size);
        CHECK(ss.ss_sp != NULL && sigaltstack(&ss, NULL) == 0);
        alt_lo = ss.ss_sp;
        alt_hi = alt_lo + ss.ss_size;
    }
    int good = 1;
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < 100; i++)
            sched_yield();
        on_alt = -1;
        EXPECT(pthread_kill(pthread_self(), SIGUSR1), 0);
        good &= on_alt == with_alt;
    }
    stack_t cur;
    CHECK(sigaltstack(NULL, &cur) == 0);
    good &= with_alt ? cur.ss_sp == alt_lo : (cur.ss_flags & SS_DISABLE) != 0;
    return (void *)(long)good;
}

static int mode_altstack(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alt_sig;
    sa.sa_flags = SA_ONSTACK;
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
    pthread_t w[2], a, b;
    void *ra, *rb;
    for (int i = 0; i < 2; i++)
        EXPECT(pthread_create(&w[i], NULL, busy, NULL), 0);
    EXPECT(pthread_create(&a, NULL, alt_thread, (void *)1), 0);
    EXPECT(pthread_create(&b, NULL, alt_thread, NULL), 0);
    EXPECT(pthread_join(a, &ra), 0);
    EXPECT(pthread_join(b, &rb), 0);
    stop_workers = 1;
    for (int i = 0; i < 2; i++)
        EXPECT(pthread_join(w[i], NULL), 0);
    printf("with sigaltstack: handlers on it: %s\n", ra ? "yes" : "no");
    printf("without: handlers on the thread's stack: %s\n", rb ? "yes" : "no");
    return 0;
}

/* ---- suspend, raise, abort ------------------------------------------------------------ */

static sem_t ready, go;
static volatile pthread_t usr1_on;

static void on_usr1(int sig)
{
    (void)sig;
    usr1_on = pthread_self();
}

static void *suspender(void *arg)
{
    (void)arg;
    sigset_t set, none;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigemptyset(&none);
    EXPECT(pthread_sigmask(SIG_BLOCK, &set, NULL), 0);
    CHECK(sem_post(&ready) == 0);
    CHECK(sem_wait(&go) == 0); /* SIGUSR1 arrives while it waits here, blocked */
    sigset_t pend;
    CHECK(sigpending(&pend) == 0);
    printf("sigpending shows it: %s\n", sigismember(&pend, SIGUSR1) == 1 ? "yes" : "no");
    int before = usr1_on != 0;
    int r = sigsuspend(&none);
    int err = errno;
    printf("sigsuspend: returned %d %s, handler ran on this thread only then: %s\n", r,
           err == EINTR ? "EINTR" : "?",
           !before && pthread_equal(usr1_on, pthread_self()) ? "yes" : "no");
    usr1_on = 0;
    EXPECT(pthread_sigmask(SIG_UNBLOCK, &set, NULL), 0);
    raise(SIGUSR1);
    printf("raise: handler ran on the raising thread: %s\n",
           pthread_equal(usr1_on, pthread_self()) ? "yes" : "no");
    return NULL;
}

static void *aborter(void *arg)
{
    (void)arg;
    abort();
}

static int mode_suspend(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
    CHECK(sem_init(&ready, 0, 0) == 0 && sem_init(&go, 0, 0) == 0);
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, suspender, NULL), 0);
    CHECK(sem_wait(&ready) == 0);
    EXPECT(pthread_kill(t, SIGUSR1), 0);
    CHECK(sem_post(&go) == 0);
    EXPECT(pthread_join(t, NULL), 0);

    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        pthread_t a;
        pthread_create(&a, NULL, aborter, NULL);
        pthread_join(a, NULL);
        _exit(0);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    printf("abort in a thread: child killed by SIGABRT: %s\n",
           WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT ? "yes" : "no");
    return 0;
}

/* ---- targets --------------------------------------------------------------------------- */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int parked, wake_parked;
static volatile sig_atomic_t spinning, stop_spinning;
static volatile pthread_t spin_handled_on, park_handled_on;

static void on_spin_sig(int sig)
{
    (void)sig;
    spin_handled_on = pthread_self();
    stop_spinning = 1;
}

static void on_park_sig(int sig)
{
    (void)sig;
    park_handled_on = pthread_self();
}

static void *parker(void *arg)
{
    (void)arg;
    EXPECT(pthread_mutex_lock(&mu), 0);
    parked = 1;
    EXPECT(pthread_cond_broadcast(&cv), 0);
    while (!wake_parked)
        EXPECT(pthread_cond_wait(&cv, &mu), 0); /* a handler may run in here */
    EXPECT(pthread_mutex_unlock(&mu), 0);
    return (void *)(long)pthread_equal(park_handled_on, pthread_self());
}

static void *spinner(void *arg)
{
    (void)arg;
    spinning = 1;
    while (!stop_spinning) {
    }
    return (void *)(long)pthread_equal(spin_handled_on, pthread_self());
}

static int mode_targets(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_park_sig;
    sa.sa_flags = SA_RESTART;
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
    sa.sa_handler = on_spin_sig;
    CHECK(sigaction(SIGUSR2, &sa, NULL) == 0);
    pthread_t p, s;
    void *pr, *sr;
    EXPECT(pthread_create(&p, NULL, parker, NULL), 0);
    EXPECT(pthread_mutex_lock(&mu), 0);
    while (!parked)
        EXPECT(pthread_cond_wait(&cv, &mu), 0);
    EXPECT(pthread_mutex_unlock(&mu), 0);
    EXPECT(pthread_kill(p, SIGUSR1), 0); /* it waits (or is about to) on cv */
    EXPECT(pthread_create(&s, NULL, spinner, NULL), 0);
    while (!spinning)
        sched_yield();
    EXPECT(pthread_kill(s, SIGUSR2), 0);
    EXPECT(pthread_join(s, &sr), 0);
    while (!park_handled_on)
        sched_yield();
    EXPECT(pthread_mutex_lock(&mu), 0);
    wake_parked = 1;
    EXPECT(pthread_cond_broadcast(&cv), 0);
    EXPECT(pthread_mutex_unlock(&mu), 0);
    EXPECT(pthread_join(p, &pr), 0);
    printf("parked thread ran its handler: %s\n", pr ? "yes" : "no");
    printf("spinning thread ran its handler: %s\n", sr ? "yes" : "no");
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 2 && !strcmp(argv[1], "sigwait"))
        return mode_sigwait();
    if (argc == 2 && !strcmp(argv[1], "mask"))
        return mode_mask();
    if (argc == 2 && !strcmp(argv[1], "altstack"))
        return mode_altstack();
    if (argc == 2 && !strcmp(argv[1], "suspend"))
        return mode_suspend();
    if (argc == 2 && !strcmp(argv[1], "targets"))
        return mode_targets();
    fprintf(stderr, "usage: prog_signals sigwait|mask|altstack|suspend|targets\n");
    return 2;
}
