/*
 * Cancellation points, for the waits of shim/ (shim/cancel.c, whose top
 * comment has the design).
 */
#ifndef GOSHIM_SHIM_CANCEL_H
#define GOSHIM_SHIM_CANCEL_H

#include <pthread.h>
#include <stdbool.h>

/*
 * Cancellation points (deferred cancellation). shim_testcancel acts on a
 * pending, enabled cancel request: it unwinds the thread and does not
 * return. shim_cancel_pending says whether it would. A blocking wait that
 * is a cancellation point calls shim_testcancel on entry and after every
 * wake-up (pthread_cancel interrupts its gfutex_wait with EINTR).
 * (shim_async_cancel, for the points of asynchronous cancellation, is in
 * shim/shim.h.)
 */
void shim_testcancel(void);
bool shim_cancel_pending(void);
/* The process-shared cond the calling thread is about to wait on in glibc with mutex m
 * (NULL: it is back): pthread_cancel wakes it there (wake_pshared_waiter). */
void shim_pshared_cond_wait(pthread_cond_t *c, pthread_mutex_t *m);

#endif
