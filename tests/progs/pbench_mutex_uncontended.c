/*
 * pbench_mutex_uncontended: pthread_mutex_lock+unlock of a default mutex
 * by one thread (the main thread); ns per lock/unlock pair. One thread is
 * created and joined first: glibc skips atomics while a process has never
 * had a second thread, which no program with a mutex to take would see.
 *
 *   usage: pbench_mutex_uncontended N
 *
 * Prints one line: "ns_per_op=X pairs=N".
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static volatile long counter;

static void *noop(void *arg)
{
    return arg;
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 5000000;
    if (n < 1) {
        fprintf(stderr, "usage: %s N\n", argv[0]);
        return 1;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, noop, NULL) != 0 || pthread_join(t, NULL) != 0)
        return 2;
    /* Warm up: resolve the PLT entries and fault the page in. */
    for (int i = 0; i < 1000; i++) {
        pthread_mutex_lock(&m);
        pthread_mutex_unlock(&m);
    }
    double t0 = now_ns();
    for (long i = 0; i < n; i++) {
        pthread_mutex_lock(&m);
        counter++;
        pthread_mutex_unlock(&m);
    }
    double ns = now_ns() - t0;
    printf("ns_per_op=%.2f pairs=%ld\n", ns / (double)n, n);
    return counter == n ? 0 : 3;
}
