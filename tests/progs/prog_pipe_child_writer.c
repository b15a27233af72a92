/*
 * A pipe made in this process, written by a child that got the write end
 * across exec, read after poll said it is readable (goshim issue 27 item 5:
 * a ProcessPoolExecutor with the spawn or forkserver start method hung at
 * exit; its result reader polls the pipe its workers write into, then reads).
 *
 *   prog_pipe_child_writer spawn   the child is started with posix_spawn
 *   prog_pipe_child_writer vfork   with vfork and execve, as Python's
 *                                  _posixsubprocess does
 *   prog_pipe_child_writer child   (the child: write one byte to fd 3, exit 0)
 *
 * Each round makes a pipe (close-on-exec, as Python's), starts a reader
 * thread that polls the read end and then reads one byte, and once the
 * reader has started, starts a child whose fd 3 is the write end. The
 * parent never writes: the byte can only come from the child. 10 rounds,
 * scaled by GOSHIM_TEST_SCALE. Output is fixed; exit 0.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "prog_check.h"

extern char **environ;

struct round {
    int fds[2];
    sem_t started;
    char got;
    int revents;
};

static void *reader(void *arg)
{
    struct round *r = arg;
    struct pollfd p = {r->fds[0], POLLIN, 0};
    CHECK(sem_post(&r->started) == 0);
    CHECK(poll(&p, 1, -1) == 1);
    r->revents = p.revents;
    CHECK(read(r->fds[0], &r->got, 1) == 1);
    return NULL;
}

/* The child: this program again, "child", its fd 3 the pipe's write end. */
static pid_t start_child(const char *self, int wfd, int use_vfork)
{
    char *argv[] = {(char *)self, "child", NULL};
    pid_t pid;
    if (!use_vfork) {
        posix_spawn_file_actions_t fa;
        EXPECT(posix_spawn_file_actions_init(&fa), 0);
        EXPECT(posix_spawn_file_actions_adddup2(&fa, wfd, 3), 0);
        EXPECT(posix_spawn(&pid, self, &fa, NULL, argv, environ), 0);
        EXPECT(posix_spawn_file_actions_destroy(&fa), 0);
        return pid;
    }
    pid = vfork();
    if (pid == 0) {
        if (dup2(wfd, 3) == 3) /* dup2 clears close-on-exec on fd 3 */
            execve(self, argv, environ);
        _exit(127);
    }
    CHECK(pid > 0);
    return pid;
}

int main(int argc, char **argv)
{
    if (argc != 2 ||
        (strcmp(argv[1], "spawn") && strcmp(argv[1], "vfork") && strcmp(argv[1], "child"))) {
        fprintf(stderr, "usage: %s spawn|vfork\n", argv[0]);
        return 2;
    }
    if (!strcmp(argv[1], "child"))
        return write(3, "x", 1) == 1 ? 0 : 1;
    int use_vfork = !strcmp(argv[1], "vfork");
    long rounds = scaled(10), ok = 0;
    for (long i = 0; i < rounds; i++) {
        struct round r = {.got = 0};
        pthread_t t;
        int status;
        CHECK(pipe2(r.fds, O_CLOEXEC) == 0);
        CHECK(sem_init(&r.started, 0, 0) == 0);
        EXPECT(pthread_create(&t, NULL, reader, &r), 0);
        CHECK(sem_wait(&r.started) == 0);
        pid_t pid = start_child(argv[0], r.fds[1], use_vfork);
        CHECK(waitpid(pid, &status, 0) == pid);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        EXPECT(pthread_join(t, NULL), 0);
        ok += r.got == 'x' && (r.revents & POLLIN);
        close(r.fds[0]);
        close(r.fds[1]);
        sem_destroy(&r.started);
    }
    printf("%s: %ld rounds, the reader read the child's byte after poll in %s\n", argv[1], rounds,
           ok == rounds ? "every round" : "some rounds only");
    return 0;
}
