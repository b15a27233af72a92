/*
 * prog_sync_mutex: every mutex kind, every static initializer glibc
 * defines, and the error returns: EBUSY (trylock, destroy while locked),
 * EDEADLK and EPERM (errorcheck), EPERM and recursion (recursive),
 * ETIMEDOUT and EINVAL (timedlock, clocklock), plus process-shared and
 * robust mutexes, which goshim leaves to glibc. Each kind also protects a
 * counter shared by 4 threads. Prints one line per check; exits 1 with a
 * message on the first failure.
 */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "prog_check.h"

#define NTHREADS 4

/* ---- a counter under each kind ---- */

static pthread_mutex_t *cmutex;
static long counter, iters;

static void *count_thread(void *arg)
{
    (void)arg;
    for (long i = 0; i < iters; i++) {
        EXPECT(pthread_mutex_lock(cmutex), 0);
        counter++;
        EXPECT(pthread_mutex_unlock(cmutex), 0);
    }
    return NULL;
}

static void count_with(pthread_mutex_t *m, const char *name)
{
    pthread_t th[NTHREADS];

    cmutex = m;
    counter = 0;
    iters = scaled(20000);
    for (int i = 0; i < NTHREADS; i++)
        EXPECT(pthread_create(&th[i], NULL, count_thread, NULL), 0);
    for (int i = 0; i < NTHREADS; i++)
        EXPECT(pthread_join(th[i], NULL), 0);
    if (counter != NTHREADS * iters) {
        fprintf(stderr, "prog_sync_mutex: %s counter %ld, want %ld\n", name, counter,
                NTHREADS * iters);
        exit(1);
    }
    printf("%s: counter ok\n", name);
}

/* ---- checks from another thread ---- */

struct other {
    pthread_mutex_t *m;
    int op; /* 0 trylock, 1 unlock, 2 timedlock 50ms, 3 clocklock monotonic 50ms */
    int rc;
};

static void *other_thread(void *arg)
{
    struct other *o = arg;
    struct timespec ts;

    switch (o->op) {
    case 0:
        o->rc = pthread_mutex_trylock(o->m);
        break;
    case 1:
        o->rc = pthread_mutex_unlock(o->m);
        break;
    case 2:
        ts = in_ms(CLOCK_REALTIME, 50);
        o->rc = pthread_mutex_timedlock(o->m, &ts);
        break;
    case 3:
        ts = in_ms(CLOCK_MONOTONIC, 50);
        o->rc = pthread_mutex_clocklock(o->m, CLOCK_MONOTONIC, &ts);
        break;
    }
    return NULL;
}

static int from_other(pthread_mutex_t *m, int op)
{
    struct other o = {m, op, -1};
    pthread_t t;

    EXPECT(pthread_create(&t, NULL, other_thread, &o), 0);
    EXPECT(pthread_join(t, NULL), 0);
    return o.rc;
}

/* Checks every kind shares: trylock EBUSY from another thread, timed locks time out. */
static void common_checks(pthread_mutex_t *m, const char *name)
{
    struct timespec t0, t1;

    EXPECT(pthread_mutex_lock(m), 0);
    EXPECT(from_other(m, 0), EBUSY);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    EXPECT(from_other(m, 2), ETIMEDOUT);
    EXPECT(from_other(m, 3), ETIMEDOUT);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (elapsed_ms(&t0, &t1) < 90) {
        fprintf(stderr, "prog_sync_mutex: %s: two 50 ms timeouts took %ld ms\n", name,
                elapsed_ms(&t0, &t1));
        exit(1);
    }
    EXPECT(pthread_mutex_unlock(m), 0);
    /* Free mutex: timed and clock locks succeed (tv_nsec need not be checked then). */
    {
        struct timespec ts = in_ms(CLOCK_REALTIME, 1000);
        EXPECT(pthread_mutex_timedlock(m, &ts), 0);
        EXPECT(pthread_mutex_unlock(m), 0);
        ts = in_ms(CLOCK_MONOTONIC, 1000);
        EXPECT(pthread_mutex_clocklock(m, CLOCK_MONOTONIC, &ts), 0);
        EXPECT(pthread_mutex_unlock(m), 0);
        EXPECT(pthread_mutex_clocklock(m, CLOCK_PROCESS_CPUTIME_ID, &ts), EINVAL);
    }
    EXPECT(pthread_mutex_trylock(m), 0);
    EXPECT(pthread_mutex_unlock(m), 0);
    printf("%s: trylock EBUSY, timedlock/clocklock ETIMEDOUT, bad clock EINVAL ok\n", name);
}

