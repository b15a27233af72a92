/*
 * A thread whose system calls compute in the kernel beside one that computes: the
 * reader copies a cached file of SIZE bytes with pread, COUNT times (each call a few
 * hundred microseconds of the kernel's copying, on the CPU all along), while another
 * thread spins until it is done. Natively the reader's calls hold their CPU; a
 * scheduler that hands its P to another thread whenever a call lasts makes a thread
 * more than there are CPUs for, and the same work. On one CPU the two take turns
 * (the kernel's slices count the time in calls too).
 *
 *   prog_file_reads [COUNT [SIZE]]      (defaults 2000, 256 KiB)
 *
 * Output: "COUNT reads of SIZE bytes, the spinner ran meanwhile" (or "ran after");
 * exit 0.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "prog_check.h"

static int fd;
static long count, size;
static int done;
static unsigned long spins;

static void *reader(void *arg)
{
    char *buf = arg;
    for (long i = 0; i < count; i++)
        CHECK(pread(fd, buf, (size_t)size, 0) == size);
    bool meanwhile = __atomic_load_n(&spins, __ATOMIC_RELAXED) > 0;
    __atomic_store_n(&done, 1, __ATOMIC_RELEASE);
    return (void *)meanwhile;
}

static void *spinner(void *arg)
{
    (void)arg;
    while (!__atomic_load_n(&done, __ATOMIC_ACQUIRE))
        __atomic_store_n(&spins, spins + 1, __ATOMIC_RELAXED);
    return NULL;
}

int main(int argc, char **argv)
{
    count = argc > 1 ? atol(argv[1]) : 2000;
    size = argc > 2 ? atol(argv[2]) : 256L << 10;
    if (count < 1 || size < 1) {
        fprintf(stderr, "usage: prog_file_reads [COUNT [SIZE]]\n");
        return 2;
    }
    FILE *f = tmpfile();
    char *buf = calloc(1, (size_t)size);
    CHECK(f != NULL && buf != NULL);
    fd = fileno(f);
    CHECK(pwrite(fd, buf, (size_t)size, 0) == size);
    pthread_t r, s;
    EXPECT(pthread_create(&s, NULL, spinner, NULL), 0);
    EXPECT(pthread_create(&r, NULL, reader, buf), 0);
    void *meanwhile;
    EXPECT(pthread_join(r, &meanwhile), 0);
    EXPECT(pthread_join(s, NULL), 0);
    printf("%ld reads of %ld bytes, the spinner ran %s\n", count, size,
           meanwhile ? "meanwhile" : "after");
    return 0;
}
