/*
 * Signals pending and blocked across exec, then ignored by the new image:
 * they must be discarded, not acted on. The pattern of CPython's resource
 * tracker (multiprocessing): the parent blocks SIGINT and SIGTERM around
 * the spawn, the child's first statements set both to SIG_IGN and unblock
 * them, and a signal sent to it meanwhile must not kill it.
 *
 *   prog_exec_pending [ROUNDS]   (default 40, scaled by GOSHIM_TEST_SCALE)
 *
 * Each round forks a child that binds itself to one CPU (its threads then
 * take turns: a race of a few microseconds between two of them is lost
 * often), blocks SIGINT and SIGTERM, sends both to itself (so both are
 * pending for the process when the exec happens) and execs this program
 * again, as "child HANDLER": the new image installs a
 * handler for SIGINT first (as CPython's start-up does) when HANDLER is 1,
 * then sets both to SIG_IGN, unblocks them and exits 0. The parent counts
 * the children that exited 0 and prints
 * "children that ignored the pending signals: N of N"; a child killed by
 * a signal is named on stderr.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "prog_check.h"

static void on_int(int sig)
{
    (void)sig;
}

static int child(int with_handler)
{
    if (with_handler) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sigemptyset(&sa.sa_mask);
        sa.sa_handler = on_int;
        CHECK(sigaction(SIGINT, &sa, NULL) == 0);
    }
    CHECK(signal(SIGINT, SIG_IGN) != SIG_ERR);
    CHECK(signal(SIGTERM, SIG_IGN) != SIG_ERR);
    sigset_t both;
    sigemptyset(&both);
    sigaddset(&both, SIGINT);
    sigaddset(&both, SIGTERM);
    EXPECT(pthread_sigmask(SIG_UNBLOCK, &both, NULL), 0);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 2 && strcmp(argv[1], "child") == 0)
        return child(atoi(argv[2]));
    long rounds = scaled(argc > 1 ? atol(argv[1]) : 40), ignored = 0;
    sigset_t both;
    sigemptyset(&both);
    sigaddset(&both, SIGINT);
    sigaddset(&both, SIGTERM);
    for (long i = 0; i < rounds; i++) {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            cpu_set_t one;
            CPU_ZERO(&one);
            CPU_SET(sched_getcpu(), &one);
            sched_setaffinity(0, sizeof one, &one);
            sigprocmask(SIG_BLOCK, &both, NULL);
            kill(getpid(), SIGINT);
            kill(getpid(), SIGTERM);
            execl("/proc/self/exe", argv[0], "child", i % 2 ? "1" : "0", (char *)NULL);
            _exit(127);
        }
        int st;
        CHECK(waitpid(pid, &st, 0) == pid);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
            ignored++;
        else if (WIFSIGNALED(st))
            fprintf(stderr, "round %ld: the child was killed by %s\n", i, strsignal(WTERMSIG(st)));
        else
            fprintf(stderr, "round %ld: the child exited %d\n", i, WEXITSTATUS(st));
    }
    printf("children that ignored the pending signals: %ld of %ld\n", ignored, rounds);
    return ignored == rounds ? 0 : 1;
}