static pthread_mutex_t s_default = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t s_recursive = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static pthread_mutex_t s_errorcheck = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;
static pthread_mutex_t s_adaptive = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP;
static pthread_mutex_t s_zero; /* all-zero: the default kind */

static void check_normal(pthread_mutex_t *m, const char *name)
{
    struct timespec bad = {0, -1};

    common_checks(m, name);
    EXPECT(pthread_mutex_lock(m), 0);
    /* Relocking a normal mutex deadlocks; trylock by the owner is EBUSY. */
    EXPECT(pthread_mutex_trylock(m), EBUSY);
    /* A contended timed lock with a bad tv_nsec is EINVAL. */
    EXPECT(pthread_mutex_timedlock(m, &bad), EINVAL);
    EXPECT(pthread_mutex_destroy(m), EBUSY);
    EXPECT(pthread_mutex_unlock(m), 0);
    count_with(m, name);
}

static void check_recursive(pthread_mutex_t *m, const char *name)
{
    struct timespec ts;

    common_checks(m, name);
    EXPECT(pthread_mutex_lock(m), 0);
    EXPECT(pthread_mutex_lock(m), 0);
    EXPECT(pthread_mutex_trylock(m), 0);
    ts = in_ms(CLOCK_REALTIME, 10);
    EXPECT(pthread_mutex_timedlock(m, &ts), 0);
    EXPECT(from_other(m, 1), EPERM);
    EXPECT(from_other(m, 0), EBUSY);
    EXPECT(pthread_mutex_unlock(m), 0);
    EXPECT(pthread_mutex_unlock(m), 0);
    EXPECT(pthread_mutex_unlock(m), 0);
    EXPECT(from_other(m, 0), EBUSY);
    EXPECT(pthread_mutex_unlock(m), 0);
    EXPECT(pthread_mutex_unlock(m), EPERM);
    printf("%s: depth 4, EPERM from non-owner and when unlocked ok\n", name);
    count_with(m, name);
}

static void check_errorcheck(pthread_mutex_t *m, const char *name)
{
    struct timespec ts = in_ms(CLOCK_REALTIME, 10);

    common_checks(m, name);
    EXPECT(pthread_mutex_unlock(m), EPERM);
    EXPECT(pthread_mutex_lock(m), 0);
    EXPECT(pthread_mutex_lock(m), EDEADLK);
    EXPECT(pthread_mutex_timedlock(m, &ts), EDEADLK);
    EXPECT(pthread_mutex_trylock(m), EBUSY);
    EXPECT(from_other(m, 1), EPERM);
    EXPECT(pthread_mutex_unlock(m), 0);
    EXPECT(pthread_mutex_unlock(m), EPERM);
    printf("%s: EDEADLK on relock, EPERM on foreign/extra unlock ok\n", name);
    count_with(m, name);
}

static void with_attr(int type, int pshared, int robust, int protocol, const char *name)
{
    pthread_mutexattr_t a;
    pthread_mutex_t m;

    EXPECT(pthread_mutexattr_init(&a), 0);
    EXPECT(pthread_mutexattr_settype(&a, type), 0);
    EXPECT(pthread_mutexattr_setpshared(&a, pshared), 0);
    EXPECT(pthread_mutexattr_setrobust(&a, robust), 0);
    EXPECT(pthread_mutexattr_setprotocol(&a, protocol), 0);
    EXPECT(pthread_mutex_init(&m, &a), 0);
    EXPECT(pthread_mutexattr_destroy(&a), 0);
    if (type == PTHREAD_MUTEX_RECURSIVE)
        check_recursive(&m, name);
    else if (type == PTHREAD_MUTEX_ERRORCHECK)
        check_errorcheck(&m, name);
    else
        check_normal(&m, name);
    EXPECT(pthread_mutex_destroy(&m), 0);
}

struct dying {
    pthread_mutex_t m;
    sem_t locked, go;
};

static void *lock_and_die(void *arg)
{
    struct dying *d = arg;
    EXPECT(pthread_mutex_lock(&d->m), 0);
    CHECK(sem_post(&d->locked) == 0);
    CHECK(sem_wait(&d->go) == 0);
    return NULL; /* ends holding it */
}

/* A robust mutex whose owner ended holding it: the next lock, made before or after the end
 * (the owner ends as the main thread goes to lock), gets it with EOWNERDEAD; made
 * consistent, it works again. Under goshim, glibc's kind: tried first, then waited for. */
