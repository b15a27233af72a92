/*
 * fork while other threads make and close descriptors and poll them: the
 * child, which has only the forking thread, then closes every descriptor
 * above stderr with close_range, as GLib's g_spawn does before its exec.
 * The child must not wait for a lock a thread of the parent held at the
 * fork (that thread does not exist in the child).
 *
 *   prog_fork_fdlock [FORKS]   (default 300, scaled by GOSHIM_TEST_SCALE)
 *
 * Three threads loop over: a socketpair, a poll of one end with a 1 ms
 * time-out (nothing to read), a write and a read through the pair, and the
 * close of both ends. The main thread forks FORKS children, one at a time;
 * each calls close_range(3, ~0U, 0) and _exit(0). A child not done within
 * 10 s is reported ("child N hung"), killed, and the program exits 1.
 * Prints "children that closed their descriptors: N of N".
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "prog_check.h"

static atomic_int stop;

static void *churn(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop)) {
        int sv[2];
        CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
        struct pollfd p = {sv[0], POLLIN, 0};
        CHECK(poll(&p, 1, 1) == 0);
        char c = 'x';
        CHECK(write(sv[1], &c, 1) == 1 && read(sv[0], &c, 1) == 1);
        close(sv[0]);
        close(sv[1]);
    }
    return NULL;
}

/* Wait up to 10 s for pid to exit 0; false if it did not. */
static bool reaped(pid_t pid)
{
    int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
    CHECK(pfd >= 0);
    struct pollfd p = {pfd, POLLIN, 0};
    int r = poll(&p, 1, 10000);
    close(pfd);
    if (r == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return false;
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

int main(int argc, char **argv)
{
    long forks = scaled(argc > 1 ? atol(argv[1]) : 300), done = 0;
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        EXPECT(pthread_create(&t[i], NULL, churn, NULL), 0);
    for (long i = 0; i < forks; i++) {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            close_range(3, ~0U, 0);
            _exit(0);
        }
        if (!reaped(pid)) {
            fprintf(stderr, "child %ld hung (or failed) closing its descriptors\n", i);
            atomic_store(&stop, 1);
            break;
        }
        done++;
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 3; i++)
        EXPECT(pthread_join(t[i], NULL), 0);
    printf("children that closed their descriptors: %ld of %ld\n", done, forks);
    return done == forks ? 0 : 1;
}
