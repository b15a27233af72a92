/*
 * prog_fault_blocked: does a thread blocked in the kernel get out when
 * another thread, which must first wake from a sleep, releases it?
 *
 *   prog_fault_blocked
 *
 * The main thread takes an flock on a temporary file; a second thread,
 * on its own open of the file, blocks in flock(LOCK_EX) in the kernel.
 * The main thread sleeps 20 ms, releases its lock and joins. Under goshim
 * the blocked thread holds its OS thread, so the sleeper needs another
 * one. Prints the three steps in order. Exit 0, 1 when a call fails.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

static char path[] = "/tmp/goshim_fault_blockedXXXXXX";

static void *locker(void *arg)
{
    (void)arg;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0 || flock(fd, LOCK_EX) != 0) {
        perror("prog_fault_blocked: second lock");
        exit(1);
    }
    puts("second lock taken");
    close(fd);
    return NULL;
}

int main(void)
{
    int fd = mkstemp(path);
    if (fd < 0 || flock(fd, LOCK_EX) != 0) {
        perror("prog_fault_blocked: first lock");
        return 1;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, locker, NULL) != 0) {
        unlink(path);
        fputs("prog_fault_blocked: pthread_create failed\n", stderr);
        return 1;
    }
    struct timespec ts = {0, 20000000};
    nanosleep(&ts, NULL);
    puts("first lock released");
    fflush(stdout);
    flock(fd, LOCK_UN);
    pthread_join(t, NULL);
    unlink(path);
    puts("joined");
    return 0;
}
