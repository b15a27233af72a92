/*
 * The main thread with an alternate signal stack (as CPython's faulthandler
 * gives it) and SA_ONSTACK handlers (as CPython installs every handler),
 * the pattern of CPython's test_signal StressTest: SIGPROF and SIGUSR1
 * handlers that re-arm ITIMER_REAL with 1-11 us, a SIGALRM handler that
 * counts, and the main thread that sends itself SIGPROF or SIGUSR1 and
 * sleeps 10 us at a time (clock_nanosleep, TIMER_ABSTIME, as Python's
 * time.sleep) until the SIGALRM came. Each round it also calls waitpid
 * with WNOHANG (nothing to wait for) while a worker thread computes and
 * sleeps in short steps: a call that may block, so the main thread moves
 * between OS threads when it runs under a runtime that multiplexes them.
 *
 *   prog_sigaltstack_timers [ROUNDS]   (default 6000, scaled by GOSHIM_TEST_SCALE)
 *
 * Prints "every SIGALRM counted, every handler on the alternate stack: yes"
 * and exits 0. Under goshim before the fix the alternate stack stayed
 * installed on an OS thread the main thread had left, two OS threads took
 * signals on it at once, and one returned from its handler into the
 * other's registers: a crash.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "prog_check.h"

enum { ALT_SIZE = 1 << 16 };

static char *alt_lo, *alt_hi;
static pthread_t main_thread;
static volatile sig_atomic_t alarms, off_alt, stop;
static unsigned seed = 1;

/* Where the handler runs: on the main thread's alternate stack, always. */
static void check_on_alt(void)
{
    char here;
    if (pthread_equal(pthread_self(), main_thread) && (&here < alt_lo || &here >= alt_hi))
        off_alt = 1;
}

static void rearm(int sig)
{
    (void)sig;
    check_on_alt();
    seed = seed * 1103515245 + 12345; /* only the main thread's handlers run this */
    struct itimerval it = {{0, 0}, {0, 1 + (long)((seed >> 16) % 11)}};
    setitimer(ITIMER_REAL, &it, NULL);
}

static void counted(int sig)
{
    (void)sig;
    check_on_alt();
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

int main(int argc, char **argv)
{
    long rounds = scaled(argc > 1 ? atol(argv[1]) : 6000);
    stack_t ss = {.ss_size = ALT_SIZE};
    ss.ss_sp = malloc(ss.ss_size);
    CHECK(ss.ss_sp != NULL && sigaltstack(&ss, NULL) == 0);
    alt_lo = ss.ss_sp;
    alt_hi = alt_lo + ss.ss_size;
    main_thread = pthread_self();

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_ONSTACK; /* no SA_RESTART: CPython's flags */
    sa.sa_handler = rearm;
    CHECK(sigaction(SIGPROF, &sa, NULL) == 0 && sigaction(SIGUSR1, &sa, NULL) == 0);
    sa.sa_handler = counted;
    CHECK(sigaction(SIGALRM, &sa, NULL) == 0);

    pthread_t w;
    EXPECT(pthread_create(&w, NULL, worker, NULL), 0);
    for (long r = 0; r < rounds; r++) {
        CHECK(kill(getpid(), r & 1 ? SIGUSR1 : SIGPROF) == 0);
        CHECK(waitpid(-1, NULL, WNOHANG) == -1 && errno == ECHILD);
        if (!await_count(&alarms, (int)r + 1)) {
            fprintf(stderr, "round %ld: no SIGALRM within 10 s (%d counted)\n", r, (int)alarms);
            return 1;
        }
    }
    stop = 1;
    EXPECT(pthread_join(w, NULL), 0);
    if (alarms != rounds || off_alt)
        fprintf(stderr,
                "%d SIGALRMs counted for %ld rounds; a handler off the alternate stack: %s\n",
                (int)alarms, rounds, off_alt ? "yes" : "no");
    printf("every SIGALRM counted, every handler on the alternate stack: %s\n",
           alarms == rounds && !off_alt ? "yes" : "no");
    return 0;
}
