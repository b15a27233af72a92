/*
 * prog_sync_rwlock: readers hold a rwlock together; writers exclude
 * everyone (readers and writers hammer shared data and check it); a
 * writer-preferring lock (PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP
 * and the attribute) holds new readers back while a writer waits, the
 * default one does not; EDEADLK when the writer relocks; EBUSY from the
 * try variants; ETIMEDOUT and EINVAL from the timed and clock variants;
 * process-shared rwlocks (left to glibc) work too.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "prog_check.h"

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static pthread_rwlock_t *rwp;

/* ---- readers in parallel: all NR readers hold it at once ---- */

#define NR 8
static pthread_barrier_t inside;

static void *parallel_reader(void *arg)
{
    (void)arg;
    EXPECT(pthread_rwlock_rdlock(rwp), 0);
    pthread_barrier_wait(&inside); /* would deadlock if readers excluded each other */
    EXPECT(pthread_rwlock_unlock(rwp), 0);
    return NULL;
}

static void readers_parallel(pthread_rwlock_t *rw, const char *name)
{
    pthread_t th[NR];

    rwp = rw;
    pthread_barrier_init(&inside, NULL, NR);
    for (int i = 0; i < NR; i++)
        EXPECT(pthread_create(&th[i], NULL, parallel_reader, NULL), 0);
    for (int i = 0; i < NR; i++)
        EXPECT(pthread_join(th[i], NULL), 0);
    pthread_barrier_destroy(&inside);
    printf("%s: %d readers inside together\n", name, NR);
}

/* ---- exclusion ---- */

static long a, b, iters;
static int torn;

static void *writer(void *arg)
{
    (void)arg;
    for (long i = 0; i < iters; i++) {
        EXPECT(pthread_rwlock_wrlock(rwp), 0);
        a++;
        b++;
        EXPECT(pthread_rwlock_unlock(rwp), 0);
    }
    return NULL;
}

static void *reader(void *arg)
{
    (void)arg;
    for (long i = 0; i < iters; i++) {
        EXPECT(pthread_rwlock_rdlock(rwp), 0);
        if (__atomic_load_n(&a, __ATOMIC_RELAXED) != __atomic_load_n(&b, __ATOMIC_RELAXED))
            __atomic_store_n(&torn, 1, __ATOMIC_RELAXED);
        EXPECT(pthread_rwlock_unlock(rwp), 0);
    }
    return NULL;
}

static void exclusion(pthread_rwlock_t *rw, const char *name)
{
    enum { NW = 4, NRD = 4 };
    pthread_t th[NW + NRD];

    rwp = rw;
    a = b = 0;
    iters = scaled(20000);
    for (int i = 0; i < NW + NRD; i++)
        EXPECT(pthread_create(&th[i], NULL, i < NW ? writer : reader, NULL), 0);
    for (int i = 0; i < NW + NRD; i++)
        EXPECT(pthread_join(th[i], NULL), 0);
    if (a != NW * iters || torn) {
        fprintf(stderr, "prog_sync_rwlock: %s: a=%ld want %ld, torn=%d\n", name, a, NW * iters,
                torn);
        exit(1);
    }
    printf("%s: writers exclusive ok\n", name);
}

/* ---- errors ---- */

static int op_result;

static void *try_ops(void *arg)
{
    long which = (long)arg;
    struct timespec ts;

    switch (which) {
    case 0:
        op_result = pthread_rwlock_tryrdlock(rwp);
        break;
    case 1:
        op_result = pthread_rwlock_trywrlock(rwp);
        break;
    case 2:
        ts = in_ms(CLOCK_REALTIME, 30);
        op_result = pthread_rwlock_timedrdlock(rwp, &ts);
        break;
    case 3:
        ts = in_ms(CLOCK_REALTIME, 30);
        op_result = pthread_rwlock_timedwrlock(rwp, &ts);
        break;
    case 4:
        ts = in_ms(CLOCK_MONOTONIC, 30);
        op_result = pthread_rwlock_clockrdlock(rwp, CLOCK_MONOTONIC, &ts);
        break;
    case 5:
        ts = in_ms(CLOCK_MONOTONIC, 30);
        op_result = pthread_rwlock_clockwrlock(rwp, CLOCK_MONOTONIC, &ts);
        break;
    }
    if (op_result == 0)
        pthread_rwlock_unlock(rwp);
    return NULL;
}

static int other(long which)
{
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, try_ops, (void *)which), 0);
    EXPECT(pthread_join(t, NULL), 0);
    return op_result;
}

static void errors(pthread_rwlock_t *rw, const char *name)
{
    struct timespec ts = in_ms(CLOCK_REALTIME, 10), bad = {0, 1000000000};

    rwp = rw;
    EXPECT(pthread_rwlock_wrlock(rw), 0);
    EXPECT(pthread_rwlock_wrlock(rw), EDEADLK);
    EXPECT(pthread_rwlock_rdlock(rw), EDEADLK);
    EXPECT(pthread_rwlock_timedwrlock(rw, &ts), EDEADLK);
    EXPECT(pthread_rwlock_timedwrlock(rw, &bad), EINVAL);
    EXPECT(pthread_rwlock_clockrdlock(rw, CLOCK_PROCESS_CPUTIME_ID, &ts), EINVAL);
    EXPECT(pthread_rwlock_trywrlock(rw), EBUSY);
    EXPECT(pthread_rwlock_tryrdlock(rw), EBUSY);
    for (long k = 0; k < 6; k++)
        EXPECT(other(k), k < 2 ? EBUSY : ETIMEDOUT);
    EXPECT(pthread_rwlock_unlock(rw), 0);

    EXPECT(pthread_rwlock_rdlock(rw), 0);
    EXPECT(other(0), 0);
    EXPECT(other(1), EBUSY);
    EXPECT(other(2), 0);
    EXPECT(other(3), ETIMEDOUT);
    EXPECT(other(5), ETIMEDOUT);
    EXPECT(pthread_rwlock_unlock(rw), 0);
    EXPECT(other(1), 0);
    EXPECT(other(5), 0);
    /* Free lock: timed variants succeed. */
    ts = in_ms(CLOCK_MONOTONIC, 10);
    EXPECT(pthread_rwlock_clockwrlock(rw, CLOCK_MONOTONIC, &ts), 0);
    EXPECT(pthread_rwlock_unlock(rw), 0);
    EXPECT(pthread_rwlock_clockrdlock(rw, CLOCK_MONOTONIC, &ts), 0);
    EXPECT(pthread_rwlock_unlock(rw), 0);
    printf("%s: EDEADLK, EBUSY, ETIMEDOUT, EINVAL ok\n", name);
}

