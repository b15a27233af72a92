/*
 * A program whose malloc takes a pthread mutex, as jemalloc's does (redis,
 * mariadb): goshim makes its OS threads with glibc's pthread_create, whose
 * allocate_dtv calls the program's calloc, so the scheduler meets the
 * program's lock from places that are not a thread of the program (an M's
 * scheduler context, runtime code on a thread's stack), often while a
 * thread of the program holds it.
 *
 *   prog_malloc_lock [ROUNDS]   (default 24, scaled by GOSHIM_TEST_SCALE)
 *
 * Each round starts one blocker, which waits in msgrcv (a kernel wait that
 * keeps its OS thread: every round needs one more), and four workers, which
 * allocate and free in a loop and yield with the heap lock held, so that
 * it is contended most of the time. After the rounds, every blocker gets
 * its message; everything is joined. Prints one line with the counts and
 * exits 0; 1 on the first error.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/msg.h>

#include "prog_check.h"

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);

static pthread_mutex_t heap = PTHREAD_MUTEX_INITIALIZER;
static volatile int crowded; /* set once the workers run: yield inside the lock */
static unsigned long nalloc;

static void heap_lock(void)
{
    int e = pthread_mutex_lock(&heap);
    if (e)
        abort(); /* no fprintf here: it may allocate */
}

static void heap_unlock(void)
{
    nalloc++;
    if (crowded && (nalloc & 7) == 0) /* held a while: whoever allocates now waits */
        for (volatile int i = 0; i < 2000; i++)
            ;
    if (pthread_mutex_unlock(&heap))
        abort();
}

void *malloc(size_t n)
{
    heap_lock();
    void *p = __libc_malloc(n);
    heap_unlock();
    return p;
}

void *calloc(size_t k, size_t n)
{
    heap_lock();
    void *p = __libc_calloc(k, n);
    heap_unlock();
    return p;
}

void *realloc(void *old, size_t n)
{
    heap_lock();
    void *p = __libc_realloc(old, n);
    heap_unlock();
    return p;
}

void free(void *p)
{
    if (!p)
        return;
    heap_lock();
    __libc_free(p);
    heap_unlock();
}

static int queue;

struct note {
    long type;
    char byte;
};

static void *blocker(void *arg)
{
    (void)arg;
    struct note n;
    CHECK(msgrcv(queue, &n, sizeof n.byte, 1, 0) == (ssize_t)sizeof n.byte);
    return NULL;
}

static void *worker(void *arg)
{
    long k = (long)arg;
    for (int i = 0; i < 200; i++) {
        char *p = malloc(64 + (size_t)(i + k) % 512);
        CHECK(p != NULL);
        memset(p, (int)k, 64);
        free(p);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    long rounds = scaled(argc > 1 ? atol(argv[1]) : 24);
    queue = msgget(IPC_PRIVATE, IPC_CREAT | 0600);
    CHECK(queue >= 0);
    pthread_t *blockers = calloc((size_t)rounds, sizeof *blockers);
    pthread_t workers[4];
    CHECK(blockers != NULL);
    crowded = 1;
    for (long r = 0; r < rounds; r++) {
        EXPECT(pthread_create(&blockers[r], NULL, blocker, NULL), 0);
        for (long w = 0; w < 4; w++)
            EXPECT(pthread_create(&workers[w], NULL, worker, (void *)(r * 4 + w)), 0);
        for (long w = 0; w < 4; w++)
            EXPECT(pthread_join(workers[w], NULL), 0);
    }
    struct note n = {1, 'x'};
    for (long r = 0; r < rounds; r++)
        CHECK(msgsnd(queue, &n, sizeof n.byte, 0) == 0);
    for (long r = 0; r < rounds; r++)
        EXPECT(pthread_join(blockers[r], NULL), 0);
    crowded = 0;
    CHECK(msgctl(queue, IPC_RMID, NULL) == 0);
    free(blockers);
    printf("malloc lock: %ld rounds, %ld blockers, %ld workers joined\n", rounds, rounds,
           rounds * 4);
    return 0;
}
