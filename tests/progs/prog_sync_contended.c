/*
 * prog_sync_contended: 64 threads increment one counter under one default
 * mutex, and 64 more under an adaptive one; the totals must be exact.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prog_check.h"

#define NTHREADS 64

static pthread_mutex_t normal = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t adaptive = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP;
static long counter, iters;

static void *worker(void *arg)
{
    pthread_mutex_t *m = arg;

    for (long i = 0; i < iters; i++) {
        int rc = pthread_mutex_lock(m);
        if (rc != 0) {
            fprintf(stderr, "prog_sync_contended: lock: %s\n", strerror(rc));
            exit(1);
        }
        counter++;
        pthread_mutex_unlock(m);
    }
    return NULL;
}

static int run(pthread_mutex_t *m, const char *name)
{
    pthread_t th[NTHREADS];

    counter = 0;
    for (int i = 0; i < NTHREADS; i++) {
        int rc = pthread_create(&th[i], NULL, worker, m);
        if (rc != 0) {
            fprintf(stderr, "prog_sync_contended: pthread_create: %s\n", strerror(rc));
            return 1;
        }
    }
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);
    if (counter != NTHREADS * iters) {
        fprintf(stderr, "prog_sync_contended: %s: counter %ld, want %ld\n", name, counter,
                NTHREADS * iters);
        return 1;
    }
    printf("%s: %d threads, counter ok\n", name, NTHREADS);
    return 0;
}

int main(void)
{
    iters = scaled(20000);
    if (run(&normal, "default mutex") || run(&adaptive, "adaptive mutex"))
        return 1;
    return 0;
}
