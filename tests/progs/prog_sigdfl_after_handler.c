/*
 * A signal's handler set back to SIG_DFL once the handler has taken every
 * signal sent: nothing of those may act later as the default.
 *
 *   prog_sigdfl_after_handler rounds [CYCLES]
 *       CYCLES times (default 50, scaled by GOSHIM_TEST_SCALE): SIGALRM's
 *       handler installed, 100 rounds of a 1-11 us ITIMER_REAL counted by it
 *       while the main thread sleeps 10 us at a time (a worker computes and
 *       naps, the main thread's waitpid with WNOHANG moves it between OS
 *       threads under a runtime that multiplexes them), then SIGALRM back to
 *       SIG_DFL and four threads that compute and nap for a few ms. Under
 *       goshim before the fix, a wake-up goshim had queued for SIGALRM on an
 *       idle OS thread came through after SIG_DFL: "Alarm clock".
 *   prog_sigdfl_after_handler pending
 *       in a child: SIGTERM blocked, a handler installed, SIGTERM sent to the
 *       process (it stays pending), the handler set back to SIG_DFL, SIGTERM
 *       unblocked: the child ends by SIGTERM, as the signal was pending.
 *
 * Prints a line per mode and exits 0.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "prog_check.h"

static volatile sig_atomic_t alarms, stop;

static void counted(int sig)
{
    (void)sig;
    alarms++;
}

static void *worker(void *arg)
{
    (void)arg;
    struct timespec nap = {0, 1000};
    uint64_t x = 1;
    while (!stop) {
        x = xorshift_work(x, 2000);
        nanosleep(&nap, NULL);
    }
    return (void *)(uintptr_t)(x & 1);
}

static void *waker(void *arg)
{
    (void)arg;
    struct timespec nap = {0, 50000};
    uint64_t x = 1;
    for (int i = 0; i < 20; i++) {
        x = xorshift_work(x, 20000);
        nanosleep(&nap, NULL);
    }
    return (void *)(uintptr_t)(x & 1);
}

static int mode_rounds(long cycles)
{
    struct sigaction sa, dfl;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = counted;
    dfl = sa;
    dfl.sa_handler = SIG_DFL;
    pthread_t w;
    EXPECT(pthread_create(&w, NULL, worker, NULL), 0);
    unsigned seed = 1;
    for (long c = 0; c < cycles; c++) {
        alarms = 0;
        CHECK(sigaction(SIGALRM, &sa, NULL) == 0);
        for (int k = 1; k <= 100; k++) {
            seed = seed * 1103515245 + 12345;
            struct itimerval it = {{0, 0}, {0, 1 + (long)((seed >> 16) % 11)}};
            CHECK(setitimer(ITIMER_REAL, &it, NULL) == 0);
            CHECK(waitpid(-1, NULL, WNOHANG) == -1 && errno == ECHILD);
            if (!await_count(&alarms, k)) {
                fprintf(stderr, "cycle %ld round %d: no SIGALRM within 10 s\n", c, k);
                return 1;
            }
        }
        CHECK(sigaction(SIGALRM, &dfl, NULL) == 0);
        pthread_t t[4];
        for (int i = 0; i < 4; i++)
            EXPECT(pthread_create(&t[i], NULL, waker, NULL), 0);
        for (int i = 0; i < 4; i++)
            EXPECT(pthread_join(t[i], NULL), 0);
    }
    stop = 1;
    EXPECT(pthread_join(w, NULL), 0);
    printf("SIGALRM back to SIG_DFL after each of %ld cycles: no late signal\n", cycles);
    return 0;
}

static void ignored(int sig)
{
    (void)sig;
}

static int mode_pending(void)
{
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        sigset_t term;
        sigemptyset(&term);
        sigaddset(&term, SIGTERM);
        EXPECT(pthread_sigmask(SIG_BLOCK, &term, NULL), 0);
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = ignored;
        CHECK(sigaction(SIGTERM, &sa, NULL) == 0);
        CHECK(kill(getpid(), SIGTERM) == 0);
        sa.sa_handler = SIG_DFL;
        CHECK(sigaction(SIGTERM, &sa, NULL) == 0);
        EXPECT(pthread_sigmask(SIG_UNBLOCK, &term, NULL), 0);
        _exit(0);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    printf("pending SIGTERM, handler back to SIG_DFL, unblocked: killed by SIGTERM: %s\n",
           WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM ? "yes" : "no");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "rounds"))
        return mode_rounds(scaled(argc > 2 ? atol(argv[2]) : 50));
    if (argc > 1 && !strcmp(argv[1], "pending"))
        return mode_pending();
    fprintf(stderr, "usage: %s rounds [CYCLES] | pending\n", argv[0]);
    return 2;
}
