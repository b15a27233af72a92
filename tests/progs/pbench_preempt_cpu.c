/*
 * pbench_preempt_cpu: what does preemption cost a CPU-bound program?
 *
 *   usage: pbench_preempt_cpu [ITERS]     (per thread; default 400000000)
 *
 * Four threads each run ITERS xorshift steps (no calls, no memory traffic).
 * The time is taken by main with CLOCK_MONOTONIC from before the first
 * pthread_create to after the last pthread_join. Meant for
 * scripts/bench_preempt.sh, which runs it under goshim at GOSHIM_PROCS=2
 * with GOSHIM_PREEMPT=10 and =0 (four threads on two Ps: with preemption
 * they take turns every 10 ms, without it two run to completion, then the
 * other two; the same total work either way) and natively for information.
 * Prints one line:
 *   threads=4 iters=N wall_ms=X cpu_ms=Y result=0x...
 * (cpu_ms: the process's CPU time over the same interval; result: a
 * combination of the four threads' values, the same on every run with the
 * same ITERS); exit 0, or 1 (usage), 2 (a pthread call failed).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NTHREADS 4

static long iters = 400000000;
static uint64_t results[NTHREADS];

static double now_ms(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void *worker(void *arg)
{
    long k = (long)arg;
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(k + 1);

    for (long i = 0; i < iters; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        __asm__ volatile("" : "+r"(x));
    }
    results[k] = x;
    return NULL;
}

int main(int argc, char **argv)
{
    pthread_t th[NTHREADS];
    uint64_t result = 0;
    int rc;

    if (argc > 2) {
        fprintf(stderr, "usage: %s [ITERS]\n", argv[0]);
        return 1;
    }
    if (argc == 2) {
        char *end;
        errno = 0;
        iters = strtol(argv[1], &end, 10);
        if (errno != 0 || *end != '\0' || end == argv[1] || iters < 1) {
            fprintf(stderr, "pbench_preempt_cpu: ITERS must be a positive integer, not '%s'\n",
                    argv[1]);
            return 1;
        }
    }
    double t0 = now_ms(CLOCK_MONOTONIC), c0 = now_ms(CLOCK_PROCESS_CPUTIME_ID);
    for (long k = 0; k < NTHREADS; k++) {
        if ((rc = pthread_create(&th[k], NULL, worker, (void *)k)) != 0) {
            fprintf(stderr, "pbench_preempt_cpu: pthread_create: %s\n", strerror(rc));
            return 2;
        }
    }
    for (int k = 0; k < NTHREADS; k++) {
        if ((rc = pthread_join(th[k], NULL)) != 0) {
            fprintf(stderr, "pbench_preempt_cpu: pthread_join: %s\n", strerror(rc));
            return 2;
        }
    }
    double wall = now_ms(CLOCK_MONOTONIC) - t0, cpu = now_ms(CLOCK_PROCESS_CPUTIME_ID) - c0;
    for (int k = 0; k < NTHREADS; k++)
        result = result * 0x100000001b3ull ^ results[k];
    printf("threads=%d iters=%ld wall_ms=%.1f cpu_ms=%.1f result=0x%016" PRIx64 "\n", NTHREADS,
           iters, wall, cpu, result);
    return 0;
}
