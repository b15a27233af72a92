/*
 * pbench_malloc: T threads each make K allocations of 16 to 4,015 bytes,
 * each freeing the one it made 256 allocations before (a slot picked by a
 * per-thread pseudo-random sequence), while main waits in pthread_join;
 * ns per allocation+free over all threads (wall time / (T * K)).
 *
 *   usage: pbench_malloc T K
 *
 * What it watches is glibc malloc's per-thread state: each thread should
 * keep allocating from an arena and tcache of its own, as natively. A
 * session once gave goshim's threads one arena per P, shared by threads
 * running at once: 494 ns an operation against 43 (issue 28's note 24).
 * Prints one line: "ns_per_op=X ops=N threads=T"; exit 1 on bad usage, 2 if
 * a thread cannot be made or an allocation fails.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { SLOTS = 256 };

static long k;

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void *worker(void *arg)
{
    uint32_t x = (uint32_t)(uintptr_t)arg * 2654435761u | 1;
    void *slot[SLOTS] = {0};
    for (long i = 0; i < k; i++) {
        x ^= x << 13; /* xorshift32 */
        x ^= x >> 17;
        x ^= x << 5;
        uint32_t s = x % SLOTS;
        free(slot[s]);
        slot[s] = malloc(16 + (x >> 8) % 4000);
        if (!slot[s]) {
            fprintf(stderr, "pbench_malloc: out of memory\n");
            exit(2);
        }
        *(volatile char *)slot[s] = (char)i; /* touched, as a program would */
    }
    for (int s = 0; s < SLOTS; s++)
        free(slot[s]);
    return NULL;
}

int main(int argc, char **argv)
{
    long t = argc == 3 ? atol(argv[1]) : 0;
    k = argc == 3 ? atol(argv[2]) : 0;
    if (t < 1 || t > 1024 || k < 1) {
        fprintf(stderr, "usage: pbench_malloc T K (1 <= T <= 1024, K >= 1)\n");
        return 1;
    }
    pthread_t *th = calloc((size_t)t, sizeof *th);
    if (!th)
        return 2;
    double t0 = now_ns();
    for (long i = 0; i < t; i++)
        if (pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)(i + 1)) != 0) {
            fprintf(stderr, "pbench_malloc: pthread_create failed\n");
            return 2;
        }
    for (long i = 0; i < t; i++)
        pthread_join(th[i], NULL);
    double ns = now_ns() - t0;
    free(th);
    printf("ns_per_op=%.1f ops=%ld threads=%ld\n", ns / ((double)t * (double)k), t * k, t);
    return 0;
}
