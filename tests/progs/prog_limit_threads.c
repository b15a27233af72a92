/*
 * prog_limit_threads [N [STACK_KIB [MAPS]]]: make threads of STACK_KIB KiB
 * stacks (default 64) that all wait on one condition variable, until N
 * (default 100000) are alive or pthread_create fails (a resource limit:
 * RLIMIT_AS, RLIMIT_NPROC, vm.max_map_count), then release and join them.
 * Every thread touches a little of its stack.
 * With MAPS=1 it prints the address space it used, from /proc/self/status,
 * before the release; with MAPS=2 also /proc/self/maps, on stderr (to see
 * where the space went).
 *
 * Output: "made K threads" and, when one failed, "pthread_create: ERROR";
 * then "joined K threads". Exit 0 (also when pthread_create failed: that
 * is the limit being measured), 1 if a thread was lost.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prog_check.h"

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t started_cv = PTHREAD_COND_INITIALIZER;
static pthread_cond_t go_cv = PTHREAD_COND_INITIALIZER;
static long started, finished;
static int go;

static void *waiter(void *arg)
{
    volatile char frame[1024];
    frame[0] = (char)(long)arg;
    pthread_mutex_lock(&m);
    started++;
    pthread_cond_signal(&started_cv);
    while (!go)
        pthread_cond_wait(&go_cv, &m);
    finished++;
    pthread_mutex_unlock(&m);
    return (void *)(long)frame[0];
}

static void print_vm(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmSize:", 7) == 0 || strncmp(line, "Threads:", 8) == 0)
            fputs(line, stdout);
    if (f)
        fclose(f);
}

static void dump_maps(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f))
        fputs(line, stderr);
    if (f)
        fclose(f);
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 100000;
    long kib = argc > 2 ? atol(argv[2]) : 64;
    int maps = argc > 3 ? atoi(argv[3]) : 0;
    pthread_t *t = calloc((size_t)n, sizeof *t);
    CHECK(t != NULL);
    pthread_attr_t a;
    EXPECT(pthread_attr_init(&a), 0);
    EXPECT(pthread_attr_setstacksize(&a, (size_t)kib * 1024), 0);
    long made = 0;
    int err = 0;
    for (; made < n; made++)
        if ((err = pthread_create(&t[made], &a, waiter, (void *)made)) != 0)
            break;
    printf("made %ld threads\n", made);
    if (err)
        printf("pthread_create: %s\n", strerror(err));
    pthread_mutex_lock(&m);
    while (started < made)
        pthread_cond_wait(&started_cv, &m);
    if (maps)
        print_vm();
    if (maps > 1)
        dump_maps();
    go = 1;
    pthread_cond_broadcast(&go_cv);
    pthread_mutex_unlock(&m);
    for (long i = 0; i < made; i++)
        EXPECT(pthread_join(t[i], NULL), 0);
    printf("joined %ld threads\n", finished);
    return finished == made ? 0 : 1;
}
