/*
 * Every thread keeps its own errno and __thread values while yielding many
 * times (under goshim: while migrating between OS threads).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>

static __thread long counter = 100;
static __thread char buf[64] = "initial";
static int bad;

static void *worker(void *arg)
{
    long id = (long)arg;
    if (counter != 100 || buf[0] != 'i' || errno != 0)
        __atomic_fetch_add(&bad, 1, __ATOMIC_RELAXED);
    counter = id * 1000;
    for (int i = 0; i < 20000; i++) {
        errno = (int)id;
        buf[0] = (char)('A' + id);
        long before = ++counter;
        sched_yield();
        if (errno != (int)id || counter != before || buf[0] != (char)('A' + id))
            __atomic_fetch_add(&bad, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

int main(void)
{
    pthread_t t[8];
    errno = 0;
    for (long i = 0; i < 8; i++)
        pthread_create(&t[i], NULL, worker, (void *)(i + 1));
    for (int i = 0; i < 8; i++)
        pthread_join(t[i], NULL);
    printf("8 threads x 20000 yields: %d wrong errno/__thread values; main counter %ld\n", bad,
           counter);
    return bad != 0 || counter != 100;
}
