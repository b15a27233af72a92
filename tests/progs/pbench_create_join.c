/*
 * pbench_create_join: pthread_create+pthread_join cost, per thread.
 *
 *   usage: pbench_create_join seq N      create one thread, join it, N times
 *          pbench_create_join batch B S  B batches: create S threads, join all S
 *
 * Default attributes (8 MiB stacks natively). A plain pthread program for
 * scripts/bench_shim.sh, which runs it natively and under the preload.
 * Prints one line: "ns_per_op=X threads=N".
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void *noop(void *arg)
{
    return arg;
}

static void create_or_die(pthread_t *t, long i)
{
    int err = pthread_create(t, NULL, noop, NULL);
    if (err != 0) {
        fprintf(stderr, "pbench_create_join: pthread_create #%ld: %s\n", i, strerror(err));
        exit(2);
    }
}

int main(int argc, char **argv)
{
    if (argc < 3 || (strcmp(argv[1], "seq") != 0 && strcmp(argv[1], "batch") != 0) ||
        (strcmp(argv[1], "batch") == 0 && argc < 4)) {
        fprintf(stderr, "usage: %s seq N | batch BATCHES SIZE\n", argv[0]);
        return 1;
    }
    long total;
    double t0;
    if (strcmp(argv[1], "seq") == 0) {
        long n = atol(argv[2]);
        if (n < 1)
            return 1;
        t0 = now_ns();
        for (long i = 0; i < n; i++) {
            pthread_t t;
            create_or_die(&t, i);
            pthread_join(t, NULL);
        }
        total = n;
    } else {
        long batches = atol(argv[2]), size = atol(argv[3]);
        if (batches < 1 || size < 1)
            return 1;
        pthread_t *t = malloc((size_t)size * sizeof *t);
        if (t == NULL)
            return 1;
        t0 = now_ns();
        for (long b = 0; b < batches; b++) {
            for (long i = 0; i < size; i++)
                create_or_die(&t[i], i);
            for (long i = 0; i < size; i++)
                pthread_join(t[i], NULL);
        }
        total = batches * size;
        free(t);
    }
    printf("ns_per_op=%.1f threads=%ld\n", (now_ns() - t0) / (double)total, total);
    return 0;
}
