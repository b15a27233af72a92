/*
 * sleep() cut short by a signal returns the seconds it did not sleep,
 * truncated as glibc's (its nanosleep's remainder's whole seconds): a 2 s
 * sleep interrupted after 0.3 s returns 1 (1.7 s left), after 1.3 s and
 * after 1.9 s returns 0. Rounding would say 2 and 1 for the first two.
 *
 * The sleeper posts "ready" just before it calls sleep(); the moment its
 * sleep starts cannot be observed from outside, so the signaller sleeps
 * the chosen delay after the post and then sends the signal with
 * pthread_kill. The delays keep at least 0.1 s from where the answer would
 * change, far more than the time from the post to the sleep.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "prog_check.h"

static sem_t ready;
static unsigned left;

static void on_usr1(int sig)
{
    (void)sig;
}

static void *sleeper(void *arg)
{
    (void)arg;
    sem_post(&ready);
    left = sleep(2);
    return NULL;
}

int main(void)
{
    struct sigaction sa = {.sa_handler = on_usr1};
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
    sem_init(&ready, 0, 0);
    static const long after_ms[] = {300, 1300, 1900};
    for (size_t i = 0; i < sizeof after_ms / sizeof after_ms[0]; i++) {
        pthread_t t;
        EXPECT(pthread_create(&t, NULL, sleeper, NULL), 0);
        wait_sem(&ready);
        struct timespec d = {after_ms[i] / 1000, after_ms[i] % 1000 * 1000000};
        while (nanosleep(&d, &d) != 0)
            ;
        EXPECT(pthread_kill(t, SIGUSR1), 0);
        EXPECT(pthread_join(t, NULL), 0);
        printf("sleep(2) interrupted after %ld ms returned %u\n", after_ms[i], left);
    }
    return 0;
}