/* ---- preference ---- */

static void *blocked_writer(void *arg)
{
    (void)arg;
    EXPECT(pthread_rwlock_wrlock(rwp), 0);
    EXPECT(pthread_rwlock_unlock(rwp), 0);
    return NULL;
}

static void *timed_writer(void *arg)
{
    struct timespec ts = in_ms(CLOCK_REALTIME, 150);
    (void)arg;
    EXPECT(pthread_rwlock_timedwrlock(rwp, &ts), ETIMEDOUT);
    return NULL;
}

/* A writer that gives up lets the readers it held back in (the lock stays read-held). */
static void writer_gives_up(pthread_rwlock_t *rw, const char *name)
{
    pthread_t w;
    int r = 0;

    rwp = rw;
    EXPECT(pthread_rwlock_rdlock(rw), 0);
    EXPECT(pthread_create(&w, NULL, timed_writer, NULL), 0);
    for (int i = 0; i < 100 && (r = other(0)) == 0; i++)
        sleep_ms(1);
    EXPECT(r, EBUSY);
    {
        struct timespec ts = in_ms(CLOCK_REALTIME, 5000);
        EXPECT(pthread_rwlock_timedrdlock(rw, &ts), 0); /* from the main thread: recursion */
    }
    EXPECT(pthread_join(w, NULL), 0);
    EXPECT(pthread_rwlock_unlock(rw), 0);
    EXPECT(pthread_rwlock_unlock(rw), 0);
    printf("%s: readers enter after the waiting writer timed out\n", name);
}

static void preference(pthread_rwlock_t *rw, int prefer_writer, const char *name)
{
    pthread_t w;
    int r = 0;

    rwp = rw;
    EXPECT(pthread_rwlock_rdlock(rw), 0);
    EXPECT(pthread_create(&w, NULL, blocked_writer, NULL), 0);
    if (prefer_writer) {
        /* Once the writer waits, new readers are held back. */
        for (int i = 0; i < 5000 && (r = other(0)) == 0; i++)
            sleep_ms(1);
        EXPECT(r, EBUSY);
        EXPECT(other(2), ETIMEDOUT);
    } else {
        sleep_ms(50); /* let the writer queue up */
        EXPECT(other(0), 0);
        EXPECT(other(2), 0);
    }
    EXPECT(pthread_rwlock_unlock(rw), 0);
    EXPECT(pthread_join(w, NULL), 0);
    printf("%s: new readers %s while a writer waits\n", name, prefer_writer ? "wait" : "enter");
    if (prefer_writer)
        writer_gives_up(rw, name);
}

static pthread_rwlock_t s_default = PTHREAD_RWLOCK_INITIALIZER;
static pthread_rwlock_t s_writer = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
static pthread_rwlock_t s_zero;

static void all(pthread_rwlock_t *rw, int prefer_writer, const char *name)
{
    readers_parallel(rw, name);
    exclusion(rw, name);
    errors(rw, name);
    preference(rw, prefer_writer, name);
}

int main(void)
{
    pthread_rwlockattr_t at;
    pthread_rwlock_t rw;

    all(&s_default, 0, "PTHREAD_RWLOCK_INITIALIZER");
    all(&s_zero, 0, "all-zero");
    all(&s_writer, 1, "PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP");
    EXPECT(pthread_rwlockattr_init(&at), 0);
    EXPECT(pthread_rwlockattr_setkind_np(&at, PTHREAD_RWLOCK_PREFER_WRITER_NP), 0);
    EXPECT(pthread_rwlock_init(&rw, &at), 0);
    all(&rw, 0, "attr PREFER_WRITER_NP (reader preference in glibc)");
    EXPECT(pthread_rwlock_destroy(&rw), 0);
    EXPECT(pthread_rwlockattr_setkind_np(&at, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP), 0);
    EXPECT(pthread_rwlock_init(&rw, &at), 0);
    all(&rw, 1, "attr PREFER_WRITER_NONRECURSIVE_NP");
    EXPECT(pthread_rwlock_destroy(&rw), 0);
    EXPECT(pthread_rwlockattr_setkind_np(&at, PTHREAD_RWLOCK_PREFER_READER_NP), 0);
    EXPECT(pthread_rwlockattr_setpshared(&at, PTHREAD_PROCESS_SHARED), 0);
    EXPECT(pthread_rwlock_init(&rw, &at), 0);
    readers_parallel(&rw, "process-shared");
    exclusion(&rw, "process-shared");
    errors(&rw, "process-shared");
    EXPECT(pthread_rwlock_destroy(&rw), 0);
    EXPECT(pthread_rwlockattr_destroy(&at), 0);
    printf("done\n");
    return 0;
}
