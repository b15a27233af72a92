/*
 * The descriptors a program sees are its own: listing /proc/self/fd and
 * asking fcntl(F_GETFD) about every fd below RLIMIT_NOFILE give what a
 * native run gives, in the process, in a forked child and in an exec'd one.
 *
 *   prog_fd_hidden plain      single-threaded, no blocking I/O
 *   prog_fd_hidden threaded   after blocking pipe, socket and poll I/O between
 *                             threads (and the forked child does some too)
 *   prog_fd_hidden list WHO   (the exec'd child) print the listing and exit
 *
 * Output: one "WHO: dirfd=... dir=... fcntl=..." line (fdcheck.h) for the process,
 * then for its forked child (threaded: twice, before and after blocking I/O
 * there), then for a child that exec'd this program; exit 0.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <string.h>
#include <sys/wait.h>

#include "fdcheck.h"

static void reap(pid_t pid)
{
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "child %d: status %d\n", (int)pid, st);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "list") == 0) {
        fd_print(argv[2], 1);
        return 0;
    }
    if (argc != 2 || (strcmp(argv[1], "plain") && strcmp(argv[1], "threaded"))) {
        fprintf(stderr, "usage: prog_fd_hidden plain|threaded|list WHO\n");
        return 2;
    }
    int threaded = strcmp(argv[1], "threaded") == 0;
    long rounds = scaled(200);
    if (threaded)
        fd_blocking_io(rounds);
    fd_print("main", 1);

    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        fd_print("fork", 1);
        if (threaded) {
            fd_blocking_io(rounds);
            fd_print("fork after io", 1);
        }
        exit(0);
    }
    reap(pid);

    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        execl("/proc/self/exe", argv[0], "list", "exec", (char *)NULL);
        perror("execl");
        _exit(1);
    }
    reap(pid);
    return 0;
}
