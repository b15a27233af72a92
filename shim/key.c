/*
 * Thread-specific data: pthread_key_create and pthread_key_delete,
 * pthread_getspecific and pthread_setspecific, and the key destructors a
 * thread's exit runs.
 *
 * Values. In full TLS mode every G has its own TCB, so glibc's
 * pthread_getspecific and pthread_setspecific (which use THREAD_SELF) are
 * per G already, and go to glibc. In GOSHIM_TLS=errno mode Gs share their
 * M's TCB: the values live in the thread record instead (keyblk), in 32
 * blocks of 32 slots, each level allocated at the first non-NULL value it
 * holds, so a thread that sets no key costs nothing; the thread's record
 * frees them when it ends (thread.c's free_thread).
 *
 * Destructors. glibc runs them in its own thread start-up code after the
 * thread function returns, which a G never reaches. So the keys stay
 * glibc's (it hands out the numbers and their generations), but the
 * pthread_key_create interposer also records each key's destructor, and a
 * thread's exit runs them here (thread.c's sthread_finish), after its C++
 * thread_local destructors as glibc does, for at most
 * PTHREAD_DESTRUCTOR_ITERATIONS rounds while values are left.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "shim/shim.h"
#include "shim/thread.h"

/* Key destructors, recorded by the pthread_key_create interposer (NKEYS: glibc's
 * PTHREAD_KEYS_MAX). */
#define NKEYS 1024
static void (*key_dtor[NKEYS])(void *) GOSHIM_LARGE;
/* One past the highest key ever given a destructor: an exit looks at no
 * key above it, so a program without destructors pays nothing per exit. */
static uint32_t key_dtor_top;

static void **key_slot(struct sthread *st, pthread_key_t k, bool create)
{
    if (!st->keyblk && (!create || !(st->keyblk = calloc(32, sizeof *st->keyblk))))
        return NULL;
    void **blk = st->keyblk[k / 32];
    if (!blk) {
        if (!create || !(blk = calloc(32, sizeof *blk)))
            return NULL;
        st->keyblk[k / 32] = blk;
    }
    return &blk[k % 32];
}

static void *key_get(pthread_key_t k)
{
    struct sthread *st;
    if (!goshim_on || tls_full() || !(st = sthread_self()))
        return REAL(pthread_getspecific)(k);
    if (k >= NKEYS)
        return NULL;
    void **slot = key_slot(st, k, false);
    return slot ? *slot : NULL;
}

__attribute__((noinline)) static int key_set(pthread_key_t k, const void *v)
{
    struct sthread *st;
    if (!goshim_on || tls_full() || !(st = sthread_self()))
        return REAL(pthread_setspecific)(k, v);
    if (k >= NKEYS)
        return EINVAL;
    void **slot = key_slot(st, k, v != NULL);
    if (slot)
        *slot = (void *)v;
    else if (v)
        return ENOMEM;
    return 0;
}

GOSHIM_EXPORT void *pthread_getspecific(pthread_key_t k)
{
    return key_get(k);
}

/* glibc declares v access(none): it is stored, never read; say so to gcc. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
GOSHIM_EXPORT int pthread_setspecific(pthread_key_t k, const void *v)
{
    return key_set(k, v);
}
#pragma GCC diagnostic pop

GOSHIM_EXPORT int pthread_key_create(pthread_key_t *key, void (*dtor)(void *))
{
    int err = REAL(pthread_key_create)(key, dtor);
    if (err == 0 && *key < NKEYS && dtor) {
        __atomic_store_n(&key_dtor[*key], dtor, __ATOMIC_RELEASE);
        uint32_t top = __atomic_load_n(&key_dtor_top, __ATOMIC_RELAXED);
        while (top < *key + 1 && !__atomic_compare_exchange_n(&key_dtor_top, &top, *key + 1, 0,
                                                              __ATOMIC_RELEASE, __ATOMIC_RELAXED))
            ;
    } else if (err == 0 && *key < NKEYS) {
        __atomic_store_n(&key_dtor[*key], NULL, __ATOMIC_RELEASE);
    }
    return err;
}

GOSHIM_EXPORT int pthread_key_delete(pthread_key_t key)
{
    int err = REAL(pthread_key_delete)(key);
    if (err == 0 && key < NKEYS)
        __atomic_store_n(&key_dtor[key], NULL, __ATOMIC_RELEASE);
    return err;
}

void sthread_run_key_destructors(void)
{
    for (int round = 0; round < PTHREAD_DESTRUCTOR_ITERATIONS; round++) {
        bool again = false;
        pthread_key_t top = __atomic_load_n(&key_dtor_top, __ATOMIC_ACQUIRE);
        for (pthread_key_t k = 0; k < top; k++) {
            void (*dtor)(void *) = __atomic_load_n(&key_dtor[k], __ATOMIC_ACQUIRE);
            if (!dtor)
                continue;
            void *v = key_get(k);
            if (!v)
                continue;
            key_set(k, NULL);
            dtor(v);
            again = true;
        }
        if (!again)
            break;
    }
}

void sthread_free_key_values(struct sthread *st)
{
    if (st->keyblk) { /* (most threads have none of these) */
        for (int i = 0; i < 32; i++)
            free(st->keyblk[i]);
        free(st->keyblk);
    }
}
