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
 *                              counts the times it did not.
 *
 * Prints "main's cache changed under it: 0 times"; exit 0.
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

static void nap(long us)
{
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

static void *forker(void *arg)
{
    long forks = (long)arg;
    for (long i = 0; i < forks; i++) {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0)
            _exit(0);
        int st;
        CHECK(waitpid(pid, &st, 0) == pid);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
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
    return 0;
}
