/*
 * sysmon: the runtime's own thread, without a P (docs/design.md,
 * rule 6; Go's sysmon in proc.go). Each round it
 *   - retakes the P of an M that sits in a system call (entersyscall
 *     leaves the P attached, in state Psyscall) since its previous round,
 *     when work waits for that P or the call has lasted 10 ms: the P goes
 *     to another M (handoffp) and the caller reacquires one on return (a
 *     P kept by a blocking call while nothing else holds one is left to
 *     wakep: sysmon sleeps then, calls_only);
 *   - polls the network when nobody has for 10 ms, so Gs readied by epoll
 *     are not stranded while every M runs code;
 *   - asks a G that has run its slice without blocking to yield
 *     (preempt.c), again every round until it does; if it is refused
 *     three times (its stack is in libc), or its M sits blocked in the
 *     kernel outside goshim for two rounds, its P is handed to another M
 *     where the G stands (syscall.c, sched_handoff_self);
 *   - prints GOSHIM_SCHEDTRACE lines on time.
 * It sleeps 20 us after a round that retook a P, doubling from the next
 * idle round up to 10 ms (a poll that readied Gs is no reason to look again
 * in 20 us). Go stays at 20 us for 50 idle rounds after a retake, and begins
 * so: its calls all hand their P off through sysmon's retake, where
 * goshim's calls that block as a rule hand it off themselves
 * (entersyscallblock) and a retake is of a file call that slept or of a G
 * handed off where it stood. Go's 50 looks in the millisecond after each
 * served nobody here, each a wake-up that costs some 12-20 us of CPU on a
 * virtual machine, taken from the program's threads when both CPUs work
 * and keeping their calls from their CPUs the longer (rg -j4 at 2 Ps: 149
 * of 189 rounds in a run were those after 3 retakes). A burst of sleeping
 * calls still meets a sysmon at 20-80 us: each retake starts it over.
 *
 * The slice is the kernel's by default (docs/design.md, rule
 * 6): C programs were written for EEVDF, which lets a task run its
 * base slice (1.4 ms on 2 CPUs) and then runs another *if one is
 * runnable*; Go's fixed 10 ms lets threads that spin before they block
 * (redis's io threads) keep a waiting main thread off its P for whole
 * slices. So a running G is asked to yield once it has run the base slice
 * while another G waits for its P: in its runnext or ring, in the global
 * queue (where Gs woken from system calls, by sysmon's netpoll or off any
 * P land), or behind a due timer, which only a scheduling M runs. With
 * nobody waiting it runs on, unpreempted (a lone computation pays
 * nothing).
 *
 * Like the kernel, it tells two kinds of waiter apart. Gs that wait only
 * because they were preempted while they computed (spinners, counted in
 * sched.npreemptq) take turns at the kernel's tick, as EEVDF rotates
 * tasks that all compute (it checks the running task's deadline at the
 * tick; hrtick is off by default): each M's own CPU-time slice timer
 * does it (preempt.c), without sysmon. Every other waiter - a G woken from
 * a sleep, by I/O or a lock's release, a new thread, a G that made calls
 * before it was preempted (redis's io threads, which busy-wait in
 * between) - gets the P after the base slice, and that is sysmon's work.
 * Why not sysmon for both: each of its wake-ups and each cross-CPU signal
 * costs CPU (timer interrupts and IPIs, which exit to the hypervisor in a
 * virtual machine), several times per slice, paid by computing threads
 * that no one waits behind. A CPU-time timer fires inside the tick the
 * kernel takes anyway and signals the thread it interrupted, on its own
 * CPU.
 *
 * So sysmon looks when a P next needs it, no more: when the running G
 * reaches its slice while a G sysmon serves waits (each P stamps when its
 * G began, while sysmon sleeps past a slice and cannot see it), every
 * quarter slice once it is past it and has been asked, and, while Gs wait
 * only for the timers, when a rotation would be late (an M asleep in a
 * call goshim does not wrap, a G that refuses). Otherwise it sleeps up to
 * 10 ms, bounded by the next timer and, with network waiters, by a slice
 * (it polls when nobody has). A G that begins to wait while every P runs
 * (created, woken, back from a system call without a P, a new earliest
 * timer) kicks it out of such a sleep (sysmon_kick: one load when it is
 * not in one) if it would not look within a slice anyway, and for 50 ms
 * after a kick its sleeps stay within a slice, where new waiters need no
 * kick (else a create+join loop would pay a futex wake per thread). A
 * fixed GOSHIM_PREEMPT keeps Go's rule: preempt after the slice whether
 * or not anyone waits.
 *
 * It runs outside any G, so what it readies goes to the global run queue
 * and wakes an idle P (goready from a non-G).
 */
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>

#include "netpoll.h"
#include "preempt.h"
#include "sched.h"
#include "throw.h"
#include "timer.h"

