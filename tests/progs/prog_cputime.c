/*
 * Thread CPU-time clocks measure the thread (issue 13): CLOCK_THREAD_CPUTIME_ID,
 * pthread_getcpuclockid's clock read by another thread, getrusage(RUSAGE_THREAD).
 *
 *   prog_cputime late    no thread CPU clock is read before the threads have run: a
 *                        thread that spins ~50 ms and one that sleeps 50 ms read their
 *                        own clocks and rusage, main reads both through their clock ids
 *   prog_cputime early   the same, with main reading its own clock first
 *
 * Both also check that a new thread's clock starts below what its creator has used
 * (main spins ~50 ms first). Output is fixed; exit 0.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "prog_check.h"

static pthread_barrier_t done, checked;
static int64_t own[2], usage[2];

static int64_t ns_of(clockid_t clk)
{
    struct timespec ts;
    CHECK(clock_gettime(clk, &ts) == 0);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Spin until the process has used ms more of CPU (the other threads are idle
 * meanwhile; a loaded machine stretches the wall time, not the CPU time), or 2 s
 * of wall time have gone by. The process clock, not the thread's: "late" reads no
 * thread clock before the threads have run. */
static void spin_ms(int ms)
{
    int64_t until = ns_of(CLOCK_PROCESS_CPUTIME_ID) + (int64_t)ms * 1000000;
    int64_t give_up = ns_of(CLOCK_MONOTONIC) + 2000000000;
    volatile unsigned x = 1;
    while (ns_of(CLOCK_PROCESS_CPUTIME_ID) < until && ns_of(CLOCK_MONOTONIC) < give_up)
        for (int i = 0; i < 1000; i++)
            x = x * 1103515245u + 12345u;
}

static void *worker(void *arg)
{
    int spinner = arg != NULL;
    if (spinner) {
        spin_ms(50);
    } else {
        struct timespec ts = {0, 50 * 1000 * 1000};
        CHECK(nanosleep(&ts, NULL) == 0);
    }
    own[spinner] = ns_of(CLOCK_THREAD_CPUTIME_ID);
    struct rusage ru;
    CHECK(getrusage(RUSAGE_THREAD, &ru) == 0);
    usage[spinner] = ((int64_t)ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000 +
                     ((int64_t)ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000;
    pthread_barrier_wait(&done);    /* main reads our clock now */
    pthread_barrier_wait(&checked); /* ... and we stay alive until it has */
    return NULL;
}

static int64_t new_thread_start;

static void *reads_at_start(void *arg)
{
    (void)arg;
    new_thread_start = ns_of(CLOCK_THREAD_CPUTIME_ID);
    return NULL;
}

int main(int argc, char **argv)
{
    int early = argc > 1 && !strcmp(argv[1], "early");
    if (early)
        (void)ns_of(CLOCK_THREAD_CPUTIME_ID);
    spin_ms(50);
    int64_t creator = early ? ns_of(CLOCK_THREAD_CPUTIME_ID) : 0;
    pthread_t t;
    CHECK(pthread_create(&t, NULL, reads_at_start, NULL) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    if (!early)
        creator = ns_of(CLOCK_THREAD_CPUTIME_ID);

    CHECK(pthread_barrier_init(&done, NULL, 3) == 0);
    CHECK(pthread_barrier_init(&checked, NULL, 3) == 0);
    pthread_t sp, sl;
    CHECK(pthread_create(&sp, NULL, worker, (void *)1) == 0);
    CHECK(pthread_create(&sl, NULL, worker, NULL) == 0);
    pthread_barrier_wait(&done);
    clockid_t csp, csl;
    CHECK(pthread_getcpuclockid(sp, &csp) == 0);
    CHECK(pthread_getcpuclockid(sl, &csl) == 0);
    int64_t osp = ns_of(csp), osl = ns_of(csl);
    struct timespec res;
    CHECK(clock_getres(csp, &res) == 0);
    pthread_barrier_wait(&checked);
    CHECK(pthread_join(sp, NULL) == 0);
    CHECK(pthread_join(sl, NULL) == 0);

    /* The spinner ran ~50 ms (at least 20 on a loaded machine), the sleeper ~0. */
    int wide = own[1] > 20000000 && own[0] < 5000000 && own[1] > 4 * own[0];
    int wide_ru = usage[1] > 15000000 && usage[0] < 5000000;
    int other = osp >= own[1] && osp < own[1] + 20000000 && osl >= own[0] && osl < 5000000;
    printf("own clocks: spinner and sleeper differ widely: %s\n", wide ? "yes" : "no");
    printf("getrusage(RUSAGE_THREAD): differ widely: %s\n", wide_ru ? "yes" : "no");
    printf("pthread_getcpuclockid of another thread reads that thread's time: %s\n",
           other ? "yes" : "no");
    printf("a new thread's clock starts below its creator's: %s\n",
           new_thread_start < creator && creator > 20000000 ? "yes" : "no");
    printf("clock_getres of a thread's clock: %ld s %ld ns\n", (long)res.tv_sec, res.tv_nsec);
    if (!wide || !wide_ru || !other)
        fprintf(stderr,
                "spinner %lld (rusage %lld, by id %lld) sleeper %lld (rusage %lld, by id %lld) "
                "new %lld creator %lld\n",
                (long long)own[1], (long long)usage[1], (long long)osp, (long long)own[0],
                (long long)usage[0], (long long)osl, (long long)new_thread_start,
                (long long)creator);
    return 0;
}
