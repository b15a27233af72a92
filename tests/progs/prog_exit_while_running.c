/*
 * exit() while other threads run or wait: the process ends at once with
 * the status given, after the atexit handlers, as natively.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>

static sem_t never;
static volatile long spins;

static void *blocked(void *arg)
{
    (void)arg;
    sem_wait(&never);
    return NULL;
}

static void *busy(void *arg)
{
    (void)arg;
    for (;;)
        spins++;
    return NULL;
}

static void bye(void)
{
    printf("atexit handler ran\n");
}

int main(void)
{
    pthread_t t;
    sem_init(&never, 0, 0);
    for (int i = 0; i < 4; i++)
        pthread_create(&t, NULL, blocked, NULL);
    pthread_create(&t, NULL, busy, NULL);
    atexit(bye);
    printf("exiting with 3 while 5 threads run or wait\n");
    exit(3);
}