enum {
    SYSMON_MIN_NS = 20000,
    SYSMON_MAX_NS = 10000000,
    SYSMON_WATCH_NS = 50000000, /* after a kick, 50 ms of sleeps within a slice */
    FORCE_POLL_NS = 10000000,
    SYSCALL_RETAKE_NS = 10000000,
    SYSMON_LONE_NS = 1000000000,  /* the only thread holds its P: nothing to serve */
    SYSMON_QUIET_NS = 1000000000, /* only blocking calls hold Ps (calls_only) */
};

static struct {
    struct note note;
    int64_t trace_ns;
    bool detailed;
    int64_t lasttrace;
    bool running;
    uint64_t nretake;    /* Ps retaken from system calls; atomic */
    uint64_t nrounds;    /* atomic */
    int64_t nextlook;    /* the last round's: when a P next needs a look (INT64_MAX: none) */
    int64_t lastround;   /* when the previous round looked at the Ps */
    int64_t watch_until; /* after a kick: sleeps stay within a slice until then */
    uint32_t lone;       /* atomic: in the single-thread sleep (sysmon_lone_parked) */
    bool deferred;       /* atomic: to start when a fork child needs it (sched_helper_defer) */
} sm;

/* A P needs sysmon's look at when (retake). */
static void look_at(int64_t when)
{
    if (when < sm.nextlook)
        sm.nextlook = when;
}

/* The kernel's tick (CLOCK_MONOTONIC_COARSE's resolution: 4 ms at
 * Debian's CONFIG_HZ=250), where it rotates tasks that all compute, and
 * where the Ms' CPU-time slice timers fire. */
static int64_t tick_ns(void)
{
    static int64_t tick;
    if (!tick) {
        struct timespec ts;
        int64_t t = 4000000;
        if (rt_syscall(SYS_clock_getres, CLOCK_MONOTONIC_COARSE, (long)&ts, 0) == 0 &&
            ts.tv_sec == 0 && ts.tv_nsec > 0)
            t = ts.tv_nsec;
        tick = t;
    }
    return tick;
}

/* What sysmon saw of a P at its last round; sysmon only. */
struct ptick {
    uint32_t syscalltick;
    int64_t syscallwhen;
    int64_t callcpu; /* its call's M's CPU time when the call was first seen (-1: none) */
    uint32_t schedtick;
    int64_t schedwhen;
    uint64_t nschedule;     /* the P's switch count then, */
    int64_t switchwhen;     /* and when its G was switched in (its own run, not inherited) */
    int64_t armed;          /* when its M's CPU time was noted for the cut (0: not yet) */
    struct m *armm;         /* the M it was noted of */
    bool cut;               /* its slice was cut short for a waiting G (counted once) */
    int64_t cpu0;           /* its M's CPU time then */
    int blocked;            /* rounds past the slice its M spent blocked in the kernel */
    int refused;            /* rounds in which its G refused a preemption (unsafe point) */
    struct m *refm;         /* the M whose refusals ... */
    uint32_t refusals_seen; /* ... were last counted, and how many there were */
    uint32_t calltick;      /* its syscalltick at the last cut: its G's wrapped calls */
    bool gate_asked;        /* the cut asked its G at its next call (no signal) */
    uint8_t callspan;       /* its call looks a quarter slice << callspan apart */
};

/* Whether mp's G refused a preemption since the last look (a request that
 * has not been answered yet, e.g. on a busy machine, is no refusal). */
static int refused_again(struct m *mp, struct ptick *pt)
{
    uint32_t r = __atomic_load_n(&mp->preempt_refusals, __ATOMIC_RELAXED);
    bool again = pt->refm == mp && r != pt->refusals_seen;
    pt->refm = mp;
    pt->refusals_seen = r;
    /* Refused in generated code, which no walk passes: count it as the
     * three refusals that hand the P off, so a JIT loop never holds a P
     * for more than about a slice. */
    if (again && __atomic_exchange_n(&mp->preempt_nowalk, 0, __ATOMIC_RELAXED))
        return 3;
    return again;
}

/* From now on, mp's CPU time (cpu now) tells whether the G it runs computes. */
static void arm(struct ptick *pt, struct m *mp, int64_t now, int64_t cpu)
{
    pt->armed = now;
    pt->armm = mp;
    pt->cpu0 = cpu;
}

/*
 * pp's G has run its slice while another waits: ask it to yield - unless
 * its M does not compute. The round before the cut noted the M's CPU time
 * (the arm, retake_running); from the cut on sysmon signals only if the M
 * used at least half the time since (a hog), again every round until the
 * G yields. An M
 * that used less either sleeps in the kernel, in a call goshim does not
 * wrap (glibc's own futex waits, raw system calls), where a signal would
 * cut the call short with EINTR - after two such rounds its P is handed
 * off without a signal - or runs only now and then between such calls, or
 * gets little CPU on a loaded machine: it is left to its slice timer,
 * whose signal comes only while it runs (preempt.c).
 */
