/*
 * The scheduler demo (make demo): one million tasks spread over P logical
 * processors, with the Go-format schedtrace every GOSHIM_SCHEDTRACE ms,
 * then the same work as native threads for scale, and the counters.
 *
 * Each task sums a small slice of numbers. One task spawns them all, so
 * the trace shows its run queue filling, overflowing to the global queue,
 * the other Ps stealing, and everything draining. Tasks run to completion
 * one after another on each P, reusing the stack and TCB of the task
 * before them.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "sched/sched.h"
#include "tests/wg.h"

static long ntasks;
static struct sched_wg wg;
static unsigned long total;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static unsigned long work(long id)
{
    unsigned long s = 0;
    for (long k = 0; k < 200; k++)
        s += (unsigned long)(id * 31 + k) % 7;
    return s;
}

static void task(void *arg)
{
    long id = (long)arg;
    __atomic_fetch_add(&total, work(id), __ATOMIC_RELAXED);
    sched_wg_done(&wg);
}

static void spawner(void *arg)
{
    (void)arg;
    for (long i = 0; i < ntasks; i++) {
        int err;
        if (!sched_spawn(task, (void *)i, NULL, &err)) {
            fprintf(stderr, "demo: spawn failed (error %d)\n", err);
            exit(1);
        }
    }
    sched_wg_done(&wg);
}

static void *native_task(void *arg)
{
    long id = (long)arg;
    __atomic_fetch_add(&total, work(id), __ATOMIC_RELAXED);
    return NULL;
}

int main(int argc, char **argv)
{
    ntasks = argc > 1 ? atol(argv[1]) : 1000000;
    long nnative = ntasks < 10000 ? ntasks : 10000;
    struct sched_config c;
    sched_config_from_env(&c);
    if (sched_init(&c) != 0) {
        fprintf(stderr, "demo: the runtime did not start\n");
        return 1;
    }
    printf("goshim demo: %ld tasks on %d Ps (GOSHIM_PROCS), schedtrace every %d ms\n", ntasks,
           sched.gomaxprocs, c.schedtrace_ms);
    fflush(stdout);

    sched_wg_init(&wg);
    sched_wg_add(&wg, ntasks + 1);
    double t0 = now();
    int err;
    sched_spawn(spawner, NULL, NULL, &err);
    sched_wg_wait(&wg);
    double tg = now() - t0;
    unsigned long gtotal = total;

    total = 0;
    pthread_t *th = malloc(sizeof *th * (size_t)nnative);
    t0 = now();
    for (long i = 0; i < nnative; i++)
        if (pthread_create(&th[i], NULL, native_task, (void *)i) != 0) {
            nnative = i;
            break;
        }
    for (long i = 0; i < nnative; i++)
        pthread_join(th[i], NULL);
    double tn = now() - t0;

    printf("\n| run | tasks | wall | per task |\n|---|---:|---:|---:|\n");
    printf("| goshim Gs (%d Ps) | %ld | %.3f s | %.0f ns |\n", sched.gomaxprocs, ntasks, tg,
           tg * 1e9 / (double)ntasks);
    printf("| native threads | %ld | %.3f s | %.0f ns |\n", nnative, tn,
           tn * 1e9 / (double)nnative);
    printf("\nper task, native / goshim = %.0fx; checksum %lu\n",
           (tn / (double)nnative) / (tg / (double)ntasks), gtotal);
    fflush(stdout);
    stats_print(1);
    return 0;
}
