/*
 * A process signal reaches a thread that spins in pthread_spin_lock (Open POSIX's
 * pthread_spin_lock/1-1: SIGALRM, blocked in main, must end the spinning thread).
 *
 *   prog_spin_signal [ROUNDS]     (default 20)
 *
 * Each round: main, which blocks SIGUSR1, takes a spinlock and makes a thread that
 * unblocks SIGUSR1 and spins for the lock; once the thread is in, main sends SIGUSR1 to
 * the process - only the spinner takes it - and waits (up to 2 s) for its handler to
 * run, then unlocks. Output: "handler ran while the thread spun: R of R rounds"; exit 0,
 * or 1 on an error (stderr).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static pthread_spinlock_t lock;
static volatile sig_atomic_t handled;
static int entered;

static void on_usr1(int sig)
{
    (void)sig;
    handled = 1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *spinner(void *arg)
{
    (void)arg;
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGUSR1);
    pthread_sigmask(SIG_UNBLOCK, &s, NULL);
    __atomic_store_n(&entered, 1, __ATOMIC_RELEASE);
    pthread_spin_lock(&lock);
    pthread_spin_unlock(&lock);
    return NULL;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 20, ok = 0;
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &s, NULL);
    struct sigaction sa = {.sa_handler = on_usr1};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    pthread_spin_init(&lock, PTHREAD_PROCESS_PRIVATE);
    for (int r = 0; r < rounds; r++) {
        handled = 0;
        __atomic_store_n(&entered, 0, __ATOMIC_RELAXED);
        pthread_spin_lock(&lock);
        pthread_t t;
        if (pthread_create(&t, NULL, spinner, NULL) != 0) {
            fprintf(stderr, "prog_spin_signal: pthread_create failed\n");
            return 1;
        }
        while (!__atomic_load_n(&entered, __ATOMIC_ACQUIRE))
            sched_yield();
        /* Give the thread a moment to reach the lock's loop (the handler must run either
         * way; the loop is where it was lost). */
        for (double t0 = now_s(); now_s() - t0 < 0.002;)
            ;
        kill(getpid(), SIGUSR1);
        for (double t0 = now_s(); !handled && now_s() - t0 < 2;)
            sched_yield();
        ok += handled;
        pthread_spin_unlock(&lock);
        pthread_join(t, NULL);
    }
    printf("handler ran while the thread spun: %d of %d rounds\n", ok, rounds);
    return 0;
}
