/*
 * What libgoshim_handover.so (tests/progs/lib/handover.c) hands over to
 * prog_sync_handover: synchronisation objects its constructor used through
 * glibc, each left idle (not held, nobody waiting) in the state glibc's
 * own algorithm leaves it in, and what the constructor saw meanwhile.
 */
#ifndef GOSHIM_TESTS_HANDOVER_H
#define GOSHIM_TESTS_HANDOVER_H

#include <pthread.h>
#include <semaphore.h>
#include <threads.h>
#include <time.h>

enum {
    HO_MUTEXES = 5, /* default (static initializer), normal, recursive, errorcheck, adaptive */
    HO_RWLOCK_STATES = 5,              /* read, write, timed, mixed, woken */
    HO_RWLOCKS = 2 * HO_RWLOCK_STATES, /* prefer reader, prefer writer nonrecursive */
    HO_CONDS = 4,                      /* timed out, signalled, woken, wake request */
    HO_BARRIERS = 3,                   /* counts 3, 2, 1 */
    HO_MTXS = 4,                       /* plain, timed, plain|recursive, timed|recursive */
    HO_CNDS = 2,                       /* timed out, woken */
    HO_ERRORS = 512,
};

struct handover {
    int ctor_tasks;         /* kernel threads of the process when the constructor began */
    int once_runs;          /* runs of the once routines (pthread_once, call_once) */
    char errors[HO_ERRORS]; /* what went unexpectedly in the constructor */

    const char *mutex_name[HO_MUTEXES];
    int mutex_type[HO_MUTEXES];
    pthread_mutex_t mutex[HO_MUTEXES];
    const char *rwlock_name[HO_RWLOCKS];
    pthread_rwlock_t rwlock[HO_RWLOCKS];
    const char *cond_name[HO_CONDS];
    clockid_t cond_clock[HO_CONDS];
    pthread_cond_t cond[HO_CONDS];
    pthread_mutex_t cond_mutex;
    sem_t sem; /* left at 2 */
    pthread_once_t once;
    once_flag c11_once;
    unsigned barrier_count[HO_BARRIERS];
    pthread_barrier_t barrier[HO_BARRIERS];
    pthread_spinlock_t spin;
    const char *mtx_name[HO_MTXS];
    int mtx_type[HO_MTXS];
    mtx_t mtx[HO_MTXS];
    const char *cnd_name[HO_CNDS];
    cnd_t cnd[HO_CNDS];
    mtx_t cnd_mtx;
};

extern struct handover handover;

/* The once routine both sides pass to pthread_once and call_once. */
void handover_once_routine(void);

#endif
