/*
 * prog_mutex_fair: no thread starves on a contended mutex.
 *
 *   prog_mutex_fair [THREADS [K]]   (defaults 8 and 20000, K scaled by GOSHIM_TEST_SCALE)
 *
 * THREADS threads take one default mutex over and over, each time doing a
 * little work inside (a counter and a short loop) and a little outside. A
 * thread that has taken it K times says so once, and goes on taking it
 * until every thread has: the others keep the mutex as busy as they can
 * while the last one waits its turns. A lock that let some waiter lose
 * every race (a woken waiter barged past again and again) never ends: the
 * test's timeout says so. Prints one line; exit 0.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "prog_check.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static long k;
static int nthreads;
static int reached; /* under mu */
static long total;  /* under mu */

static void work(int n)
{
    for (volatile int i = 0; i < n; i++)
        ;
}

static void *taker(void *arg)
{
    (void)arg;
    long mine = 0;
    for (;;) {
        EXPECT(pthread_mutex_lock(&mu), 0);
        total++;
        if (++mine == k)
            reached++;
        int done = reached == nthreads;
        work(20);
        EXPECT(pthread_mutex_unlock(&mu), 0);
        if (done)
            return NULL;
        work(20);
    }
}

int main(int argc, char **argv)
{
    nthreads = argc > 1 ? atoi(argv[1]) : 8;
    k = argc > 2 ? atol(argv[2]) : scaled(20000);
    if (nthreads < 1 || nthreads > 1000 || k < 1) {
        fprintf(stderr, "usage: prog_mutex_fair [THREADS [K]]\n");
        return 2;
    }
    pthread_t *t = calloc((size_t)nthreads, sizeof *t);
    CHECK(t != NULL);
    for (int i = 0; i < nthreads; i++)
        EXPECT(pthread_create(&t[i], NULL, taker, NULL), 0);
    for (int i = 0; i < nthreads; i++)
        EXPECT(pthread_join(t[i], NULL), 0);
    free(t);
    printf("%d threads: each took the mutex %ld times while the others kept taking it: %s\n",
           nthreads, k, total >= (long)nthreads * k ? "yes" : "no");
    return 0;
}
