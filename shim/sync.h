/*
 * What the synchronisation objects share: the owner id a mutex records,
 * the yield of a spinning waiter, and the mutex operations a condition
 * variable needs. mutex.c defines them; cond.c, rwlock.c, barrier.c and
 * the dumps' hooks (thread.c) use them.
 */
#ifndef GOSHIM_SYNC_H
#define GOSHIM_SYNC_H

#include <pthread.h>
#include <stdbool.h>

#include "sched/api.h"

struct g;

/* The caller's owner id: its TCB's tid in full TLS mode (what glibc writes), read where
 * glibc reads it; in errno mode a G's 0x40000000 | (goid & 0x1fffffff), never a real
 * tid; a thread that is no G, its kernel tid (gsync_self_slow). */
int gsync_self_slow(void);
static inline int gsync_self(void)
{
    size_t off = tls_tid_off;
    if (__builtin_expect(off != 0 && tls_full(), 1)) {
        int id;
        __asm__ volatile("movl %%fs:(%1), %0" : "=r"(id) : "r"(off));
        return id;
    }
    return gsync_self_slow();
}
/* Let others run: the G yields its P, a non-G thread yields its CPU. */
void gsync_yield(void);
/* Whether goshim handles this mutex (no robust/PI/PP/pshared kind). */
bool gmutex_ours(pthread_mutex_t *m);
/* A condition wait's unlock and re-lock of its mutex (saved_count: recursion). */
int gmutex_cond_unlock(pthread_mutex_t *m, unsigned *saved_count);
int gmutex_cond_lock(pthread_mutex_t *m, unsigned saved_count);
/* For dumps (allglock held): the G holding m, or NULL; *gone_id is the
 * owner id when m is held by no G that exists (0 when m is free). */
struct g *gmutex_holder(pthread_mutex_t *m, int *gone_id);

#endif
