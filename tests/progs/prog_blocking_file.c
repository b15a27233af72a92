/*
 * A thread blocked in the kernel must not hold the only P.
 *
 *   prog_blocking_file [pipe [ITERS]]   (default; ITERS default 20000000)
 *   prog_blocking_file fsync [MIB]      (MIB default 32)
 *
 * pipe: a reader thread blocks in read() on a pipe that a forked child
 * writes to only after the parent tells it (through another pipe) that
 * four CPU-bound threads have finished ITERS rounds of arithmetic each.
 * If the blocked read kept the only P (GOSHIM_PROCS=1), the CPU threads
 * could never finish and the program would hang. Output, in this order:
 *   cpu done          (four times)
 *   reader got data
 *
 * fsync: one thread writes MIB MiB to a temporary file (in $TMPDIR or
 * /tmp, unlinked at once), fsyncs it and reads it back, while the four
 * CPU threads run. Output (in any order; compare sorted):
 *   cpu done          (four times)
 *   io done: MIB MiB written, fsynced, verified
 *
 * exit 0; an error is reported on stderr with exit 1.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "prog_check.h"

#define NCPU 4

static long iters = 20000000;
static long mib = 32;
static volatile uint64_t sink[NCPU];

static void *cpu_fn(void *arg)
{
    int id = (int)(intptr_t)arg;
    uint64_t x = 0x9e3779b97f4a7c15ULL * (uint64_t)(id + 1), acc = 0;
    for (long i = 0; i < iters; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        acc += x * 2654435761u;
    }
    sink[id] = acc;
    printf("cpu done\n");
    return NULL;
}

static void start_cpu(pthread_t *t)
{
    for (int i = 0; i < NCPU; i++)
        EXPECT(pthread_create(&t[i], NULL, cpu_fn, (void *)(intptr_t)i), 0);
}

static void join_cpu(pthread_t *t)
{
    for (int i = 0; i < NCPU; i++)
        EXPECT(pthread_join(t[i], NULL), 0);
}

/* ---- pipe: a reader blocked until the CPU threads are done ------------------------- */

static int data_rd;
static sem_t reader_started;

static void *reader_fn(void *arg)
{
    (void)arg;
    char buf[8];
    size_t got = 0;
    CHECK(sem_post(&reader_started) == 0);
    while (got < 4) {
        ssize_t n = read(data_rd, buf + got, 4 - got); /* blocks until the child writes */
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            fprintf(stderr, "prog_blocking_file: reader: read returned %zd (%s)\n", n,
                    n < 0 ? strerror(errno) : "EOF");
            exit(1);
        }
        got += (size_t)n;
    }
    if (memcmp(buf, "data", 4) != 0) {
        fprintf(stderr, "prog_blocking_file: reader got '%.4s'\n", buf);
        exit(1);
    }
    printf("reader got data\n");
    return NULL;
}

static int run_pipe(void)
{
    int go[2], data[2];
    CHECK(pipe(go) == 0 && pipe(data) == 0);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        char c;
        close(go[1]);
        close(data[0]);
        ssize_t n;
        while ((n = read(go[0], &c, 1)) < 0 && errno == EINTR)
            ;
        if (n != 1 || c != 'g')
            _exit(2);
        if (write(data[1], "data", 4) != 4)
            _exit(3);
        _exit(0);
    }
    CHECK(close(go[0]) == 0 && close(data[1]) == 0);
    data_rd = data[0];
    CHECK(sem_init(&reader_started, 0, 0) == 0);
    pthread_t reader, cpu[NCPU];
    EXPECT(pthread_create(&reader, NULL, reader_fn, NULL), 0);
    CHECK(wait_sem(&reader_started) == 0);
    start_cpu(cpu);
    join_cpu(cpu);
    CHECK(write(go[1], "g", 1) == 1); /* only now may the child answer */
    EXPECT(pthread_join(reader, NULL), 0);
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "prog_blocking_file: child status %#x\n", st);
        return 1;
    }
    CHECK(close(go[1]) == 0 && close(data[0]) == 0);
    return 0;
}

/* ---- fsync: write + fsync a file while the CPU threads run ------------------------- */

static unsigned char fbyte(long off)
{
    return (unsigned char)(off * 31 + (off >> 12));
}

static void *io_fn(void *arg)
{
    (void)arg;
    const char *dir = getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/goshim-blocking-file-XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0) {
        fprintf(stderr, "prog_blocking_file: mkstemp %s: %s\n", path, strerror(errno));
        exit(1);
    }
    CHECK(unlink(path) == 0);
    size_t chunk = 1 << 20;
    unsigned char *buf = malloc(chunk);
    CHECK(buf != NULL);
    for (long m = 0; m < mib; m++) {
        for (size_t j = 0; j < chunk; j++)
            buf[j] = fbyte(m * (long)chunk + (long)j);
        for (size_t done = 0; done < chunk;) {
            ssize_t w = write(fd, buf + done, chunk - done);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                fprintf(stderr, "prog_blocking_file: write: %s\n", strerror(errno));
                exit(1);
            }
            done += (size_t)w;
        }
    }
    CHECK(fsync(fd) == 0);
    for (long m = 0; m < mib; m++) {
        ssize_t r = pread(fd, buf, chunk, (off_t)(m * (long)chunk));
        if (r != (ssize_t)chunk) {
            fprintf(stderr, "prog_blocking_file: pread at %ld MiB returned %zd\n", m, r);
            exit(1);
        }
        for (size_t j = 0; j < chunk; j++) {
            if (buf[j] != fbyte(m * (long)chunk + (long)j)) {
                fprintf(stderr, "prog_blocking_file: byte %ld differs\n",
                        m * (long)chunk + (long)j);
                exit(1);
            }
        }
    }
    CHECK(close(fd) == 0);
    free(buf);
    printf("io done: %ld MiB written, fsynced, verified\n", mib);
    return NULL;
}

static int run_fsync(void)
{
    pthread_t io, cpu[NCPU];
    EXPECT(pthread_create(&io, NULL, io_fn, NULL), 0);
    start_cpu(cpu);
    join_cpu(cpu);
    EXPECT(pthread_join(io, NULL), 0);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *mode = argc > 1 ? argv[1] : "pipe";
    if (strcmp(mode, "pipe") == 0) {
        if (argc > 2)
            iters = atol(argv[2]);
        if (iters >= 1)
            return run_pipe();
    } else if (strcmp(mode, "fsync") == 0) {
        if (argc > 2)
            mib = atol(argv[2]);
        if (mib >= 1)
            return run_fsync();
    }
    fprintf(stderr, "usage: prog_blocking_file [pipe [ITERS>=1] | fsync [MIB>=1]]\n");
    return 1;
}
