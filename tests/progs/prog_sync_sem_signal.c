/*
 * prog_sync_sem_signal: a thread sends SIGUSR1 to the process N times; the
 * handler, on whatever thread the kernel picks, calls sem_post, which must
 * be async-signal-safe; the main thread waits in sem_timedwait for each.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "prog_check.h"

/* ---- sem_post from a signal handler ---- */

static sem_t sigsem, ack;

static void on_usr1(int sig)
{
    int saved = errno;
    (void)sig;
    sem_post(&sigsem);
    errno = saved;
}

static void *signaller(void *arg)
{
    for (long i = 0; i < (long)arg; i++) {
        kill(getpid(), SIGUSR1);
        CHECK(wait_sem(&ack) == 0);
    }
    return NULL;
}

static void from_handler(void)
{
    struct sigaction sa;
    pthread_t t;
    long n = scaled(1000);

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
    CHECK(sem_init(&sigsem, 0, 0) == 0 && sem_init(&ack, 0, 0) == 0);
    CHECK(pthread_create(&t, NULL, signaller, (void *)n) == 0);
    for (long i = 0; i < n; i++) {
        struct timespec ts = in_ms(CLOCK_REALTIME, 10000);
        int r;
        while ((r = sem_timedwait(&sigsem, &ts)) == -1 && errno == EINTR)
            ;
        CHECK(r == 0);
        CHECK(sem_post(&ack) == 0);
    }
    CHECK(pthread_join(t, NULL) == 0);
    printf("sem_post from a signal handler: %ld wake-ups\n", n);
}

int main(void)
{
    from_handler();
    return 0;
}
