/*
 * prog_sigsuspend_order: a signal that sigsuspend's mask blocks stays
 * pending until the wait is over, behind the signal that ended it, when the
 * two come back to back (Open POSIX sigsuspend/1-1, without its 3-second
 * sleep).
 *
 *   usage: prog_sigsuspend_order [ROUNDS]     (default 40)
 *
 * Each round forks a child that blocks SIGUSR1 and waits in sigsuspend with
 * only SIGUSR2 blocked. Once the child is in the wait (its rt_sigsuspend
 * shows in /proc/PID/task/TID/syscall), the parent sends SIGUSR2, then at
 * once SIGUSR1. The child exits 0 when SIGUSR1's handler ran first, 1 when
 * SIGUSR2's did (the mask of the wait let it through early), 2 when the
 * wait returned and SIGUSR2 never came. Under goshim it exited 1 in about
 * one round of three: the router had taken SIGUSR1, and the kernel's
 * sigsuspend, woken for nothing it could deliver, restored the mask set
 * before it and ran SIGUSR2.
 *
 * Prints "sigsuspend order: N of N rounds ran SIGUSR1's handler first";
 * exit 0, or 1 if a round went otherwise.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "prog_check.h"

static volatile sig_atomic_t usr1_ran, usr2_ran;

static void handler(int sig)
{
    if (sig == SIGUSR1) {
        usr1_ran = 1;
        if (usr2_ran)
            _exit(1);
    } else {
        usr2_ran = 1;
        _exit(usr1_ran ? 0 : 1);
    }
}

static void child(int ready_fd)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0 && sigaction(SIGUSR2, &sa, NULL) == 0);
    sigset_t usr1, usr2;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigemptyset(&usr2);
    sigaddset(&usr2, SIGUSR2);
    CHECK(sigprocmask(SIG_SETMASK, &usr1, NULL) == 0);
    CHECK(write(ready_fd, "r", 1) == 1);
    sigsuspend(&usr2);
    sleep(1); /* SIGUSR2 is deliverable now: natively it ran before sigsuspend returned */
    _exit(2);
}

/* True when a thread of pid is blocked in rt_sigsuspend. */
static bool in_sigsuspend(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return false;
    bool found = false;
    struct dirent *e;
    while (!found && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char sp[320];
        snprintf(sp, sizeof sp, "/proc/%d/task/%s/syscall", (int)pid, e->d_name);
        FILE *f = fopen(sp, "r");
        long nr = -1;
        if (f) {
            if (fscanf(f, "%ld", &nr) != 1)
                nr = -1;
            fclose(f);
        }
        found = nr == SYS_rt_sigsuspend;
    }
    closedir(d);
    return found;
}

int main(int argc, char **argv)
{
    long rounds = argc > 1 ? atol(argv[1]) : 40;
    if (rounds < 1) {
        fprintf(stderr, "usage: %s [ROUNDS]\n", argv[0]);
        return 2;
    }
    long first = 0;
    for (long i = 0; i < rounds; i++) {
        int p[2];
        CHECK(pipe(p) == 0);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            close(p[0]);
            child(p[1]);
        }
        close(p[1]);
        char c;
        CHECK(read(p[0], &c, 1) == 1);
        close(p[0]);
        /* Its wait, seen from outside: polled, the child has no way to say it is in it. */
        for (int k = 0; !in_sigsuspend(pid); k++) {
            CHECK(k < 50000); /* 5 s */
            struct timespec ts = {0, 100 * 1000};
            nanosleep(&ts, NULL);
        }
        CHECK(kill(pid, SIGUSR2) == 0 && kill(pid, SIGUSR1) == 0);
        int st;
        CHECK(waitpid(pid, &st, 0) == pid);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
            first++;
        else
            fprintf(stderr, "round %ld: the child %s %d\n", i,
                    WIFEXITED(st) ? "exited with" : "was killed by",
                    WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    }
    printf("sigsuspend order: %ld of %ld rounds ran SIGUSR1's handler first\n", first, rounds);
    return first == rounds ? 0 : 1;
}
