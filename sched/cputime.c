/*
 * Per-G CPU-time clocks: what CLOCK_THREAD_CPUTIME_ID, the clock of
 * pthread_getcpuclockid and getrusage(RUSAGE_THREAD) measure for a thread
 * (shim/clock.c asks here). The kernel measures OS threads, our Ms, and an
 * M runs many Gs, so a G's CPU time is the sum of the slices it ran, each
 * charged when the G leaves its M (cputime_out, in switch_out_to and
 * goexit: the only hook on the switch path, in proc.c). A slice starts at
 * the M's mark: the previous switch-out on that M, or the moment the M
 * started or woke from idleness (cputime_m_ready), so the scheduler's own
 * work between two Gs (finding the next, at most ~20 us of spinning) is
 * charged to the next G, and an idle M's sleep to nobody.
 *
 * Two ways to measure a slice, because the exact one is dear:
 *
 *   - Until the program first asks for a thread CPU clock, a slice is the
 *     wall time it ran, in TSC ticks: one rdtsc per switch, no system call.
 *     Time the M was preempted by the kernel while running the G (another
 *     process took the CPU) counts, which the kernel's clock would not, and a
 *     G blocked in a system call outside the netpoller counts its blocked time
 *     too: an approximation, but a thread that computed reads about what it
 *     computed, one that slept reads ~0, and the value only grows. The ticks
 *     become nanoseconds at the first request, with the TSC rate measured
 *     against CLOCK_MONOTONIC since the runtime's start.
 *
 *   - From the first request on (cputime_on, never turned off), a slice
 *     is measured with the M's own thread CPU clock, which has no vDSO: one
 *     clock_gettime system call per switch-out, kept as the M's mark
 *     (cpu_mark); blocked time is no CPU time. An M that has no such mark
 *     yet (the flag was raised elsewhere) charges its current slice in
 *     ticks, then has one.
 *
 * A reader on another thread takes a G's counters under its cpu_seq
 * (odd while its M writes them) and adds the running slice if the G is on
 * an M: that M's CPU clock minus the mark (a clock_gettime of the M's
 * clock id, which works from any thread of the process).
 *
 * Rejected: reading the M's CPU clock at every switch from the start
 * (a system call per switch for programs that never ask, most of them); a
 * sampling thread (it costs wake-ups when nothing asks); perf's
 * self-monitoring task clock (needs perf_event_paranoid <= 2 and an mmap
 * page per M, and is unavailable in many containers).
 */
#include <string.h>
#include <sys/syscall.h>
#include <time.h>

#include "sched.h"
#include "throw.h"
#include "tls.h"

bool cputime_on;

/* The TSC's rate: sampled against CLOCK_MONOTONIC at start-up and at the first request. */
static struct {
    uint64_t tsc0;
    int64_t ns0;
    double ns_per_tick;
    struct runtime_lock lock;
} cal;

/* At the runtime's start, before any G runs: no slice was counted before. Not in a
 * constructor: the first clock_gettime of a process (the vDSO's pages, faulted in) cost
 * every process goshim was loaded into ~40 us, threads or not. */
void cputime_init(int64_t now)
{
    cal.ns0 = now;
    cal.tsc0 = __builtin_ia32_rdtsc();
}

static int64_t ticks_ns(uint64_t ticks)
{
    return (int64_t)((double)ticks * cal.ns_per_tick);
}

