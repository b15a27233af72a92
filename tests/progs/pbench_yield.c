/*
 * pbench_yield: a yield storm. T threads each call sched_yield K times;
 * ns per yield = wall time / (T * K). tests/bench/go/gobench.go's "yield"
 * is its Go twin (runtime.Gosched).
 *
 *   usage: pbench_yield T K
 *
 * Prints one line: "ns_per_op=X yields=N".
 */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long k;
static long total; /* yields done, summed at the end; atomic */

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void *storm(void *arg)
{
    (void)arg;
    long i;
    for (i = 0; i < k; i++)
        sched_yield();
    __atomic_fetch_add(&total, i, __ATOMIC_RELAXED);
    return NULL;
}

int main(int argc, char **argv)
{
    long t = argc > 2 ? atol(argv[1]) : 0;
    k = argc > 2 ? atol(argv[2]) : 0;
    if (t < 1 || k < 1) {
        fprintf(stderr, "usage: %s T K\n", argv[0]);
        return 1;
    }
    pthread_t *th = malloc((size_t)t * sizeof *th);
    if (!th)
        return 1;
    double t0 = now_ns();
    for (long i = 0; i < t; i++)
        if (pthread_create(&th[i], NULL, storm, NULL) != 0) {
            fprintf(stderr, "pbench_yield: pthread_create failed\n");
            return 2;
        }
    for (long i = 0; i < t; i++)
        pthread_join(th[i], NULL);
    double ns = now_ns() - t0;
    if (total != t * k) {
        fprintf(stderr, "pbench_yield: %ld yields, expected %ld\n", total, t * k);
        return 3;
    }
    printf("ns_per_op=%.1f yields=%ld\n", ns / (double)total, total);
    return 0;
}
