/*
 * More threads blocked in the kernel at once than GOSHIM_MAXTHREADS allows
 * OS threads: each of 4 threads runs system("sleep 0.2") (a call that
 * blocks its OS thread in waitpid). Under goshim with GOSHIM_MAXTHREADS=2
 * the cap is reached (goshim says so once, on stderr) and the threads that
 * find no OS thread wait for one to come back: all 4 still complete.
 *
 * Output: "system x4: ok", exit 0.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "prog_check.h"

enum { NTHREADS = 4 };

static pthread_barrier_t start;

static void *runner(void *arg)
{
    (void)arg;
    int rc = pthread_barrier_wait(&start);
    CHECK(rc == 0 || rc == PTHREAD_BARRIER_SERIAL_THREAD);
    int st = system("sleep 0.2");
    CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    return NULL;
}

int main(void)
{
    pthread_t t[NTHREADS];
    EXPECT(pthread_barrier_init(&start, NULL, NTHREADS), 0);
    for (int i = 0; i < NTHREADS; i++)
        EXPECT(pthread_create(&t[i], NULL, runner, NULL), 0);
    for (int i = 0; i < NTHREADS; i++)
        EXPECT(pthread_join(t[i], NULL), 0);
    EXPECT(pthread_barrier_destroy(&start), 0);
    printf("system x%d: ok\n", NTHREADS);
    return 0;
}
