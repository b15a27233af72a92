/*
 * prog_fault_signal: does every pthread_kill reach its thread, one that
 * computes and never calls a function, and one blocked in pause()?
 *
 *   prog_fault_signal [N]
 *
 * A computing thread spins until its SIGUSR1 handler has run N times; the
 * main thread sends the next signal only once the previous one was
 * handled. Then a thread in pause() is sent SIGUSR2 until its handler has
 * run N times (a signal landing just before pause() is followed by
 * another, 2 ms later). Prints the two counts. Exit 0, 1 when a
 * call fails. Needs two CPUs (or Ps) for the computing thread not to be
 * preempted.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t got1, got2, spinning, pausing;

static void on_usr1(int sig)
{
    (void)sig;
    got1++;
}

static void on_usr2(int sig)
{
    (void)sig;
    got2++;
}

static int n = 20;

static void *spinner(void *arg)
{
    (void)arg;
    spinning = 1;
    while (got1 < n)
        ;
    return NULL;
}

static void *pauser(void *arg)
{
    (void)arg;
    pausing = 1;
    while (got2 < n)
        pause();
    return NULL;
}

static void wait_for(volatile sig_atomic_t *v, int want)
{
    while (*v < want)
        sched_yield();
}

int main(int argc, char **argv)
{
    if (argc > 1)
        n = atoi(argv[1]);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);
    sa.sa_handler = on_usr2;
    sigaction(SIGUSR2, &sa, NULL);
    pthread_t t;
    if (pthread_create(&t, NULL, spinner, NULL) != 0)
        return 1;
    wait_for(&spinning, 1);
    for (int i = 0; i < n; i++) {
        pthread_kill(t, SIGUSR1);
        wait_for(&got1, i + 1);
    }
    pthread_join(t, NULL);
    printf("spinner: %d signals handled\n", (int)got1);
    if (pthread_create(&t, NULL, pauser, NULL) != 0)
        return 1;
    wait_for(&pausing, 1);
    for (int i = 0; i < n; i++) {
        /* A signal may land just before pause(), which then waits for the next: send until
         * the handler has run once more. */
        while (got2 <= i) {
            pthread_kill(t, SIGUSR2);
            struct timespec ts = {0, 2000000};
            nanosleep(&ts, NULL);
        }
    }
    pthread_join(t, NULL);
    /* One more may be handled: a send 2 ms after one that had not run yet (a loaded host). */
    printf("pauser: %d signals handled\n", got2 > n ? n : (int)got2);
    return 0;
}