static void over_slice(struct p *pp, struct ptick *pt, int64_t now)
{
    struct m *mp = __atomic_load_n(&pp->m, __ATOMIC_ACQUIRE);
    if (!mp)
        return;
    int64_t cpu = m_thread_cputime(mp);
    if (cpu < 0) {
        pt->refused += refused_again(mp, pt);
        preempt_request(pp, pt->refused > 2 && preempt_handoff_on());
        return;
    }
    bool fresh = pt->armed == 0 || pt->armm != mp;
    if (fresh)
        arm(pt, mp, now, cpu);
    /* Under chaos, first sight only arms: a replay needs switches that the program's own
     * progress decides, and the wall time a loaded machine takes from it is not that (an
     * OS thread descheduled between two of prog_chaos_race's chaos points was preempted on
     * sight, and the seed's failure did not replay). The next round judges by CPU time. */
    if (fresh && sched_chaos)
        return;
    /* Seen past the slice at the first look (sysmon slept, or the wait
     * began late in a long run): ask at once unless its M sleeps in the
     * kernel; else by its CPU use since. */
    bool hog = fresh ? !m_thread_sleeping(mp) : 2 * (cpu - pt->cpu0) >= now - pt->armed;
    bool asleep = !hog && (fresh || m_thread_sleeping(mp));
    pt->blocked = asleep ? pt->blocked + 1 : 0;
    if (hog)
        pt->refused += refused_again(mp, pt);
    /* Stuck: blocked in the kernel outside goshim for two rounds past the
     * slice, or refused a preemption in more than two rounds (it stays in libc):
     * the P goes to another M, the G keeps its OS thread. */
    if (pt->blocked >= 2 && preempt_handoff_on()) {
        /* Asleep in the kernel outside goshim: hand the P off from here,
         * without a signal that would interrupt the call. */
        if (sched_handoff_asleep(mp, m_thread_sleeping))
            preempt_count_handoff();
    } else if (pt->refused > 2 && hog && preempt_handoff_on()) {
        preempt_request(pp, true); /* refused again and again: hand off where it stands */
    } else if (hog) {
        /* A G that made wrapped calls since the last look is asked at its next one, a safe
         * point without a signal or walk (its signal lands in libc or the kernel, refused);
         * the signal comes at the next look if it has not yielded by then. */
        uint32_t calls = __atomic_load_n(&pp->syscalltick, __ATOMIC_RELAXED);
        pt->gate_asked = calls != pt->calltick && !pt->gate_asked;
        pt->calltick = calls;
        if (pt->gate_asked)
            preempt_ask_at_gate(pp);
        else
            preempt_request(pp, false);
    }
    pt->armed = now;
    pt->cpu0 = cpu;
}

/*
 * Only computing Gs wait for pp, and its M's slice timer has not rotated
 * its G for two ticks. sysmon steps in only where the timer cannot: the M
 * sleeps in the kernel outside goshim (its CPU clock stands still; the P
 * is handed off without a signal, which would cut the call short with
 * EINTR), or its G refused the timer's preemptions in more than two
 * rounds (it stays in libc: the P goes where the G stands). A G that
 * runs only now and then, between calls the kernel blocks, is left to its
 * timer: it uses its P little, and a signal could land in such a call.
 */
static void rotation_stuck(struct p *pp, struct ptick *pt)
{
    struct m *mp = __atomic_load_n(&pp->m, __ATOMIC_ACQUIRE);
    if (!mp || !preempt_handoff_on())
        return;
    if (m_thread_sleeping(mp)) {
        if (++pt->blocked >= 2 && sched_handoff_asleep(mp, m_thread_sleeping))
            preempt_count_handoff();
        return;
    }
    pt->blocked = 0;
    pt->refused += refused_again(mp, pt);
    if (pt->refused > 2)
        preempt_request(pp, true);
}

static struct ptick pticks[MAX_PROCS] GOSHIM_LARGE;

/* Whether a G waits for pp, a running P: in its runnext or ring, or
 * anywhere (global: the global queue holds Gs, or a timer is due). */
static bool others_wait(struct p *pp, bool global)
{
    return global || !runqempty(pp);
}

/* What one round of retake knows about every P. */
struct round {
    int64_t now, slice, rotate;
    bool policy; /* the kernel's: preempt only while another G waits */
    bool global; /* Gs wait for any P: the global queue, or a timer is due */
    bool woken;  /* some waiter is not a preempted computing G: sysmon times slices */
    int64_t cut; /* a running G's time after which a waiter gets its P */
};

