/*
 * G-aware futex: the primitive under the shim's mutexes, condition
 * variables, rwlocks, barriers and semaphores (as glibc and musl build
 * theirs on the kernel futex), and under syscall(SYS_futex) emulation.
 *
 * A G that waits is parked (its M runs other Gs); any other thread blocks
 * in the kernel futex on the same address, so it is also woken by a raw
 * FUTEX_WAKE from code goshim does not see. Everything is process-private.
 * Return values are error numbers, never errno: G paths touch no TLS but
 * the current-G lookup (sched_self).
 */
#ifndef GOSHIM_GFUTEX_H
#define GOSHIM_GFUTEX_H

#include <stdint.h>
#include <time.h>

/* If *addr == val, sleep until woken by gfutex_wake on addr, or until deadline
 * (absolute CLOCK_MONOTONIC ns; < 0 = none). From a G it parks the G (the M runs
 * others); from any other thread it blocks in the kernel futex. Returns 0 when
 * woken (spurious wakeups allowed, as with futexes), EAGAIN if *addr != val,
 * ETIMEDOUT at the deadline. The check of *addr and the enqueue are atomic with
 * respect to gfutex_wake.
 *
 * Thread waiters: between the check and the kernel sleep a thread is counted
 * but not yet in the kernel queue; a wake in that window is caught by the
 * kernel's own compare only if the waker changed *addr first (every futex
 * protocol does). Must not be called on an M's scheduler context (g0). */
int gfutex_wait(uint32_t *addr, uint32_t val, int64_t deadline_ns);
/* Wake up to n waiters on addr (G waiters and thread waiters); returns how many.
 * G waiters are woken first, in FIFO order; the kernel FUTEX_WAKE for thread
 * waiters is issued only if some thread waits on addr's bucket. */
int gfutex_wake(uint32_t *addr, int n);
/* Wake up to nwake waiters on addr and move up to nrequeue of the rest to wait on addr2
 * (FUTEX_CMP_REQUEUE semantics). Returns woken + requeued, or -EAGAIN if
 * *addr != val, -EINVAL if addr == addr2 or a count is negative. Thread waiters
 * are woken instead of moved (a spurious wakeup for them), within the same
 * budget, and counted as requeued. */
int gfutex_requeue(uint32_t *addr, uint32_t val, int nwake, uint32_t *addr2, int nrequeue);
/* Convert an absolute timespec on clock (CLOCK_REALTIME or CLOCK_MONOTONIC) to the
 * monotonic ns deadline above; EINVAL for a bad tv_nsec or another clock. A time
 * in the past gives 0 (already expired); CLOCK_REALTIME is converted once, so a
 * later change of the wall clock does not move the deadline. A time too far
 * ahead gives INT64_MAX, which gfutex_wait treats as no deadline. */
int gfutex_deadline(clockid_t clock, const struct timespec *abstime, int64_t *out);

/* Diagnostics (tests): G waiters queued on addr, plus the thread waiters
 * counted on addr's bucket (which may wait on other addresses). */
int gfutex_nwaiters(uint32_t *addr);
/* Test hooks: buckets in the live table (it doubles when waited-on addresses
 * exceed twice that), and the bucket addr hashes to in it. */
unsigned long gfutex_test_buckets(void);
unsigned long gfutex_test_bucket(uint32_t *addr);
/* Test hook: called by a G's wait between its look at its P and its acquirem, if set. */
extern void (*gfutex_test_before_acquirem)(void);

/*
 * gfutex_wake for async-signal contexts (sem_post): wakes directly when
 * the calling thread is not inside the runtime, else hands the wake to
 * the waker thread (it may then be spurious, and it returns 0).
 */
int gfutex_wake_async(uint32_t *addr, int n);
/*
 * Make gp's current or next gfutex_wait return EINTR (dequeuing it if it is
 * parked). For cancellation points. Not async-signal-safe.
 */
struct g;
void gfutex_interrupt(struct g *gp);

/* The waker thread (sched_init): recorded for the first routed signal (helpers.c), or made
 * now. 0 or an errno value (said). */
int gfutex_init(void);

#endif
