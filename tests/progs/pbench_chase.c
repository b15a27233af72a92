/*
 * pbench_chase: threads that only compute, each over a table of its own
 * bigger than a CPU's private cache: each follows a random cycle through
 * its table (a dependent load per step, as a bzip2 decoder's inverse BWT
 * does), so a thread that resumes on another CPU than the one it left
 * pays for the cache it left behind. More threads than CPUs: the
 * scheduler rotates them; ns per step, over all threads.
 *
 *   usage: pbench_chase THREADS STEPS [TABLE_KIB]     (default table 4096 KiB)
 *
 * Prints one line: "ns_per_op=X steps=N".
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long steps;
static size_t entries;

struct chase {
    pthread_t t;
    uint32_t *next;
    uint32_t end; /* where the walk stopped */
};

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* One cycle through every entry (Sattolo's shuffle), from a seed of its own. */
static void make_cycle(uint32_t *next, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++)
        next[i] = (uint32_t)i;
    for (size_t i = n - 1; i > 0; i--) {
        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
        size_t j = seed % i;
        uint32_t t = next[i];
        next[i] = next[j];
        next[j] = t;
    }
}

static void *walk(void *arg)
{
    struct chase *c = arg;
    uint32_t at = 0;
    for (long i = 0; i < steps; i++)
        at = c->next[at];
    c->end = at;
    return NULL;
}

int main(int argc, char **argv)
{
    long threads = argc > 1 ? atol(argv[1]) : 4;
    steps = argc > 2 ? atol(argv[2]) : 10000000;
    long kib = argc > 3 ? atol(argv[3]) : 4096;
    if (threads < 1 || threads > 64 || steps < 1 || kib < 4) {
        fprintf(stderr, "usage: %s THREADS(1-64) STEPS [TABLE_KIB]\n", argv[0]);
        return 1;
    }
    entries = (size_t)kib * 1024 / sizeof(uint32_t);
    struct chase c[64];
    for (long i = 0; i < threads; i++) {
        if (!(c[i].next = malloc(entries * sizeof(uint32_t)))) {
            fprintf(stderr, "pbench_chase: out of memory\n");
            return 2;
        }
        make_cycle(c[i].next, entries, 88172645463325252u + (uint64_t)i);
    }
    double t0 = now_ns();
    for (long i = 0; i < threads; i++)
        if (pthread_create(&c[i].t, NULL, walk, &c[i]) != 0) {
            fprintf(stderr, "pbench_chase: pthread_create failed\n");
            return 2;
        }
    for (long i = 0; i < threads; i++)
        pthread_join(c[i].t, NULL);
    double ns = now_ns() - t0;
    /* Each walk ends where the same walk, done here, ends. */
    for (long i = 0; i < threads; i++) {
        uint32_t at = 0;
        for (long k = 0; k < steps; k++)
            at = c[i].next[at];
        if (at != c[i].end) {
            fprintf(stderr, "pbench_chase: thread %ld ended at %u, expected %u\n", i, c[i].end, at);
            return 3;
        }
    }
    printf("ns_per_op=%.2f steps=%ld\n", ns / (double)(threads * steps), threads * steps);
    return 0;
}
