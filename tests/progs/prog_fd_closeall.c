/*
 * A program that closes every descriptor it does not know of (daemons,
 * CPython's children, closefrom, close_range) or puts its own at high
 * numbers, then does blocking I/O between threads: the I/O must work as
 * natively and the program must see only its own descriptors.
 *
 *   prog_fd_closeall MODE
 *
 * First blocking pipe, socket and poll I/O between threads (goshim then
 * has made what it needs for waiting), then MODE:
 *   closefrom    closefrom(3)
 *   close_range  close_range(3, ~0U, 0)
 *   close_loop   close() of every fd from 3 to 1024, printing how many succeeded
 *   dup2_high    dup2(0, fd) and dup3(0, fd, O_CLOEXEC) onto every fd from 3 up to
 *                min(RLIMIT_NOFILE, 2048) (alternately), printing how many failed, then
 *                closefrom(3)
 *   syscall      syscall(): SYS_close of every fd from 3 to 1024 (count printed),
 *                SYS_dup2 onto the high numbers, SYS_close_range(3, ~0U, 0)
 *   raw          close_range(3, ~0U, 0) by a system call instruction of its own,
 *                which no library sees
 * then prints the fds open (fdcheck.h's line), does the blocking I/O again,
 * in a forked child too, and prints "ok"; exit 0.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "fdcheck.h"

static long raw_syscall3(long nr, long a, long b, long c)
{
    long ret;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(nr), "D"(a), "S"(b), "d"(c)
                     : "rcx", "r11", "memory");
    return ret;
}

static int high_end(void)
{
    int end = fd_scan_end();
    return end > 2048 ? 2048 : end;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: prog_fd_closeall MODE\n");
        return 2;
    }
    const char *mode = argv[1];
    long rounds = scaled(200);
    fd_blocking_io(rounds);

    if (strcmp(mode, "closefrom") == 0) {
        closefrom(3);
    } else if (strcmp(mode, "close_range") == 0) {
        CHECK(close_range(3, ~0U, 0) == 0);
    } else if (strcmp(mode, "close_loop") == 0) {
        int n = 0;
        for (int fd = 3; fd <= 1024; fd++)
            n += close(fd) == 0;
        printf("closed=%d\n", n);
    } else if (strcmp(mode, "dup2_high") == 0) {
        int failed = 0, end = high_end();
        for (int fd = 3; fd < end; fd++)
            failed += (fd % 2 ? dup2(0, fd) : dup3(0, fd, O_CLOEXEC)) != fd;
        printf("dup2 failed=%d\n", failed);
        fd_print("dup2", 0);
        closefrom(3);
    } else if (strcmp(mode, "syscall") == 0) {
        int n = 0, failed = 0, end = high_end();
        for (int fd = 3; fd <= 1024; fd++)
            n += syscall(SYS_close, fd) == 0;
        printf("closed=%d\n", n);
        for (int fd = end - 64 > 3 ? end - 64 : 3; fd < end; fd++)
            failed += syscall(SYS_dup2, 0, fd) != fd;
        printf("dup2 failed=%d\n", failed);
        CHECK(syscall(SYS_close_range, 3, ~0U, 0) == 0);
    } else if (strcmp(mode, "raw") == 0) {
        CHECK(raw_syscall3(SYS_close_range, 3, (long)~0U, 0) == 0);
    } else {
        fprintf(stderr, "prog_fd_closeall: unknown mode %s\n", mode);
        return 2;
    }

    fd_print(mode, 1);
    fd_blocking_io(rounds);
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        fd_blocking_io(rounds);
        exit(0);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    printf("ok\n");
    return 0;
}
