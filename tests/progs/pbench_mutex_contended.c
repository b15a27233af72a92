/*
 * pbench_mutex_contended: T threads each do K lock/increment/unlock on one
 * default mutex; ns per operation over all threads (1e9 / throughput).
 *
 *   usage: pbench_mutex_contended T K
 *
 * The main thread holds the mutex while it creates the threads and waits
 * (sched_yield) until all T have announced themselves, then starts the
 * clock and unlocks, so thread creation is not timed.
 * Prints one line: "ns_per_op=X ops=N threads=T".
 */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static long counter; /* protected by m */
static long k;
static long ready; /* atomic */

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void *worker(void *arg)
{
    (void)arg;
    __atomic_add_fetch(&ready, 1, __ATOMIC_RELEASE);
    for (long i = 0; i < k; i++) {
        pthread_mutex_lock(&m);
        counter++;
        pthread_mutex_unlock(&m);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    long nt = argc > 1 ? atol(argv[1]) : 8;
    k = argc > 2 ? atol(argv[2]) : 50000;
    if (nt < 1 || k < 1) {
        fprintf(stderr, "usage: %s THREADS OPS_PER_THREAD\n", argv[0]);
        return 1;
    }
    pthread_t *t = malloc((size_t)nt * sizeof *t);
    if (t == NULL)
        return 1;
    pthread_mutex_lock(&m);
    for (long i = 0; i < nt; i++)
        if (pthread_create(&t[i], NULL, worker, NULL) != 0) {
            fprintf(stderr, "pbench_mutex_contended: pthread_create #%ld failed\n", i);
            return 2;
        }
    while (__atomic_load_n(&ready, __ATOMIC_ACQUIRE) < nt)
        sched_yield();
    double t0 = now_ns();
    pthread_mutex_unlock(&m);
    for (long i = 0; i < nt; i++)
        pthread_join(t[i], NULL);
    double ns = now_ns() - t0;
    if (counter != nt * k) {
        fprintf(stderr, "pbench_mutex_contended: counter %ld, expected %ld\n", counter, nt * k);
        return 3;
    }
    printf("ns_per_op=%.1f ops=%ld threads=%ld\n", ns / (double)(nt * k), nt * k, nt);
    free(t);
    return 0;
}
