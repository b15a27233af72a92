/*
 * prog_preempt_sigurg: a program with its own SIGURG handler (goshim's
 * default preemption signal) gets every SIGURG of its own, and no other.
 *
 *   prog_preempt_sigurg [K]          (default 100 signals)
 *
 * main installs a SIGURG handler (SA_SIGINFO | SA_RESTART, SIGUSR2 in its
 * mask) that counts its calls, and notes any call that is not one of the
 * program's own (si_code other than SI_TKILL, another sender's pid) or that
 * runs on another thread than main. It starts two spinner threads that
 * spin with no calls until told to stop (under goshim with GOSHIM_PROCS=1
 * and a short GOSHIM_PREEMPT they are preempted often, by goshim's own
 * signal), then raises SIGURG itself K times, alternately with raise() and
 * pthread_kill(pthread_self()): delivery to itself is synchronous, so after
 * each call the count must have gone up by exactly one. Between two calls
 * main sleeps 2 ms (with one P it can only run again if a spinner is
 * preempted). At the end, after the spinners have stopped, the handler must
 * have run exactly K times, and sigaction(SIGURG, NULL, &old) must still
 * return the program's handler, flags and mask (checked at the start too).
 * Output:
 *   sigurg: app handler ran K times
 * exit 0; otherwise what went wrong, exit 1.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "prog_check.h"

#define NSPIN 2

static long calls;   /* handler calls */
static long foreign; /* calls that are not main's own raise()/pthread_kill() */
static long elsewhere;
static pid_t mypid;
static pthread_t main_thread;
static int stop;
static unsigned long spins[NSPIN];

static void on_sigurg(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    int saved = errno;
    __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED);
    if (sig != SIGURG || si == NULL || si->si_code != SI_TKILL || si->si_pid != mypid)
        __atomic_add_fetch(&foreign, 1, __ATOMIC_RELAXED);
    if (!pthread_equal(pthread_self(), main_thread))
        __atomic_add_fetch(&elsewhere, 1, __ATOMIC_RELAXED);
    errno = saved;
}

/* No calls in the loop. */
static void *spinner_fn(void *arg)
{
    unsigned long *n = arg, i = 0;

    while (!__atomic_load_n(&stop, __ATOMIC_RELAXED))
        i++;
    *n = i;
    return NULL;
}

/* sigaction(SIGURG, NULL, &old) must describe on_sigurg as installed. */
static void check_installed(const char *when)
{
    struct sigaction old;

    CHECK(sigaction(SIGURG, NULL, &old) == 0);
    if (!(old.sa_flags & SA_SIGINFO) || old.sa_sigaction != on_sigurg) {
        printf("sigurg: %s, sigaction(SIGURG) does not return the program's handler\n", when);
        exit(1);
    }
    if (!(old.sa_flags & SA_RESTART) || !sigismember(&old.sa_mask, SIGUSR2)) {
        printf("sigurg: %s, sigaction(SIGURG) returns other flags (0x%x) or mask\n", when,
               (unsigned)old.sa_flags);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    long k = 100;
    pthread_t th[NSPIN];
    struct sigaction sa;
    const struct timespec pause_ts = {0, 2000000};

    if (argc > 2 || (argc == 2 && ((k = atol(argv[1])) < 1 || k > 100000))) {
        fprintf(stderr, "usage: prog_preempt_sigurg [K (1..100000)]\n");
        return 1;
    }
    mypid = getpid();
    main_thread = pthread_self();
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigurg;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGUSR2);
    CHECK(sigaction(SIGURG, &sa, NULL) == 0);
    check_installed("after installing it");

    for (int i = 0; i < NSPIN; i++)
        EXPECT(pthread_create(&th[i], NULL, spinner_fn, &spins[i]), 0);
    for (long i = 0; i < k; i++) {
        if (i % 2 == 0)
            CHECK(raise(SIGURG) == 0);
        else
            EXPECT(pthread_kill(pthread_self(), SIGURG), 0);
        long c = __atomic_load_n(&calls, __ATOMIC_RELAXED);
        if (c != i + 1) {
            printf("sigurg: after %ld signals of its own the handler ran %ld times\n", i + 1, c);
            return 1;
        }
        while (nanosleep(&pause_ts, NULL) != 0 && errno == EINTR)
            ;
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < NSPIN; i++)
        EXPECT(pthread_join(th[i], NULL), 0);

    check_installed("at the end");
    if (calls != k || foreign != 0 || elsewhere != 0) {
        printf("sigurg: app handler ran %ld times for %ld signals (%ld not the program's own, "
               "%ld on another thread than main)\n",
               calls, k, foreign, elsewhere);
        return 1;
    }
    printf("sigurg: app handler ran %ld times\n", k);
    return 0;
}
