/*
 * pbench_fork: the cost of fork() and of spawning a program, in a process
 * of one thread or of several; µs per child.
 *
 *   usage: pbench_fork N [exec] [threads T]
 *
 * Forks N children one after the other and waits for each (waitpid). A
 * child ends at once with _exit(7), or with "exec" runs /bin/true
 * (execv). With "threads T", T other threads exist while main forks, each
 * parked in a condition wait (a threaded program that spawns, as CPython's
 * subprocess or GLib's g_spawn do). Every child's status is checked. The
 * time is taken by main with CLOCK_MONOTONIC around the loop only.
 * Prints one line: "children=N us_per_child=X"; exit 0, or 1 (usage),
 * 2 (a system call failed), 3 (a child ended wrongly).
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "parked.h"

static void die(const char *what)
{
    fprintf(stderr, "pbench_fork: %s: %s\n", what, strerror(errno));
    exit(2);
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 0;
    bool exec = false;
    long nthreads = 0;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "exec"))
            exec = true;
        else if (!strcmp(argv[i], "threads") && i + 1 < argc)
            nthreads = atol(argv[++i]);
        else
            n = 0;
    }
    if (n <= 0 || nthreads < 0 || nthreads > 1000) {
        fprintf(stderr, "usage: pbench_fork N [exec] [threads T]   (N > 0, T <= 1000)\n");
        return 1;
    }
    if ((errno = parked_start(nthreads)) != 0)
        die("pthread_create");
    char *const args[] = {"/bin/true", NULL};
    double t0 = now_us();
    for (long i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid < 0)
            die("fork");
        if (pid == 0) {
            if (exec)
                execv(args[0], args);
            _exit(exec ? 127 : 7);
        }
        int st;
        if (waitpid(pid, &st, 0) != pid)
            die("waitpid");
        if (!WIFEXITED(st) || WEXITSTATUS(st) != (exec ? 0 : 7)) {
            fprintf(stderr, "pbench_fork: child %ld ended with status %#x\n", i, st);
            return 3;
        }
    }
    double us = (now_us() - t0) / (double)n;
    parked_stop();
    printf("children=%ld us_per_child=%.1f\n", n, us);
    return 0;
}
