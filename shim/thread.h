/*
 * Thread lifecycle interposers (thread.c): start-up hooks for init.c.
 */
#ifndef GOSHIM_SHIM_THREAD_H
#define GOSHIM_SHIM_THREAD_H

/* Before sched_adopt_main: install the exit hook, find TLS offsets. */
int shim_thread_init(void);
/* After sched_adopt_main: give the main G its thread record. */
void shim_thread_adopted_main(void);

/*
 * Cancellation points (deferred cancellation). shim_testcancel acts on a
 * pending, enabled cancel request: it unwinds the thread and does not
 * return. shim_cancel_pending says whether it would. A blocking wait that
 * is a cancellation point calls shim_testcancel on entry and after every
 * wake-up (pthread_cancel interrupts its gfutex_wait with EINTR).
 */
#include <stdbool.h>
void shim_testcancel(void);
bool shim_cancel_pending(void);

/*
 * Raise the signals pthread_kill left pending for the calling thread, on
 * its current OS thread (handlers run before it returns). 0: none was
 * pending; 1: all had handlers with SA_RESTART (or none ran); 2: a
 * handler without SA_RESTART ran, so the interrupted call fails with EINTR.
 */
int shim_deliver_signals(void);
/* Take the lowest signal of want pending for the calling thread (0 if none). */
int shim_take_signal(uint64_t want);
/* The signals left pending for the calling thread (bit sig-1). */
uint64_t shim_pending_signals(void);

#endif