static void check_owner_died(int pshared, const char *name)
{
    struct dying d;
    pthread_mutexattr_t a;
    pthread_t t;
    EXPECT(pthread_mutexattr_init(&a), 0);
    EXPECT(pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST), 0);
    EXPECT(pthread_mutexattr_setpshared(&a, pshared), 0);
    EXPECT(pthread_mutex_init(&d.m, &a), 0);
    CHECK(sem_init(&d.locked, 0, 0) == 0 && sem_init(&d.go, 0, 0) == 0);
    EXPECT(pthread_create(&t, NULL, lock_and_die, &d), 0);
    CHECK(sem_wait(&d.locked) == 0);
    CHECK(sem_post(&d.go) == 0);
    EXPECT(pthread_mutex_lock(&d.m), EOWNERDEAD);
    EXPECT(pthread_mutex_consistent(&d.m), 0);
    EXPECT(pthread_mutex_unlock(&d.m), 0);
    EXPECT(pthread_join(t, NULL), 0);
    EXPECT(pthread_mutex_lock(&d.m), 0);
    EXPECT(pthread_mutex_unlock(&d.m), 0);
    EXPECT(pthread_mutex_destroy(&d.m), 0);
    EXPECT(pthread_mutexattr_destroy(&a), 0);
    CHECK(sem_destroy(&d.locked) == 0 && sem_destroy(&d.go) == 0);
    printf("%s: EOWNERDEAD after its owner ended, consistent again ok\n", name);
}

int main(void)
{
    check_normal(&s_default, "PTHREAD_MUTEX_INITIALIZER");
    check_normal(&s_zero, "all-zero");
    check_normal(&s_adaptive, "PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP");
    check_recursive(&s_recursive, "PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP");
    check_errorcheck(&s_errorcheck, "PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP");
    with_attr(PTHREAD_MUTEX_NORMAL, PTHREAD_PROCESS_PRIVATE, PTHREAD_MUTEX_STALLED,
              PTHREAD_PRIO_NONE, "attr normal");
    with_attr(PTHREAD_MUTEX_DEFAULT, PTHREAD_PROCESS_PRIVATE, PTHREAD_MUTEX_STALLED,
              PTHREAD_PRIO_NONE, "attr default");
    with_attr(PTHREAD_MUTEX_RECURSIVE, PTHREAD_PROCESS_PRIVATE, PTHREAD_MUTEX_STALLED,
              PTHREAD_PRIO_NONE, "attr recursive");
    with_attr(PTHREAD_MUTEX_ERRORCHECK, PTHREAD_PROCESS_PRIVATE, PTHREAD_MUTEX_STALLED,
              PTHREAD_PRIO_NONE, "attr errorcheck");
    with_attr(PTHREAD_MUTEX_ADAPTIVE_NP, PTHREAD_PROCESS_PRIVATE, PTHREAD_MUTEX_STALLED,
              PTHREAD_PRIO_NONE, "attr adaptive");
    with_attr(PTHREAD_MUTEX_NORMAL, PTHREAD_PROCESS_SHARED, PTHREAD_MUTEX_STALLED,
              PTHREAD_PRIO_NONE, "attr process-shared");
    with_attr(PTHREAD_MUTEX_RECURSIVE, PTHREAD_PROCESS_PRIVATE, PTHREAD_MUTEX_ROBUST,
              PTHREAD_PRIO_NONE, "attr robust recursive");
    with_attr(PTHREAD_MUTEX_ERRORCHECK, PTHREAD_PROCESS_SHARED, PTHREAD_MUTEX_STALLED,
              PTHREAD_PRIO_NONE, "attr errorcheck process-shared");
    check_owner_died(PTHREAD_PROCESS_SHARED, "robust process-shared");
    check_owner_died(PTHREAD_PROCESS_PRIVATE, "robust private");
    with_attr(PTHREAD_MUTEX_RECURSIVE, PTHREAD_PROCESS_PRIVATE, PTHREAD_MUTEX_STALLED,
              PTHREAD_PRIO_INHERIT, "attr recursive PI");
    with_attr(PTHREAD_MUTEX_NORMAL, PTHREAD_PROCESS_PRIVATE, PTHREAD_MUTEX_STALLED,
              PTHREAD_PRIO_INHERIT, "attr normal PI");
    EXPECT(pthread_mutex_destroy(&s_default), 0);
    printf("done\n");
    return 0;
}
