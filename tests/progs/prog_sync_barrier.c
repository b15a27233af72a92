/*
 * prog_sync_barrier: NTHREADS threads pass one barrier ROUNDS times; in
 * every round exactly one gets PTHREAD_BARRIER_SERIAL_THREAD and nobody
 * leaves before all arrived. Then: a barrier destroyed by the first thread
 * out of its only round, a barrier of 1, and EINVAL for a count of 0.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NTHREADS 16

static pthread_barrier_t bar;
static long rounds;
static int arrived[1000], serial[1000];
static int bad;

static void *worker(void *arg)
{
    (void)arg;
    for (long r = 0; r < rounds; r++) {
        __atomic_fetch_add(&arrived[r], 1, __ATOMIC_SEQ_CST);
        int rc = pthread_barrier_wait(&bar);
        if (rc == PTHREAD_BARRIER_SERIAL_THREAD)
            __atomic_fetch_add(&serial[r], 1, __ATOMIC_SEQ_CST);
        else if (rc != 0)
            __atomic_store_n(&bad, rc, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&arrived[r], __ATOMIC_SEQ_CST) != NTHREADS)
            __atomic_store_n(&bad, -1, __ATOMIC_SEQ_CST);
    }
    return NULL;
}

static pthread_barrier_t *once;

static void *once_worker(void *arg)
{
    if (pthread_barrier_wait(once) == PTHREAD_BARRIER_SERIAL_THREAD) {
        /* The first one out frees the barrier at once (glibc allows it). */
        pthread_barrier_destroy(once);
        free(once);
    }
    (void)arg;
    return NULL;
}

int main(void)
{
    pthread_t th[NTHREADS];
    const char *s = getenv("GOSHIM_TEST_SCALE");
    double f = s ? atof(s) : 1.0;
    int rc;

    rounds = f > 0 && f < 1 ? (long)(1000 * f) : 1000;
    if (rounds < 1)
        rounds = 1;
    if ((rc = pthread_barrier_init(&bar, NULL, NTHREADS)) != 0) {
        fprintf(stderr, "prog_sync_barrier: init: %s\n", strerror(rc));
        return 1;
    }
    for (int i = 0; i < NTHREADS; i++)
        pthread_create(&th[i], NULL, worker, NULL);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);
    if (bad != 0) {
        fprintf(stderr, "prog_sync_barrier: a thread left early or got %d\n", bad);
        return 1;
    }
    for (long r = 0; r < rounds; r++) {
        if (serial[r] != 1) {
            fprintf(stderr, "prog_sync_barrier: round %ld had %d serial threads\n", r, serial[r]);
            return 1;
        }
    }
    printf("%d threads: one serial thread in each round\n", NTHREADS);
    if (pthread_barrier_destroy(&bar) != 0)
        return 1;

    for (int k = 0; k < 100; k++) {
        once = malloc(sizeof *once);
        pthread_barrier_init(once, NULL, 4);
        for (int i = 0; i < 4; i++)
            pthread_create(&th[i], NULL, once_worker, NULL);
        for (int i = 0; i < 4; i++)
            pthread_join(th[i], NULL);
    }
    printf("destroy by the serial thread: ok\n");

    pthread_barrier_init(&bar, NULL, 1);
    for (int i = 0; i < 3; i++) {
        if (pthread_barrier_wait(&bar) != PTHREAD_BARRIER_SERIAL_THREAD) {
            fprintf(stderr, "prog_sync_barrier: barrier of 1 did not return SERIAL\n");
            return 1;
        }
    }
    pthread_barrier_destroy(&bar);
    printf("barrier of 1: always serial\n");
    if ((rc = pthread_barrier_init(&bar, NULL, 0)) != EINVAL) {
        fprintf(stderr, "prog_sync_barrier: init with count 0: %d, want EINVAL\n", rc);
        return 1;
    }
    printf("count 0: EINVAL\n");
    return 0;
}