static int64_t clock_ns(clockid_t clk)
{
    struct timespec ts;
    if (rt_syscall(SYS_clock_gettime, clk, &ts, 0) != 0)
        return 0;
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

clockid_t m_cpuclock(void)
{
    /* The kernel's encoding of a thread's CPU clock (CPUCLOCK_SCHED of the thread). */
    int tid = (int)rt_syscall(SYS_gettid, 0, 0, 0);
    return (clockid_t)((~(unsigned)tid << 3) | 6);
}

/* Raise cputime_on: the rate of the TSC first, then the calling M's mark. */
static void cputime_enable(struct m *mp)
{
    runtime_lock(&cal.lock);
    if (!__atomic_load_n(&cputime_on, __ATOMIC_ACQUIRE)) {
        /* At least 1 ms of samples for a rate within a per mille (once per process). */
        int64_t ns;
        while ((ns = nanotime()) - cal.ns0 < 1000000)
            procyield(100);
        uint64_t tsc = __builtin_ia32_rdtsc();
        cal.ns_per_tick = tsc > cal.tsc0 ? (double)(ns - cal.ns0) / (double)(tsc - cal.tsc0) : 0;
        __atomic_store_n(&cputime_on, true, __ATOMIC_RELEASE);
    }
    runtime_unlock(&cal.lock);
    (void)mp;
}

void cputime_out_exact(struct m *mp, struct g *gp)
{
    int64_t now = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    __atomic_add_fetch(&gp->cpu_seq, 1, __ATOMIC_SEQ_CST);
    if (mp->cpu_mark)
        gp->cpu_ns += now - mp->cpu_mark;
    else if (mp->tsc_mark)
        gp->cpu_tsc += __builtin_ia32_rdtsc() - mp->tsc_mark;
    mp->cpu_mark = now;
    __atomic_add_fetch(&gp->cpu_seq, 1, __ATOMIC_SEQ_CST);
}

int64_t cputime_of(struct g *gp)
{
    struct m *self = acquirem(); /* the calling G stays on its M while it reads its clock */
    if (!__atomic_load_n(&cputime_on, __ATOMIC_ACQUIRE))
        cputime_enable(self);
    int64_t v;
    if (self && self->curg == gp) {
        if (!self->cpu_mark) { /* this M's first exact reading: the slice so far in ticks */
            __atomic_add_fetch(&gp->cpu_seq, 1, __ATOMIC_SEQ_CST);
            if (self->tsc_mark)
                gp->cpu_tsc += __builtin_ia32_rdtsc() - self->tsc_mark;
            self->cpu_mark = clock_ns(CLOCK_THREAD_CPUTIME_ID);
            __atomic_add_fetch(&gp->cpu_seq, 1, __ATOMIC_SEQ_CST);
        }
        v = gp->cpu_ns + ticks_ns(gp->cpu_tsc) + clock_ns(CLOCK_THREAD_CPUTIME_ID) - self->cpu_mark;
        releasem(self);
        return v;
    }
    releasem(self);
    for (;;) {
        uint32_t seq = __atomic_load_n(&gp->cpu_seq, __ATOMIC_SEQ_CST);
        if (seq & 1) {
            procyield(10);
            continue;
        }
        int64_t ns = gp->cpu_ns;
        uint64_t tsc = gp->cpu_tsc;
        uint32_t st = g_status(gp);
        struct m *mp = __atomic_load_n(&gp->m, __ATOMIC_ACQUIRE);
        int64_t live = 0;
        if ((st == Grunning || st == Gsyscall) && mp &&
            __atomic_load_n(&mp->curg, __ATOMIC_ACQUIRE) == gp) {
            int64_t mark = __atomic_load_n(&mp->cpu_mark, __ATOMIC_ACQUIRE);
            uint64_t tmark = __atomic_load_n(&mp->tsc_mark, __ATOMIC_ACQUIRE);
            if (mark)
                live = clock_ns(mp->cpuclock) - mark;
            else if (tmark)
                live = ticks_ns(__builtin_ia32_rdtsc() - tmark);
            if (live < 0)
                live = 0;
        }
        if (__atomic_load_n(&gp->cpu_seq, __ATOMIC_SEQ_CST) == seq)
            return ns + ticks_ns(tsc) + live;
    }
}

struct g *cputime_g_by_tid(unsigned tid)
{
    struct g *found = NULL;
    runtime_lock(&sched.allglock);
    for (struct g *gp = sched.allg; gp && !found; gp = gp->alllink) {
        uint32_t st = g_status(gp);
        if (st != Gdead && st != Gidle && gp->tcb && tls_tcb_tid(gp->tcb) == tid)
            found = gp;
    }
    runtime_unlock(&sched.allglock);
    return found;
}

/* ---- an M's thread, seen from another (sysmon) ---- */

int64_t m_thread_cputime(struct m *mp)
{
    struct timespec ts;
    if (mp->cpuclock == CLOCK_THREAD_CPUTIME_ID ||
        rt_syscall(SYS_clock_gettime, mp->cpuclock, (long)&ts, 0) != 0) /* the M's, not its G's */
        return -1;
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

bool m_thread_sleeping(struct m *mp)
{
    char path[64], buf[256];
    rt_snprint(path, sizeof path, "/proc/self/task/%d/stat", mp->tid);
    if (rt_read_text(path, buf, sizeof buf) < 0)
        return false;
    const char *rp = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
    return rp && rp[1] == ' ' && (rp[2] == 'S' || rp[2] == 'D');
}
