/*
 * prog_fork_pages: the pages a forking parent writes after each fork, beside threads that
 * wait.
 *
 *   usage: prog_fork_pages N
 *
 * Four threads wait on a condition variable (parked.h) while main forks N children one
 * after the other, each ending at once with _exit(7), and waits for each (waitpid). Every
 * page the parent writes after a fork, while the child lives or just after, is a page
 * fault (the fork made it read-only): the process's minor faults over the loop (getrusage,
 * RUSAGE_SELF: every thread of the parent, none of the children) count them. Natively
 * glibc's fork and waitpid write a few (malloc's locks, stdio's list lock, the stack, the
 * descriptor); a runtime under the program should add as few as it can, and none in
 * threads that have nothing to do. Five forks first, not counted (lazy binding, first
 * touches).
 *
 * Prints "faults per fork: X" (two decimals); exit 0, or 1 (usage), 2 (a system call
 * failed), 3 (a child ended wrongly).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "parked.h"

static void die(const char *what)
{
    fprintf(stderr, "prog_fork_pages: %s: %s\n", what, strerror(errno));
    exit(2);
}

static long minflt(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        die("getrusage");
    return ru.ru_minflt;
}

static void forks(long n)
{
    for (long i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid < 0)
            die("fork");
        if (pid == 0)
            _exit(7);
        int st;
        if (waitpid(pid, &st, 0) != pid)
            die("waitpid");
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 7) {
            fprintf(stderr, "prog_fork_pages: child %ld ended with status %#x\n", i, st);
            exit(3);
        }
    }
}

int main(int argc, char **argv)
{
    long n = argc == 2 ? atol(argv[1]) : 0;
    if (n <= 0) {
        fprintf(stderr, "usage: prog_fork_pages N   (N > 0)\n");
        return 1;
    }
    if ((errno = parked_start(4)) != 0)
        die("pthread_create");
    forks(5);
    long before = minflt();
    forks(n);
    long faults = minflt() - before;
    parked_stop();
    printf("faults per fork: %.2f\n", (double)faults / (double)n);
    return 0;
}
