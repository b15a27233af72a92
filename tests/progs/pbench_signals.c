/*
 * pbench_signals: signal paths of a threaded process (issue 28 item 4).
 *
 *   usage: pbench_signals timer MS THREADS
 *          pbench_signals sigpending N THREADS
 *
 * THREADS other threads exist meanwhile, parked in a condition wait (a
 * threaded program, whose process signals go through goshim's router).
 *
 * timer: a POSIX timer (CLOCK_MONOTONIC, SIGEV_SIGNAL, SIGRTMIN+2) fires
 * every 50 us for MS milliseconds while main sleeps in nanosleep; its
 * handler counts the signals and their overruns (si_overrun: expirations
 * the kernel folded into one signal). Prints "signals_per_s=X
 * expirations_per_s=Y" (Y = signals plus overruns: the kernel's 20,000 a
 * second when every expiration is counted).
 *
 * sigpending: main calls sigpending N times. Prints "ns_per_op=X".
 *
 * Exit 0, or 1 (usage), 2 (a call failed).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "parked.h"

static volatile sig_atomic_t signals;
static volatile long overruns;

static void die(const char *what)
{
    fprintf(stderr, "pbench_signals: %s: %s\n", what, strerror(errno));
    exit(2);
}

static void counted(int sig, siginfo_t *si, void *uc)
{
    (void)sig;
    (void)uc;
    signals++;
    overruns += si->si_overrun;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void run_timer(long ms)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = counted;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGRTMIN + 2, &sa, NULL) != 0)
        die("sigaction");
    struct sigevent ev;
    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_SIGNAL;
    ev.sigev_signo = SIGRTMIN + 2;
    timer_t t;
    if (timer_create(CLOCK_MONOTONIC, &ev, &t) != 0)
        die("timer_create");
    struct itimerspec its = {{0, 50000}, {0, 50000}};
    double t0 = now_s();
    if (timer_settime(t, 0, &its, NULL) != 0)
        die("timer_settime");
    double end = t0 + (double)ms / 1000;
    while (now_s() < end) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    timer_delete(t);
    double secs = now_s() - t0;
    printf("signals_per_s=%.0f expirations_per_s=%.0f\n", signals / secs,
           (signals + overruns) / secs);
}

static void run_sigpending(long n)
{
    sigset_t set;
    double t0 = now_s();
    for (long i = 0; i < n; i++)
        if (sigpending(&set) != 0)
            die("sigpending");
    printf("ns_per_op=%.1f\n", (now_s() - t0) * 1e9 / (double)n);
}

int main(int argc, char **argv)
{
    long n = argc > 2 ? atol(argv[2]) : 0, nt = argc > 3 ? atol(argv[3]) : -1;
    bool timer = argc > 1 && !strcmp(argv[1], "timer");
    if (argc != 4 || (!timer && strcmp(argv[1], "sigpending") != 0) || n <= 0 || nt < 0 ||
        nt > 1000) {
        fprintf(stderr, "usage: pbench_signals timer MS THREADS | sigpending N THREADS\n");
        return 1;
    }
    if ((errno = parked_start(nt)) != 0)
        die("pthread_create");
    if (timer)
        run_timer(n);
    else
        run_sigpending(n);
    parked_stop();
    return 0;
}
