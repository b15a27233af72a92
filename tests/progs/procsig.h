/*
 * Shared by prog_procsig and prog_procsig_masked, the programs that send
 * signals to the whole process (issue 13): note, a handler that records
 * whether it ran on the thread in expected (main, unless a mode says
 * otherwise) or another; install; and killer, a child process that kills
 * this one over and over once it is about to wait. Everything is static
 * (inline), and these programs run natively too: no goshim header here.
 */
#ifndef GOSHIM_TESTS_PROCSIG_H
#define GOSHIM_TESTS_PROCSIG_H

#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "prog_check.h"

static volatile sig_atomic_t handled, on_main, on_other;
static pthread_t expected;

static inline void note(int sig)
{
    (void)sig;
    handled++;
    if (pthread_equal(pthread_self(), expected))
        on_main = 1;
    else
        on_other = 1;
}

static inline void install(int sig, void (*h)(int), int flags)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = h;
    sa.sa_flags = flags;
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(sig, &sa, NULL) == 0);
}

/* A child that waits until the parent closes its end of a pipe, then kills the parent with
 * sig, times times 20 ms apart (so that one of them comes while the parent waits, however
 * late it gets there): the parent closes it right before the call that must be interrupted,
 * and kills the child once that call returned. */
static pid_t killer_pid;

static inline int killer(int sig, int times)
{
    int p[2];
    CHECK(pipe(p) == 0);
    pid_t parent = getpid();
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        char c;
        close(p[1]);
        while (read(p[0], &c, 1) > 0)
            ;
        for (int i = 0; i < times; i++) {
            kill(parent, sig);
            if (times > 1) {
                struct timespec ts = {0, 20 * 1000 * 1000}; /* pacing, not synchronisation */
                nanosleep(&ts, NULL);
            }
        }
        _exit(0);
    }
    killer_pid = pid;
    close(p[0]);
    return p[1];
}

static inline void end_killer(void)
{
    kill(killer_pid, SIGKILL);
    waitpid(killer_pid, NULL, 0);
}

#endif
