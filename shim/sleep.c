/*
 * Sleeps park the G on a timer instead of blocking the M: nanosleep,
 * clock_nanosleep (CLOCK_REALTIME and CLOCK_MONOTONIC, relative and
 * absolute), usleep and sleep.
 *
 * A sleeping G waits on a private gfutex word with a deadline, so the
 * scheduler's timers wake it and its M runs other Gs meanwhile; but on the
 * process's first OS thread, with nothing else to run, it sleeps in the
 * kernel (sleep_in_kernel), where signals to the process come. Sleeps are
 * cancellation points (pthread_cancel interrupts the wait). A signal sent
 * with pthread_kill cuts a sleep short as natively: the handler runs, the
 * call returns EINTR and the time left (never restarted, as Linux); sleep
 * returns the whole seconds left, truncated as glibc's. Other clocks
 * (CPU-time clocks) go to glibc.
 */
#include <errno.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "shim/cancel.h"
#include "shim/shim.h"
#include "shim/sigdeliver.h"
#include "shim/sigroute.h"
#include "shim/thread.h"

/*
 * A sleep of the thread on the process's first OS thread (the one whose tid is the pid:
 * M0, or a fork child's forking M) while nothing else is runnable and a P is idle is the
 * kernel's: a futex wait until the deadline, the P kept (sysmon retakes it if work comes,
 * as from any call). The kernel offers a signal sent to the process to that OS thread
 * first, so a timer's signal interrupts the sleep and its handler runs there at once, as
 * natively. A parked sleeper had it routed by the M that took it, the thread readied, run
 * and rung, the FS base written twice around the handler: a POSIX timer's signals every
 * 50 us reached the handler at 0.7x the kernel's rate on a host without FSGSBASE. Another
 * OS thread keeps parking: a sleeper in the kernel there would have the first one's
 * signals rung over to it, two wake-ups for one. A signal of goshim's own interrupts the
 * wait without a handler of the program's: it waits again. A cancel wakes it
 * (shim_sleep_wake): the rest of the sleep parks, where the cancel is acted on. Returns
 * whether it slept, with *res park_until's result.
 */
static bool sleep_in_kernel(int64_t deadline, int *res)
{
    struct sthread *st = sthread_self();
    if (!st || sched_chaos || sched_mtid() != sig_self_pid)
        return false;
    uint32_t ran = shim_handlers_ran();
    __atomic_store_n(&st->ksleep, KSLEEP_ASLEEP, __ATOMIC_SEQ_CST);
    if (shim_cancel_pending() || !entersyscall_idle()) {
        __atomic_store_n(&st->ksleep, KSLEEP_NONE, __ATOMIC_SEQ_CST);
        return false;
    }
    struct timespec at = {deadline / 1000000000, deadline % 1000000000};
    long r;
    do
        r = rt_syscall6(SYS_futex, (long)&st->ksleep, FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG,
                        KSLEEP_ASLEEP, (long)&at, 0, FUTEX_BITSET_MATCH_ANY);
    while (r == -EINTR && shim_handlers_ran() == ran);
    exitsyscall();
    __atomic_store_n(&st->ksleep, KSLEEP_NONE, __ATOMIC_SEQ_CST);
    *res = r == -EINTR ? EINTR : 0;
    return r == -EINTR || r == -ETIMEDOUT || nanotime() >= deadline;
}

void shim_sleep_wake(struct sthread *st)
{
    if (__atomic_exchange_n(&st->ksleep, KSLEEP_WOKEN, __ATOMIC_SEQ_CST) == KSLEEP_ASLEEP)
        futexwakeup(&st->ksleep, 1);
}

/* Park the calling G until deadline (monotonic ns). EINTR when a signal
 * handler ran meanwhile (sleeps are never restarted), else 0. */
static int park_until(int64_t deadline)
{
    uint32_t word = 0;
    int res;
    shim_deliver_signals();
    shim_testcancel();
    if (sleep_in_kernel(deadline, &res))
        return res;
    for (;;) {
        shim_testcancel();
        enum shim_wait w = shim_wait_word(WAIT_SLEEP, NULL, &word, 0, deadline, 0);
        if (w == SHIM_WAIT_TIMEDOUT || nanotime() >= deadline)
            return 0; /* a signal sent as it woke: handled, the sleep is over all the same */
        if (w == SHIM_WAIT_RESTARTED || w == SHIM_WAIT_INTERRUPTED)
            return EINTR;
    }
}

/* The time left until deadline, for rem. */
static void time_left(int64_t deadline, struct timespec *rem)
{
    int64_t left = deadline - nanotime();
    if (left < 0)
        left = 0;
    rem->tv_sec = left / 1000000000;
    rem->tv_nsec = left % 1000000000;
}

static bool valid(const struct timespec *ts)
{
    return ts->tv_sec >= 0 && ts->tv_nsec >= 0 && ts->tv_nsec < 1000000000;
}

static int64_t rel_deadline(const struct timespec *req)
{
    int64_t now = nanotime();
    if (req->tv_sec > (INT64_MAX - now) / 1000000000 - 1)
        return INT64_MAX; /* as good as forever */
    return now + (int64_t)req->tv_sec * 1000000000 + req->tv_nsec;
}

GOSHIM_EXPORT int nanosleep(const struct timespec *req, struct timespec *rem)
{
    if (!goshim_active())
        return REAL(nanosleep)(req, rem);
    if (sched_lone())
        return LONE_CALL(REAL(nanosleep)(req, rem));
    if (!valid(req)) {
        errno = EINVAL;
        return -1;
    }
    int64_t deadline = rel_deadline(req);
    if (park_until(deadline) == EINTR) {
        if (rem)
            time_left(deadline, rem);
        errno = EINTR;
        return -1;
    }
    return 0;
}

GOSHIM_EXPORT int clock_nanosleep(clockid_t clock, int flags, const struct timespec *req,
                                  struct timespec *rem)
{
    if (!goshim_active() || (clock != CLOCK_REALTIME && clock != CLOCK_MONOTONIC))
        return REAL(clock_nanosleep)(clock, flags, req, rem);
    if (sched_lone())
        return LONE_CALL(REAL(clock_nanosleep)(clock, flags, req, rem));
    if (!valid(req))
        return EINVAL;
    int64_t deadline;
    if (flags & TIMER_ABSTIME) {
        int err = gfutex_deadline(clock, req, &deadline);
        if (err)
            return err;
        if (deadline == INT64_MAX)
            deadline = INT64_MAX - 1;
    } else {
        deadline = rel_deadline(req);
    }
    if (park_until(deadline) == EINTR) {
        if (rem && !(flags & TIMER_ABSTIME))
            time_left(deadline, rem);
        return EINTR;
    }
    return 0;
}

GOSHIM_EXPORT int usleep(useconds_t us)
{
    if (!goshim_active())
        return REAL(usleep)(us);
    struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000};
    return nanosleep(&ts, NULL);
}

GOSHIM_EXPORT unsigned sleep(unsigned s)
{
    if (!goshim_active())
        return REAL(sleep)(s);
    struct timespec ts = {s, 0}, rem = {0, 0};
    /* Interrupted: the whole seconds left, the fraction dropped, as glibc's sleep returns its
     * nanosleep's remainder's tv_sec (1.7 s left is 1, 0.7 s is 0). */
    if (nanosleep(&ts, &rem) != 0)
        return (unsigned)rem.tv_sec;
    return 0;
}
