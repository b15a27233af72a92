/*
 * Thread lifecycle interposers (thread.c): start-up hooks for init.c.
 */
#ifndef GOSHIM_SHIM_THREAD_H
#define GOSHIM_SHIM_THREAD_H

/* Before sched_adopt_main: install the exit hook, find TLS offsets. */
int shim_thread_init(void);
/* After sched_adopt_main: give the main G its thread record. */
void shim_thread_adopted_main(void);

#endif