/* The round's facts: who waits, and whether the slice timers serve them all. */
static struct round round_begin(int64_t now)
{
    struct round r = {.now = now, .slice = preempt_slice(), .policy = preempt_when_waiting()};
    int64_t tnext = r.policy ? timers_next() : -1;
    int32_t queued = __atomic_load_n(&sched.runqsize, __ATOMIC_RELAXED);
    bool due = tnext >= 0 && tnext <= now;
    r.global = queued > 0 || due;
    /* Like the kernel, tell two kinds of waiter apart: a G woken from a
     * sleep, by I/O or by a lock's release gets a P after the base slice
     * (sysmon asks), while Gs that only wait because they were preempted
     * (they compute, as the running ones do) take turns at the kernel's
     * tick, which the Ms' own slice timers keep (preempt.c): sysmon only
     * steps in for a P whose G the timer did not rotate (refused, blocked
     * in the kernel outside goshim) or whose M has no timer (the kernel
     * refused one: retake_running times its slices). */
    r.woken = !r.policy || due || sched_chaos;
    bool woken_waits = due;
    if (r.policy && !due) {
        for (int32_t i = 0; i < sched.gomaxprocs; i++)
            queued += (int32_t)runqlen(sched.allp[i]) +
                      (__atomic_load_n(&sched.allp[i]->runnext, __ATOMIC_RELAXED) != NULL);
        woken_waits = queued > __atomic_load_n(&sched.npreemptq, __ATOMIC_RELAXED);
        r.woken = r.woken || woken_waits;
    }
    /* A G woken from a sleep is owed the CPU, as EEVDF's lag says of a thread that slept
     * while others ran: the kernel lets it preempt a thread that has run a while without
     * waiting for that one's whole slice (natively a sleeper beside a spinner runs 0.08
     * ms after its wake-up; a redis server's event loop beside its spinning I/O threads
     * waited a slice, 1.4 ms, per request here). preempt_wake_slice: half the base slice. */
    r.cut = woken_waits && !sched_chaos ? preempt_wake_slice() : r.slice;
    r.rotate = 2 * tick_ns() + r.slice; /* a timer should have rotated it by then */
    return r;
}

/* A running P: a new G since the last round starts its record afresh;
 * then, if another G waits, its slice is timed (by its M's slice timer,
 * or by sysmon, which asks it to yield once past the slice, again every
 * quarter slice until it does). */
/* When a P's G began, seen at a round that found it new: the P's own
 * stamp if it was taken since the last round (while sysmon slept long),
 * else now. */
static int64_t began_at(const int64_t *stamp, int64_t now)
{
    int64_t began = __atomic_load_n(stamp, __ATOMIC_RELAXED);
    return began > sm.lastround && began <= now ? began : now;
}

/* A new slice on pp since the last round (running or in a call): its record afresh. */
static void note_slice(struct p *pp, struct ptick *pt, const struct round *r)
{
    uint32_t t = __atomic_load_n(&pp->schedtick, __ATOMIC_ACQUIRE);
    if (pt->schedtick != t) {
        pt->schedtick = t;
        pt->schedwhen = began_at(&pp->schedwhen, r->now);
        pt->armed = 0;
        pt->blocked = 0;
        pt->refused = 0;
        pt->refm = NULL;
        pt->cut = false;
        pt->gate_asked = false;
        pt->calltick = __atomic_load_n(&pp->syscalltick, __ATOMIC_RELAXED);
    }
}

/*
 * The cut for mp's G while a woken G waits. Only behind a G whose last run ended in a
 * preemption (it computes or spins until cut: redis's io threads and event loop, spinning
 * for each other; rg's searchers) does the woken G wait no more than half the one-CPU base
 * slice; a G whose last run ended in a wait of its own keeps the whole slice, as a task
 * the kernel has just picked keeps its protected slice (RUN_TO_PARITY): it will most likely
 * wait again before that ends (mariadb's query threads, cut mid-query for each request
 * that came, were asked to yield twice as often). A hint, read with no happens-before from
 * the M that switched the G in (execute is not instrumented): stale, it times one cut.
 */
GOSHIM_NO_TSAN static int64_t cut_for(const struct round *r, struct m *mp)
{
    if (r->cut >= r->slice || !mp)
        return r->cut;
    struct g *gp = __atomic_load_n(&mp->curg, __ATOMIC_ACQUIRE); /* a struct g is never freed */
    return gp && __atomic_load_n(&gp->ran_to_cut, __ATOMIC_RELAXED) ? r->cut : r->slice;
}

