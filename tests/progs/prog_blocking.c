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
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int p1[2], p2[2];
static char fifo[64];

static void *fifo_writer(void *arg)
{
    (void)arg;
    for (int i = 0; i < 100; i++)
        sched_yield();
    int fd = open(fifo, O_WRONLY); /* meets the reader's open */
    if (fd < 0 || write(fd, "fifo", 4) != 4)
        exit(7);
    close(fd);
    return NULL;
}

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

    snprintf(fifo, sizeof fifo, "/tmp/goshim-fifo-%d", (int)getpid());
    unlink(fifo);
    if (mkfifo(fifo, 0600))
        return 8;
    pthread_t fw;
    pthread_create(&fw, NULL, fifo_writer, NULL);
    int fd = open(fifo, O_RDONLY); /* blocks until the writer thread opens */
    char fb[8] = {0};
    ssize_t fn = fd >= 0 ? read(fd, fb, sizeof fb - 1) : -1;
    pthread_join(fw, NULL);
    close(fd);
    unlink(fifo);
    printf("fifo: opened and read %zd bytes: %s\n", fn, fb);
    return 0;
}
