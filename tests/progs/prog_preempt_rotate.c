/*
 * prog_preempt_rotate: do threads that only compute take turns?
 *
 *   prog_preempt_rotate [fork|calls|files]
 *
 * Three threads each run a fixed number of xorshift steps (no calls, no
 * memory traffic), recording when they began and when they finished
 * (CLOCK_MONOTONIC). On two CPUs at most two run at once, so the three
 * overlap in time - every one begins before any one finishes - only if the
 * scheduler makes them take turns; run to completion, the third begins
 * after the first has finished. Prints
 *   rotate: 3 threads took turns, result 0x...
 * or "ran one after another" in place of "took turns"; the result is the
 * same on every run. With "fork" it all happens in a child of fork, whose
 * exit status the parent returns; with "calls" each thread also adds to an
 * eventfd's counter every 50,000 steps, as a thread that works through
 * system calls on descriptors that may wait does (a socket's, a pipe's); with
 * "files" it reads a byte of a regular file instead, as a thread that works
 * through files does (the calls do not change the result). Exit 0, 1 on a
 * usage error, 2 when a call fails.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "prog_check.h"

#define NTHREADS 3
#define STEPS    150000000L
#define CHUNK    50000L

static int callfd = -1; /* "calls" and "files": a call between chunks of steps */
static bool files;      /* callfd is a regular file's, read; else an eventfd, written */

static struct {
    double begin, end;
    uint64_t value;
} runs[NTHREADS];

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* No calls inside: only register arithmetic. */
static __attribute__((noinline)) uint64_t compute(uint64_t x, long steps)
{
    for (long i = 0; i < steps; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    return x;
}

static void *worker(void *arg)
{
    long i = (long)arg;
    runs[i].begin = now_s();
    uint64_t x = 0x9E3779B97F4A7C15ULL + (uint64_t)i;
    if (callfd < 0) {
        x = compute(x, STEPS);
    } else {
        uint64_t one = 1;
        char byte;
        for (long done = 0; done < STEPS; done += CHUNK) {
            x = compute(x, CHUNK);
            if (files ? pread(callfd, &byte, 1, 0) != 1 : write(callfd, &one, 8) != 8)
                return files ? (void *)"read of the file failed" : (void *)"eventfd write failed";
        }
    }
    runs[i].value = x;
    runs[i].end = now_s();
    return NULL;
}

static int run(void)
{
    pthread_t t[NTHREADS];
    for (long i = 0; i < NTHREADS; i++)
        EXPECT(pthread_create(&t[i], NULL, worker, (void *)i), 0);
    for (int i = 0; i < NTHREADS; i++) {
        void *err;
        EXPECT(pthread_join(t[i], &err), 0);
        if (err) {
            fprintf(stderr, "prog_preempt_rotate: %s\n", (const char *)err);
            return 2;
        }
    }
    double first_end = runs[0].end, last_begin = runs[0].begin;
    uint64_t result = 0;
    for (int i = 0; i < NTHREADS; i++) {
        if (runs[i].end < first_end)
            first_end = runs[i].end;
        if (runs[i].begin > last_begin)
            last_begin = runs[i].begin;
        result ^= runs[i].value * (uint64_t)(2 * i + 1);
    }
    printf("rotate: %d threads %s, result 0x%016" PRIx64 "\n", NTHREADS,
           last_begin < first_end ? "took turns" : "ran one after another", result);
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    bool forked = argc == 2 && strcmp(argv[1], "fork") == 0;
    bool calls = argc == 2 && strcmp(argv[1], "calls") == 0;
    files = argc == 2 && strcmp(argv[1], "files") == 0;
    if (argc > 2 || (argc == 2 && !forked && !calls && !files)) {
        fprintf(stderr, "usage: prog_preempt_rotate [fork|calls|files]\n");
        return 1;
    }
    if (calls && (callfd = eventfd(0, EFD_CLOEXEC)) < 0) {
        perror("prog_preempt_rotate: eventfd");
        return 2;
    }
    FILE *f = files ? tmpfile() : NULL;
    if (files && (!f || fputc('x', f) == EOF || fflush(f) != 0 || (callfd = fileno(f)) < 0)) {
        perror("prog_preempt_rotate: a temporary file");
        return 2;
    }
    if (!forked)
        return run();
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        perror("prog_preempt_rotate: fork");
        return 2;
    }
    if (pid == 0)
        exit(run());
    int st;
    if (waitpid(pid, &st, 0) != pid) {
        perror("prog_preempt_rotate: waitpid");
        return 2;
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 2;
}