static void retake_running(struct p *pp, struct ptick *pt, const struct round *r)
{
    uint64_t ns = __atomic_load_n(&pp->nschedule, __ATOMIC_ACQUIRE);
    if (pt->nschedule != ns) {
        pt->nschedule = ns;
        pt->switchwhen = began_at(&pp->switchwhen, r->now);
    }
    note_slice(pp, pt, r);
    /* As Go, a G switched in from runnext inherits the slice, so that a
     * pair handing the P to each other cannot keep the Gs queued behind
     * runnext waiting. But a waiter in runnext alone is the G that runs
     * as soon as this one blocks: as under the kernel, where a thread
     * that blocks and wakes starts afresh, this G is cut only once it has
     * run a slice itself (else a create+join loop at P=1 is asked to
     * yield again and again for nothing), counted from its switch
     * or, for an inherited one (not stamped), from the round that first
     * saw it: at most a slice late. */
    int64_t start = pt->schedwhen;
    if (r->policy && !r->global && runqlen(pp) == 0)
        start = pt->switchwhen;
    struct m *mp = __atomic_load_n(&pp->m, __ATOMIC_ACQUIRE);
    int64_t cut = cut_for(r, mp);
    if (r->policy && !others_wait(pp, r->global)) {
        pt->armed = 0; /* nobody waits for this P: its G runs on */
    } else if (!r->woken && mp && preempt_m_timed(mp)) { /* its slice timer rotates it */
        if (r->now - pt->schedwhen >= r->rotate) {
            rotation_stuck(pp, pt);
            look_at(r->now + tick_ns());
        } else {
            look_at(pt->schedwhen + r->rotate);
        }
    } else if (r->now - start >= cut) {
        if (r->policy && !pt->cut) {
            pt->cut = true;
            preempt_count_cut(cut < r->slice);
        }
        over_slice(pp, pt, r->now);
        look_at(r->now + r->slice / 4); /* again until it yields */
    } else {
        /* A G waits: note the M's CPU time now, so that at the cut its use since tells
         * a computing G from one blocked in the kernel (over_slice) - a clock read here
         * instead of a /proc read there (14 us, at every slice that ends with a waiter). */
        int64_t cpu = pt->armed == 0 && mp && r->policy ? m_thread_cputime(mp) : -1;
        if (cpu >= 0)
            arm(pt, mp, r->now, cpu);
        look_at(start + cut);
    }
}

/*
 * A call that has lasted a round computes in the kernel, as a read from the page cache or
 * an open's path walk do, if its M used at least half the time since the call was first
 * seen, or is not asleep (it runs, or waits for a CPU on a busy machine). It holds its CPU
 * then, as natively, and keeps its P until the call itself has lasted a slice; a G past
 * its cut was asked to yield when the call returns (retake_syscall). Handed off at once,
 * the P went to another M that competed with the call for the same CPUs (sysmon's own
 * wake-ups among what kept the caller from its CPU), the G came back to no P, and sysmon,
 * having retaken, looked every 20 us for a millisecond: rg at 2 Ps, 17 hand-offs and 389
 * rounds in a bad run, each hand-off of a call that computed. A call that sleeps uses no
 * CPU: its P goes at once, as does the P of a G that runs on without it (pless: handed off
 * where it stood, refusing preemptions or asleep outside goshim), which no call holds.
 */
static bool call_computes(const struct ptick *pt, struct m *mp, const struct round *r)
{
    if (!mp || __atomic_load_n(&mp->pless, __ATOMIC_ACQUIRE) ||
        r->now - pt->syscallwhen >= r->slice)
        return false;
    int64_t cpu = pt->callcpu < 0 ? -1 : m_thread_cputime(mp);
    if (cpu >= 0 && 2 * (cpu - pt->callcpu) >= r->now - pt->syscallwhen)
        return true;
    return !m_thread_sleeping(mp);
}

/*
 * The next look at pp, in a call while Gs wait: a quarter slice after a look that found
 * the call it saw before still in progress, twice that after one that found a new call (the
 * last one ended between the looks), four times (a slice) after two; never past its G's
 * cut. A call that sleeps is retaken at most a slice and a round after it began: a quarter
 * slice where calls last. rg -j4 over 6,000 files, whose every call returns within
 * microseconds, met a look each quarter slice its G spent in calls while another waited:
 * 14-84 of its 45-110 rounds a run, none handing anything off.
 */
static void call_look(struct ptick *pt, bool new_call, const struct round *r)
{
    if (!new_call)
        pt->callspan = 0;
    else if (pt->callspan < 2)
        pt->callspan++;
    int64_t at = r->now + ((r->slice / 4) << pt->callspan);
    int64_t cut = pt->schedwhen + r->cut;
    look_at(cut > r->now && cut < at ? cut : at);
}

/* A P whose G blocks in a system call: hand it off (true) if the call has
 * lasted a whole round and the P is wanted (or 10 ms have passed). */
