/*
 * prog_sync_spin: 8 threads increment a counter under one spinlock (more
 * threads than CPUs, so a spinner must let the holder run); trylock EBUSY.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prog_check.h"

#define NTHREADS 8

static pthread_spinlock_t lock;
static long counter, iters;

static void *worker(void *arg)
{
    (void)arg;
    for (long i = 0; i < iters; i++) {
        pthread_spin_lock(&lock);
        counter++;
        pthread_spin_unlock(&lock);
    }
    return NULL;
}

static void *try_other(void *arg)
{
    (void)arg;
    return (void *)(long)pthread_spin_trylock(&lock);
}

int main(void)
{
    pthread_t th[NTHREADS];
    void *ret;
    int rc;

    iters = scaled(100000);
    if ((rc = pthread_spin_init(&lock, PTHREAD_PROCESS_PRIVATE)) != 0) {
        fprintf(stderr, "prog_sync_spin: init: %s\n", strerror(rc));
        return 1;
    }
    pthread_spin_lock(&lock);
    pthread_create(&th[0], NULL, try_other, NULL);
    pthread_join(th[0], &ret);
    if ((long)ret != EBUSY || pthread_spin_trylock(&lock) != EBUSY) {
        fprintf(stderr, "prog_sync_spin: trylock of a held lock: %ld, want EBUSY\n", (long)ret);
        return 1;
    }
    pthread_spin_unlock(&lock);
    if (pthread_spin_trylock(&lock) != 0) {
        fprintf(stderr, "prog_sync_spin: trylock of a free lock failed\n");
        return 1;
    }
    pthread_spin_unlock(&lock);
    printf("trylock: EBUSY when held, 0 when free\n");
    for (int i = 0; i < NTHREADS; i++)
        pthread_create(&th[i], NULL, worker, NULL);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);
    if (counter != NTHREADS * iters) {
        fprintf(stderr, "prog_sync_spin: counter %ld, want %ld\n", counter, NTHREADS * iters);
        return 1;
    }
    printf("%d threads: counter ok\n", NTHREADS);
    pthread_spin_destroy(&lock);
    return 0;
}
