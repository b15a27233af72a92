/*
 * Signals the program leaves at their default action, which ignores them
 * (SIGWINCH, SIGCHLD), never cut a wait short: eight workers block them, main
 * lets them through and waits in sigwaitinfo for SIGUSR1 while a child
 * sends it 50 of each, then SIGUSR1. Natively the kernel drops them (the
 * main thread does not block them); under goshim the process's first OS
 * thread may block them while main does not, and the kernel then wakes
 * main's sigwaitinfo for them with EINTR, which goshim must not pass on
 * (POSIX: only a caught signal interrupts it).
 *
 * Prints "sigwaitinfo got SIGUSR1, cut short 0 times"; exit 0.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "prog_check.h"

enum { BLOCKERS = 8 };
static int stop_fd[2];
static sem_t blocked;

/* Blocks SIGWINCH and SIGCHLD, says so, and waits to be told to end. */
static void *blocker(void *arg)
{
    (void)arg;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGWINCH);
    sigaddset(&set, SIGCHLD);
    EXPECT(pthread_sigmask(SIG_BLOCK, &set, NULL), 0);
    CHECK(sem_post(&blocked) == 0);
    char c;
    while (read(stop_fd[0], &c, 1) < 0 && errno == EINTR)
        ;
    return NULL;
}

int main(void)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    CHECK(pipe(stop_fd) == 0);
    CHECK(sem_init(&blocked, 0, 0) == 0);
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    EXPECT(pthread_sigmask(SIG_BLOCK, &usr1, NULL), 0);
    pthread_t t[BLOCKERS];
    for (int i = 0; i < BLOCKERS; i++) {
        EXPECT(pthread_create(&t[i], NULL, blocker, NULL), 0);
        while (sem_wait(&blocked) != 0)
            CHECK(errno == EINTR);
    }
    /* (Under goshim a yield may move main to another OS thread than the process's first,
     * which stays with the blocker's mask: where the EINTRs came from.) */
    for (int i = 0; i < 100; i++)
        sched_yield();

    pid_t parent = getpid(), pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        for (int i = 0; i < 50; i++) {
            kill(parent, SIGWINCH);
            kill(parent, SIGCHLD);
            struct timespec pace = {0, 1000 * 1000}; /* pacing, not synchronisation */
            nanosleep(&pace, NULL);
        }
        kill(parent, SIGUSR1);
        _exit(0);
    }
    int cut = 0, got;
    siginfo_t si;
    while ((got = sigwaitinfo(&usr1, &si)) < 0) {
        CHECK(errno == EINTR);
        cut++;
    }
    printf("sigwaitinfo got %s, cut short %d times\n", got == SIGUSR1 ? "SIGUSR1" : "another", cut);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    for (int i = 0; i < BLOCKERS; i++)
        CHECK(write(stop_fd[1], "x", 1) == 1);
    for (int i = 0; i < BLOCKERS; i++)
        EXPECT(pthread_join(t[i], NULL), 0);
    return 0;
}
