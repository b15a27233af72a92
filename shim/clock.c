/*
 * Thread CPU-time clocks measure the thread, not the OS thread under it:
 * clock_gettime and clock_getres of CLOCK_THREAD_CPUTIME_ID and of the
 * clock ids pthread_getcpuclockid gives (glibc computes them from the
 * thread's tid, here its TCB's fake tid, in the kernel's encoding of a
 * thread CPU clock), and getrusage(RUSAGE_THREAD). The time itself is the
 * G's, from sched/cputime.c (its essay says how it is measured and what it
 * costs); a clock id of a tid that is no thread of goshim's goes to the
 * kernel, as does every other clock, on a path of two compares.
 *
 * Not measured per thread: CPU-time timers (timer_create on such a
 * clock) and clock_nanosleep on them, which stay the kernel's (of the OS
 * thread, or EINVAL for a fake tid).
 */
#include <sys/resource.h>
#include <time.h>

#include "shim/shim.h"

/* The kernel's encoding of a thread CPU clock (CPUCLOCK_PERTHREAD | CPUCLOCK_SCHED). */
static inline bool thread_cpuclock(clockid_t clk)
{
    return clk < 0 && (clk & 7) == 6;
}

/* The G whose CPU-time clock clk is, or NULL (the kernel's then). */
static struct g *clock_g(clockid_t clk)
{
    if (clk == CLOCK_THREAD_CPUTIME_ID)
        return goshim_active() ? sched_self() : NULL;
    if (!thread_cpuclock(clk) || !goshim_active())
        return NULL;
    return cputime_g_by_tid(~(unsigned)clk >> 3);
}

GOSHIM_EXPORT int clock_gettime(clockid_t clk, struct timespec *ts)
{
    if (__builtin_expect(clk >= 0 && clk != CLOCK_THREAD_CPUTIME_ID, 1))
        return REAL(clock_gettime)(clk, ts);
    struct g *gp = clock_g(clk);
    if (!gp)
        return REAL(clock_gettime)(clk, ts);
    int64_t ns = cputime_of(gp);
    ts->tv_sec = ns / 1000000000;
    ts->tv_nsec = ns % 1000000000;
    return 0;
}

GOSHIM_EXPORT int clock_getres(clockid_t clk, struct timespec *res)
{
    if (clk >= 0 || !clock_g(clk))
        return REAL(clock_getres)(clk, res);
    if (res)
        *res = (struct timespec){0, 1}; /* as the kernel's thread CPU clocks */
    return 0;
}

/* The OS thread's usage, with the thread's CPU time split between user and system time in
 * the proportion the OS thread shows. */
GOSHIM_EXPORT int getrusage(int who, struct rusage *ru)
{
    int r = REAL(getrusage)(who, ru);
    struct g *gp;
    if (r != 0 || who != RUSAGE_THREAD || !(gp = clock_g(CLOCK_THREAD_CPUTIME_ID)))
        return r;
    int64_t total = cputime_of(gp);
    int64_t mu = (int64_t)ru->ru_utime.tv_sec * 1000000 + ru->ru_utime.tv_usec;
    int64_t ms = (int64_t)ru->ru_stime.tv_sec * 1000000 + ru->ru_stime.tv_usec;
    int64_t us = total / 1000;
    int64_t uu = mu + ms > 0 ? (int64_t)((double)us * (double)mu / (double)(mu + ms)) : us;
    ru->ru_utime = (struct timeval){uu / 1000000, uu % 1000000};
    ru->ru_stime = (struct timeval){(us - uu) / 1000000, (us - uu) % 1000000};
    return 0;
}
