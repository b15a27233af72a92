/*
 * prog_start_pair: the first two threads a program makes, at once, run at once.
 *
 *   prog_start_pair
 *
 * main makes two threads back to back, its first; each sets its own flag and spins, with
 * no calls at all, until the other's flag is set. Prints "both threads ran at once" and
 * exits 0; 1 if a pthread call failed; 2 (after "the second thread never ran") if they had
 * not both run within 30 s.
 *
 * Natively they run on two CPUs, or in turns at the kernel's tick. Under goshim with two
 * Ps and preemption off (GOSHIM_PROCS=2 GOSHIM_PREEMPT=0) only two Ps can run them: the
 * runtime starts at the first pthread_create, and the first threads queue on main's P
 * while the other P's M may still be on its way. That M must take the idle P and steal
 * one of them; parked idle instead, it left both to main's P, where the first to run spins
 * for ever (until 2026-12, a program's first threads ran on one CPU until one blocked).
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int flags[2];

static void *spinner(void *arg)
{
    int me = (int)(long)arg;
    __atomic_store_n(&flags[me], 1, __ATOMIC_RELEASE);
    while (!__atomic_load_n(&flags[1 - me], __ATOMIC_ACQUIRE))
        ; /* no calls: only another CPU (or a preemption) lets the other thread in */
    return NULL;
}

static void never_ran(int sig)
{
    (void)sig;
    static const char msg[] = "the second thread never ran\n";
    ssize_t w = write(1, msg, sizeof msg - 1);
    (void)w;
    _exit(2);
}

int main(void)
{
    signal(SIGALRM, never_ran);
    alarm(30); /* a hang's report, not a measure: they meet in microseconds */
    pthread_t t[2];
    for (long i = 0; i < 2; i++) {
        int err = pthread_create(&t[i], NULL, spinner, (void *)i);
        if (err) {
            fprintf(stderr, "pthread_create: %s\n", strerror(err));
            return 1;
        }
    }
    for (int i = 0; i < 2; i++)
        if (pthread_join(t[i], NULL) != 0)
            return 1;
    printf("both threads ran at once\n");
    return 0;
}
