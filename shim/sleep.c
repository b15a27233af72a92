/*
 * Sleeps park the G on a timer instead of blocking the M: nanosleep,
 * clock_nanosleep (CLOCK_REALTIME and CLOCK_MONOTONIC, relative and
 * absolute), usleep and sleep.
 *
 * A sleeping G waits on a private gfutex word with a deadline, so the
 * scheduler's timers wake it and its M runs other Gs meanwhile. Sleeps are
 * cancellation points (pthread_cancel interrupts the wait). Not yet as
 * natively: a signal does not cut a sleep short with EINTR (per-G signal
 * delivery is later work), so `rem` is only ever left untouched on success.
 * Other clocks (CPU-time clocks) go to glibc.
 */
#include <errno.h>
#include <time.h>
#include <unistd.h>

#include "sched/gfutex.h"
#include "shim/shim.h"
#include "shim/thread.h"

/* Park the calling G until deadline (monotonic ns). */
static void park_until(int64_t deadline)
{
    uint32_t word = 0;
    for (;;) {
        shim_testcancel();
        if (gfutex_wait(&word, 0, deadline) == ETIMEDOUT)
            return;
        if (nanotime() >= deadline)
            return;
    }
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
    if (!valid(req)) {
        errno = EINVAL;
        return -1;
    }
    park_until(rel_deadline(req));
    return 0;
}

GOSHIM_EXPORT int clock_nanosleep(clockid_t clock, int flags, const struct timespec *req,
                                  struct timespec *rem)
{
    if (!goshim_active() || (clock != CLOCK_REALTIME && clock != CLOCK_MONOTONIC))
        return REAL(clock_nanosleep)(clock, flags, req, rem);
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
    park_until(deadline);
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
    struct timespec ts = {s, 0};
    nanosleep(&ts, NULL);
    return 0;
}
