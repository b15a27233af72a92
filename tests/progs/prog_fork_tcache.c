/*
 * A thread forks while the main thread allocates: the main thread's malloc state must not
 * change under it.
 *
 *   prog_fork_tcache [forks]   a second thread forks (default 300 times) and waits for each
 *                              child, sleeping a little between forks; the main thread frees
 *                              a block and at once allocates one of the same size, over and
 *                              over, sleeping a little between rounds. glibc's malloc
 *                              returns the block just freed, from the thread's own cache,
 *                              as long as no other thread uses that cache: the program
 *                              counts the times it did not. Each child makes threads
 *                              that compute, fork and wait for a child of their own, and
 *                              exits with how many of them failed.
 *
 * Prints "main's cache changed under it: 0 times" and "children that ran threads: N of N";
 * exit 0.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "prog_check.h"

#define BLOCK 1000 /* a size of malloc's per-thread cache, used by nothing else here */

static int done;
static long children_ok;

static void nap(long us)
{
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

/* In a child: compute, then fork and wait for a child of its own; NULL if all went well. */
static void *grandparent(void *arg)
{
    volatile long sum = 0;
    for (long i = 0; i < 200000; i++)
        sum += i;
    pid_t pid = fork();
    if (pid == 0)
        _exit(7);
    int st;
    return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 7 ? NULL
                                                                                           : arg;
}

/* A child's life: threads of its own (new OS threads, whose stacks glibc may take from its
 * cache); the number that failed. */
static int child(void)
{
    enum { N = 3 };
    pthread_t t[N];
    int failed = 0;
    for (int i = 0; i < N; i++)
        if (pthread_create(&t[i], NULL, grandparent, &failed) != 0)
            return 100;
    for (int i = 0; i < N; i++) {
        void *r;
        if (pthread_join(t[i], &r) != 0 || r != NULL)
            failed++;
    }
    return failed;
}

static void *forker(void *arg)
{
    long forks = (long)arg;
    for (long i = 0; i < forks; i++) {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0)
            _exit(child());
        int st;
        CHECK(waitpid(pid, &st, 0) == pid);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
            children_ok++;
        else
            fprintf(stderr, "child %ld ended with status %#x\n", i, st);
        nap(50 + (i % 7) * 30);
    }
    __atomic_store_n(&done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Free a block and allocate its size again, rounds times: the number of times malloc did
 * not return the block just freed. */
static long churn(int rounds)
{
    long changed = 0;
    for (int i = 0; i < rounds; i++) {
        void *p = malloc(BLOCK);
        CHECK(p != NULL);
        free(p);
        void *q = malloc(BLOCK);
        CHECK(q != NULL);
        if (q != p)
            changed++;
        free(q);
    }
    return changed;
}

int main(int argc, char **argv)
{
    long forks = argc > 1 ? atol(argv[1]) : scaled(300);
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, forker, (void *)forks), 0);
    long changed = 0;
    for (long round = 0; !__atomic_load_n(&done, __ATOMIC_ACQUIRE); round++) {
        changed += churn(2000);
        nap(20 + (round % 5) * 20);
    }
    EXPECT(pthread_join(t, NULL), 0);
    printf("main's cache changed under it: %ld times\n", changed);
    printf("children that ran threads: %ld of %ld\n", children_ok, forks);
    return 0;
}