static bool retake_syscall(struct p *pp, struct ptick *pt, const struct round *r)
{
    uint32_t t = __atomic_load_n(&pp->syscalltick, __ATOMIC_ACQUIRE);
    struct m *mp = __atomic_load_n(&pp->callm, __ATOMIC_RELAXED);
    bool wanted = others_wait(pp, r->global);
    note_slice(pp, pt, r);
    if (wanted)
        call_look(pt, pt->syscalltick != t, r); /* it may be retaken for them */
    /* Its G has run its slice, its calls included, while others wait: it yields at its
     * next wrapped call, as at a tick. A G whose short calls keep its P in one at every
     * round is seldom seen running, where over_slice would ask it: it kept its P for good
     * (prog_file_reads at one P: its spinner ran once the reader was done). */
    if (wanted && mp && r->now - pt->schedwhen >= r->cut && !pt->gate_asked) {
        pt->gate_asked = true;
        if (r->policy && !pt->cut) {
            pt->cut = true;
            preempt_count_cut(r->cut < r->slice);
        }
        preempt_ask_call_at_gate(pp, mp);
    }
    if (pt->syscalltick != t) { /* a new call since last round: give it a round */
        pt->syscalltick = t;
        pt->syscallwhen = r->now;
        pt->callcpu = mp && wanted ? m_thread_cputime(mp) : -1;
        return false;
    }
    if (sched_lone())
        return false; /* the only thread: nothing could run on the P meanwhile */
    /* No hurry if nothing waits for this P and other Ms look for work
     * or Ps are idle anyway; but not forever (10 ms). */
    if (runqempty(pp) &&
        __atomic_load_n(&sched.nmspinning, __ATOMIC_RELAXED) +
                __atomic_load_n(&sched.npidle, __ATOMIC_RELAXED) >
            0 &&
        __atomic_load_n(&sched.runqsize, __ATOMIC_RELAXED) == 0 &&
        r->now - pt->syscallwhen < SYSCALL_RETAKE_NS)
        return false;
    if (call_computes(pt, mp, r))
        return false;
    uint32_t st = Psyscall;
    if (!__atomic_compare_exchange_n(&pp->status, &st, Pidle, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        return false; /* its M came back meanwhile */
    p_tick_call(pp);
    __atomic_add_fetch(&sm.nretake, 1, __ATOMIC_RELAXED);
    handoffp(pp);
    return true;
}

/* Retake Ps blocked in system calls; ask Gs that ran past their slice to
 * yield (preempt.c; again every round until they do). Returns how many
 * Ps were retaken. */
static int retake(int64_t now)
{
    int n = 0;
    struct round r = round_begin(now);
    sm.nextlook = INT64_MAX;
    for (int32_t i = 0; i < sched.gomaxprocs; i++) {
        struct p *pp = sched.allp[i];
        uint32_t status = __atomic_load_n(&pp->status, __ATOMIC_ACQUIRE);
        if (status == Prunning && sched_chaos && sched.gomaxprocs > 1 && chaos_rand() % 8 == 0)
            preempt_request(pp, false); /* chaos: an extra preemption at its next safe point */
        if (status == Prunning && r.slice > 0)
            retake_running(pp, &pticks[i], &r);
        else if (status == Psyscall && retake_syscall(pp, &pticks[i], &r))
            n++;
    }
    return n;
}

/*
 * Every P idle or kept by a blocking call (keep_idle_p), at least one kept, and nothing
 * queued: no G runs, so none is preempted; work that comes takes a kept P in wakep
 * (take_kept_p), without sysmon's retake; and with a G in a call there is no deadlock to
 * report. Such a process sleeps in the kernel (a parent in waitpid while its threads wait
 * in pthread_cond_wait): as for a lone thread, sysmon's rounds would serve nobody, and
 * after a fork each would copy the pages it writes, with the shootdowns of their old
 * mappings on the CPUs this process ran on. Not with a fixed slice (no kicks), a trace,
 * or thread creations to retry (m_retry).
 */
static bool calls_only(void)
{
    if (!preempt_when_waiting() || sm.trace_ns > 0 ||
        __atomic_load_n(&sched.runqsize, __ATOMIC_RELAXED) > 0 ||
        __atomic_load_n(&sched.nmthreadfail, __ATOMIC_RELAXED) > 0)
        return false;
    bool kept = false;
    for (int32_t i = 0; i < sched.gomaxprocs; i++) {
        struct p *pp = sched.allp[i];
        uint32_t st = __atomic_load_n(&pp->status, __ATOMIC_ACQUIRE);
        if (st == Pidle)
            continue;
        if (st != Psyscall || !runqempty(pp) ||
            __atomic_load_n(&pp->kepttick, __ATOMIC_ACQUIRE) !=
                __atomic_load_n(&pp->syscalltick, __ATOMIC_ACQUIRE))
            return false;
        kept = true;
    }
    return kept;
}

/*
 * How long sysmon may sleep, at most delay (its idle back-off), or up to
 * SYSMON_QUIET_NS while only blocking calls hold Ps (calls_only). While Gs
 * run: until a P next needs a look (retake: a G that sysmon serves waits
 * and the running one reaches its slice then; a G past it, again every
 * quarter slice; Gs that the Ms' slice timers rotate, when a rotation
 * would be late); else as when every P is idle, but never past the next
 * timer, nor past a slice with network waiters nobody polls. A G that
 * begins to wait wakes it early (sysmon_kick).
 */
static int64_t sysmon_delay(int64_t delay)
{
    int64_t slice = preempt_slice();
    bool running = __atomic_load_n(&sched.npidle, __ATOMIC_RELAXED) < sched.gomaxprocs;
    if (slice <= 0 || !running)
        return delay;
    int64_t now = nanotime();
    int64_t look = SYSMON_MAX_NS;
    if (calls_only())
        delay = look = SYSMON_QUIET_NS; /* a kick, a timer or the network's bound is sooner */
    if (sm.nextlook - now < look)
        look = sm.nextlook - now;
    if (preempt_when_waiting()) {
        int64_t tnext = timers_next();
        if (tnext > now && tnext - now < look)
            look = tnext - now;
        if (netpoll_anywaiters() && slice < look)
            look = slice;
    }
    /* Kicked lately: Gs keep beginning to wait (a create+join loop does
     * at every create), so stay within a slice for a while,
     * where a new waiter needs no kick (sysmon_kick_slow): one wake-up a
     * slice instead of a futex wake on every such waiter's path. */
    if (now < sm.watch_until && slice < look)
        look = slice;
    if (delay > look)
        delay = look > SYSMON_MIN_NS ? look : SYSMON_MIN_NS;
    return delay;
}

/* Sleep for delay, or to the trace line's deadline if sooner; while the
 * sleep is long, let a G that begins to wait kick it (sysmon_kick) and,
 * past a slice, have the Ps stamp when their Gs begin. Returns the time
 * it woke. */
static int64_t sysmon_sleep(int64_t delay)
{
    int64_t slice = preempt_slice();
    int64_t now = nanotime();
    int64_t sleep = delay;
    if (sm.trace_ns > 0 && sm.lasttrace + sm.trace_ns - now < sleep)
        sleep = sm.lasttrace + sm.trace_ns - now;
    bool longsleep = preempt_when_waiting() && slice > 0 && sleep > slice / 4;
    if (longsleep) {
        __atomic_store_n(&sched.sysmon_wake_at, now + sleep, __ATOMIC_RELAXED);
        /* Past a slice it cannot tell when a G began: the Ps stamp it. */
        __atomic_store_n(&sched.sysmon_longsleep, sleep > slice ? 2 : 1, __ATOMIC_SEQ_CST);
    }
    if (sleep > 0)
        notetsleep(&sm.note, sleep);
    /* A kick cleared it already. */
    bool kicked =
        longsleep && __atomic_exchange_n(&sched.sysmon_longsleep, 0, __ATOMIC_SEQ_CST) == 0;
    noteclear(&sm.note);
    now = nanotime();
    if (kicked)
        sm.watch_until = now + SYSMON_WATCH_NS;
    return now;
}

/* Poll the network without blocking when nobody has for a while (under
 * the kernel's policy a G readied by epoll must be seen waiting within a
 * slice). Returns whether it readied a G. */
static bool sysmon_poll(int64_t now)
{
    int64_t last = netpoll_lastpoll();
    bool due = netpoll_anyregistered() && now - last > FORCE_POLL_NS;
    if (preempt_when_waiting() && netpoll_anywaiters() && now - last > preempt_slice())
        due = true;
    return last != 0 && due && netpoll(0) > 0;
}

static void *sysmon(void *arg)
{
    (void)arg;
    /* Its sleeps often end at a G's timer, which it serves by preempting
     * the G that holds the P: the kernel's default 50 us of timer slack
     * would make every such wake-up that much later. */
    rt_syscall(SYS_prctl, PR_SET_TIMERSLACK, 1UL, 0UL);
    for (int32_t i = 0; i < sched.gomaxprocs; i++) /* a G running now started no earlier */
        pticks[i].schedwhen = nanotime();
    int64_t delay = SYSMON_MIN_NS / 2;
    bool busy = false;
    for (;;) {
        delay = busy ? SYSMON_MIN_NS : delay < SYSMON_MAX_NS / 2 ? 2 * delay : SYSMON_MAX_NS;
        delay = sysmon_delay(delay);
        /* One thread, running or in a system call: nobody waits for its P, nothing to
         * preempt (the kernel's policy; a fixed slice preempts it all the same) or retake
         * (sched_lone). The first spawn, a park of that thread
         * (sysmon_lone_parked: the deadlock check) and every kick wake sysmon. */
        if (sched_lone() && sm.trace_ns == 0 && preempt_when_waiting()) {
            __atomic_store_n(&sm.lone, 1, __ATOMIC_SEQ_CST);
            if (__atomic_load_n(&sched.npidle, __ATOMIC_SEQ_CST) < sched.gomaxprocs)
                delay = SYSMON_LONE_NS;
        }
        int64_t now = sysmon_sleep(delay);
        __atomic_store_n(&sm.lone, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&sm.nrounds, sm.nrounds + 1, __ATOMIC_RELAXED);
        /* Gs a poll readied wait in the global queue, and the round below times their
         * wait (nextlook): no reason to look again in 20 us. */
        bool polled = sysmon_poll(now);
        busy = retake(now) > 0;
        m_retry(now);
        sm.lastround = now;

        if (sm.trace_ns > 0 && now - sm.lasttrace >= sm.trace_ns) {
            sm.lasttrace = now;
            schedtrace(sm.detailed);
        }
        quit_check();
        if (!busy && !polled)
            deadlock_check();
    }
    return NULL;
}

void sysmon_kick_slow(int64_t when)
{
    if (__atomic_load_n(&sched.npidle, __ATOMIC_RELAXED) > 0)
        return; /* an idle P takes it (wakep), or its M sleeps until the timer */
    if (__atomic_load_n(&sched.nmspinning, __ATOMIC_RELAXED) > 0)
        return; /* a spinning M (often the one wakep just started) takes it, or kicks (resetspinning) */
    /* The latest look it needs: a timer's due time; for a G that begins
     * to wait, a slice from now (the running G's slice ends by then, and
     * sysmon's look times the rest). Within that, sysmon wakes anyway: a
     * kick per pthread_create in a create+join loop would be a futex wake
     * on the creator's path. */
    if (when == 0 && __atomic_load_n(&sched.sysmon_longsleep, __ATOMIC_RELAXED) == 1)
        return; /* it sleeps a slice at most (no clock read needed) */
    int64_t by = when > 0 ? when : nanotime() + preempt_slice();
    if (by >= __atomic_load_n(&sched.sysmon_wake_at, __ATOMIC_RELAXED))
        return;
    if (__atomic_exchange_n(&sched.sysmon_longsleep, 0, __ATOMIC_SEQ_CST))
        sysmon_wake();
}

void sysmon_lone_parked(void)
{
    if (__atomic_load_n(&sm.lone, __ATOMIC_SEQ_CST))
        sysmon_wake();
}

/* Wake sysmon now (async-signal-safe; a wake-up already pending is enough). */
void sysmon_wake(void)
{
    uint32_t clear = 0;
    if (__atomic_compare_exchange_n(&sm.note.key, &clear, 1, false, __ATOMIC_RELEASE,
                                    __ATOMIC_RELAXED))
        rt_syscall(SYS_futex, &sm.note.key, FUTEX_WAKE_PRIVATE, 1);
}

int sysmon_start(int trace_ms, bool detailed)
{
    sm.trace_ns = (int64_t)trace_ms * 1000000;
    sm.detailed = detailed;
    sm.lasttrace = nanotime();
    int err = sched_helper_thread(sysmon);
    if (err) {
        rt_print(2,
                 "goshim: cannot start sysmon (error %d): a thread blocked in a system call "
                 "keeps its processor, and GOSHIM_SCHEDTRACE is off\n",
                 err);
        return err;
    }
    sm.running = true;
    return 0;
}

int sysmon_threads(void)
{
    return sm.running ? 1 : 0;
}

uint64_t sysmon_retakes(void)
{
    return __atomic_load_n(&sm.nretake, __ATOMIC_RELAXED);
}

uint64_t sysmon_rounds(void)
{
    return __atomic_load_n(&sm.nrounds, __ATOMIC_RELAXED);
}

/* Fork child: sysmon was a thread of the parent; a new one with the same settings, at once
 * or when the child needs it (sched_helper_defer). */
static int sysmon_restart(void)
{
    __atomic_store_n(&sm.deferred, false, __ATOMIC_SEQ_CST);
    return sysmon_start((int)(sm.trace_ns / 1000000), sm.detailed);
}

void sysmon_fork_child(void)
{
    bool was = sm.running || sm.deferred;
    fork_zero(pticks, sizeof pticks[0] * (size_t)sched.gomaxprocs);
    FORK_SET(sm.note.key, 0);
    FORK_SET(sched.sysmon_longsleep, 0);
    FORK_SET(sm.running, false);
    sm.deferred = was && sched_helper_defer(sysmon_restart);
    if (was && !sm.deferred)
        sysmon_restart();
}

int64_t sysmon_traces(void)
{
    return sm.trace_ns;
}

bool sysmon_deferred(void)
{
    return __atomic_load_n(&sm.deferred, __ATOMIC_SEQ_CST);
}
