/*
 * Threads that only exist: parked_start makes n threads and returns once
 * each waits on a condition variable, until parked_stop wakes and joins
 * them. Returning before they wait would leave the first measured calls
 * beside threads still starting: under goshim at one P they are Gs that
 * wait for it, so a blocking call of main's hands it off and main goes on
 * on another OS thread (another M's page written at each fork). For the
 * pbench programs that measure a path of a threaded process (fork, signals)
 * beside threads that do nothing. Plain pthreads, no goshim header; static
 * inline, so a program that includes it builds with -Werror.
 */
#ifndef GOSHIM_TESTS_PARKED_H
#define GOSHIM_TESTS_PARKED_H

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

static pthread_mutex_t parked_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t parked_cv = PTHREAD_COND_INITIALIZER;
static pthread_cond_t parked_ready_cv = PTHREAD_COND_INITIALIZER;
static long parked_ready; /* threads waiting on parked_cv; parked_mu */
static bool parked_done;
static pthread_t *parked_threads;
static long parked_n;

static inline void *parked_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&parked_mu);
    parked_ready++;
    pthread_cond_signal(&parked_ready_cv);
    while (!parked_done)
        pthread_cond_wait(&parked_cv, &parked_mu);
    pthread_mutex_unlock(&parked_mu);
    return NULL;
}

/* 0, or the error number of the calloc or pthread_create that failed. */
static inline int parked_start(long n)
{
    parked_threads = calloc((size_t)n + 1, sizeof *parked_threads);
    if (!parked_threads)
        return ENOMEM;
    for (parked_n = 0; parked_n < n; parked_n++) {
        int err = pthread_create(&parked_threads[parked_n], NULL, parked_main, NULL);
        if (err)
            return err;
    }
    pthread_mutex_lock(&parked_mu);
    while (parked_ready < n)
        pthread_cond_wait(&parked_ready_cv, &parked_mu);
    pthread_mutex_unlock(&parked_mu);
    return 0;
}

static inline void parked_stop(void)
{
    pthread_mutex_lock(&parked_mu);
    parked_done = true;
    pthread_cond_broadcast(&parked_cv);
    pthread_mutex_unlock(&parked_mu);
    for (long i = 0; i < parked_n; i++)
        pthread_join(parked_threads[i], NULL);
    free(parked_threads);
}

#endif
