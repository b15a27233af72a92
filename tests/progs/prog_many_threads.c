/*
 * N threads (default 100000) alive at once, all blocked in
 * pthread_cond_wait, then released together and joined. Natively this
 * stops near kernel.pid_max: the program then reports how many it
 * could create and exits 2.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t started_cv = PTHREAD_COND_INITIALIZER;
static pthread_cond_t go_cv = PTHREAD_COND_INITIALIZER;
static long started, finished;
static int go;

static void *waiter(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&m);
    started++;
    pthread_cond_signal(&started_cv);
    while (!go)
        pthread_cond_wait(&go_cv, &m);
    finished++;
    pthread_mutex_unlock(&m);
    return NULL;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 100000;
    pthread_t *t = calloc((size_t)n, sizeof *t);
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 64 * 1024); /* natively, spare the address space */
    long made = 0;
    for (; made < n; made++) {
        int err = pthread_create(&t[made], &a, waiter, NULL);
        if (err) {
            printf("pthread_create failed after %ld threads: %s\n", made, strerror(err));
            break;
        }
    }
    pthread_mutex_lock(&m);
    while (started < made)
        pthread_cond_wait(&started_cv, &m);
    printf("%ld threads blocked in pthread_cond_wait at once\n", started);
    go = 1;
    pthread_cond_broadcast(&go_cv);
    pthread_mutex_unlock(&m);
    for (long i = 0; i < made; i++)
        pthread_join(t[i], NULL);
    printf("released and joined %ld threads\n", finished);
    return made == n && finished == n ? 0 : 2;
}
