/*
 * pthread_cancel of the main thread while it sleeps (a cancellation
 * point) and the only other thread waits: natively the cancel cuts the
 * sleep short. Under goshim such a sleep is the kernel's own, on the
 * process's first OS thread (shim/sleep.c), and the cancel must wake it.
 *
 * goshim sleeps so only while no other thread can run and a CPU is idle,
 * and only on that OS thread, where main starts: so main never waits
 * before its sleep (it spins until the canceller is about to wait), and
 * the canceller waits without holding an OS thread, in a read of a pipe
 * (its second: the first, which main answers, sets up what goshim needs
 * to wait for a descriptor, so that the second waits at once). Which way
 * goshim sleeps still depends on the moment: the test runs it 5 times.
 * A one-shot timer's SIGUSR1 (blocked in main, so the signal does not cut
 * the sleep short itself) runs a handler on the canceller that writes to
 * the pipe; the canceller then cancels main, whose cleanup handler posts a
 * semaphore the canceller waits for before it prints and exits 0. A
 * cancel that does not reach the sleep leaves main asleep for 600 s: the
 * test's timeout fails it. Exit 1 on a failed call.
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

static sem_t cleaned;
static pthread_t main_thread;
static int fds[2];
static int about_to_wait;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void on_usr1(int sig)
{
    (void)sig;
    char c = 1;
    if (write(fds[1], &c, 1) != 1)
        _exit(3);
}

static void cleanup(void *arg)
{
    (void)arg;
    sem_post(&cleaned);
}

static void *canceller(void *arg)
{
    (void)arg;
    char c;
    /* A first read that waits, for main's byte: the second one then waits at once. */
    __atomic_store_n(&about_to_wait, 1, __ATOMIC_SEQ_CST);
    CHECK(read(fds[0], &c, 1) == 1);
    __atomic_store_n(&about_to_wait, 2, __ATOMIC_SEQ_CST);
    CHECK(read(fds[0], &c, 1) == 1);
    EXPECT(pthread_cancel(main_thread), 0);
    while (sem_wait(&cleaned) != 0)
        CHECK(errno == EINTR);
    printf("main cancelled in its sleep\n");
    fflush(stdout);
    exit(0);
}

int main(void)
{
    struct sigaction sa = {.sa_handler = on_usr1, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0 && pipe(fds) == 0 && sem_init(&cleaned, 0, 0) == 0);
    main_thread = pthread_self();
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, canceller, NULL), 0);
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    EXPECT(pthread_sigmask(SIG_BLOCK, &usr1, NULL), 0);
    while (__atomic_load_n(&about_to_wait, __ATOMIC_SEQ_CST) != 1)
        ;
    char c = 0;
    CHECK(write(fds[1], &c, 1) == 1);
    while (__atomic_load_n(&about_to_wait, __ATOMIC_SEQ_CST) != 2)
        ;
    /* Its way from the flag into the wait cannot be seen from here: a moment's spin. */
    for (int64_t until = now_ns() + 2000000; now_ns() < until;)
        ;

    struct sigevent ev = {.sigev_notify = SIGEV_SIGNAL, .sigev_signo = SIGUSR1};
    timer_t timer;
    CHECK(timer_create(CLOCK_MONOTONIC, &ev, &timer) == 0);
    struct itimerspec once = {.it_value = {0, 100 * 1000 * 1000}};
    CHECK(timer_settime(timer, 0, &once, NULL) == 0);

    pthread_cleanup_push(cleanup, NULL);
    sleep(600);
    pthread_cleanup_pop(0);
    fprintf(stderr, "main's sleep was not cancelled\n");
    return 1;
}
