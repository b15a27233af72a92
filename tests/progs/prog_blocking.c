/*
 * Blocking system calls must not stop the other threads: a reader blocks
 * in read() on a pipe before its writer thread has run; a thread blocks in
 * waitpid() on a child that waits for a byte another thread writes. Run
 * with one P under goshim, either would hang if the blocked thread kept
 * its P.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static int p1[2], p2[2];

static void *writer(void *arg)
{
    (void)arg;
    for (int i = 0; i < 100; i++)
        sched_yield();
    if (write(p1[1], "ping", 4) != 4)
        exit(2);
    return NULL;
}

static void *child_feeder(void *arg)
{
    (void)arg;
    for (int i = 0; i < 100; i++)
        sched_yield();
    if (write(p2[1], "g", 1) != 1)
        exit(3);
    return NULL;
}

int main(void)
{
    if (pipe(p1) || pipe(p2))
        return 4;
    pthread_t w;
    pthread_create(&w, NULL, writer, NULL);
    char buf[8] = {0};
    ssize_t n = read(p1[0], buf, sizeof buf - 1); /* blocks before the writer runs */
    pthread_join(w, NULL);
    printf("read %zd bytes: %s\n", n, buf);

    pid_t pid = fork();
    if (pid == 0) {
        char c;
        _exit(read(p2[0], &c, 1) == 1 && c == 'g' ? 5 : 6);
    }
    pthread_t f;
    pthread_create(&f, NULL, child_feeder, NULL);
    int st = 0;
    waitpid(pid, &st, 0); /* blocks until the feeder thread has written */
    pthread_join(f, NULL);
    printf("child exited %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    return 0;
}
