/*
 * Async preemption (docs/design.md, rule 7 and "Preemption facts").
 *
 * sysmon asks: a P whose schedtick has not moved for GOSHIM_PREEMPT gets
 * its M signalled (preempt_request) with rt_tgsigqueueinfo, SI_QUEUE and a
 * per-process cookie, so the handler tells goshim's signals from the
 * application's (which it passes on to the application's handler: the
 * shim records it instead of installing it, shim/signal.c) and the
 * application's own tgkill of the same signal is never taken for ours.
 *
 * The handler decides cheaply, in signal context, without locks, TLS or
 * calls: the request is current (the P has not scheduled since), the M is
 * not inside the runtime and runs a G, the interrupted PC lies in
 * application text (a table built from dl_iterate_phdr at start-up and
 * after dlopen/dlclose, never in the handler), and the stack pointer lies
 * in the G's stack with room to spare. Then it only edits the saved
 * context (see preempt_x86_64.S): the thread resumes in the trampoline,
 * outside signal context.
 *
 * goshim_preempt_point, called by the trampoline, walks the whole stack
 * with libgcc's unwinder, through the trampoline's CFI into the
 * interrupted frames: every frame must be application code until the G's
 * entry (gostart or the shim's thread start, kept in their own section),
 * else the preemption is refused (counted) and the G resumes where it was;
 * sysmon asks again next tick.
 *
 * Which unwinder walks (GOSHIM_PREEMPT_WALK): libgcc's _Unwind_Backtrace
 * by default, libunwind's (preempt_unw.c) on request, or both, to compare
 * them (each preemption walked by each, in turn first, safe only if both
 * agree; GOSHIM_STATS prints each one's walks, mean, median and 99th
 * percentile, and how many verdicts differed). libgcc's takes no lock,
 * makes no system call and finds FDEs with glibc's lock-free
 * _dl_find_object; it walks from here, through the trampoline's CFI, into
 * the interrupted frames. libunwind's, in an address space of goshim's
 * own, is lock-free too once its cache is warm and starts at the
 * interrupted frame, two frames fewer; but each of its steps costs more
 * than libgcc's (its CFI interpreter, and a mutex for a CFI program with
 * remember_state), so it is cheaper on shallow stacks and dearer on deep
 * ones. libgcc stays the default: libunwind's mean walk was not within
 * 1.2 times libgcc's on every stack scripts/bench_preempt.sh (case d)
 * measures (docs/measured.md has the figures).
 *
 * Where a preempted G goes. Behind the Gs of its P (its run queue's
 * tail), where it keeps its CPU's caches, unless the global queue holds
 * Gs: then behind those (its tail) when its P's queue is empty (else it
 * would run again at once, before the Gs it was preempted for), and
 * always when it is a spinner. A spinner has not entered goshim since its
 * last preemption (sched_ncalls did not move: redis's io threads, an
 * adaptive lock's spin phase); it goes behind every G that waits, the way
 * EEVDF's lag puts a task that used its share behind those that did not,
 * and Gs readied by a thread without a P (a sleeper woken by sysmon's
 * netpoll or timers) wait in the global queue. Go sends every preempted G
 * there; so did goshim with every spinner, which moved computing Gs from
 * CPU to CPU at each tick: lbzip2's decoders, whose tables are megabytes
 * of random reads, then spent far more CPU time than natively, where the
 * kernel rotates tasks on their own CPU (docs/measured.md, session 27).
 * Only under the kernel's policy: with a fixed (Go) slice the global
 * queue's 61st-tick check ran a demoted spinner before a sleeper just
 * readied into runnext, a whole extra 10 ms slice late.
 *
 * Slice timers (the kernel's policy only). Each M makes, on its own
 * thread, a POSIX timer on its CPU-time clock (timer_create with
 * CLOCK_THREAD_CPUTIME_ID and SIGEV_THREAD_ID to itself) with the slice
 * as period. The kernel checks CPU timers at its tick, so it fires at the
 * first tick after each slice of CPU the M used (every 4 ms at
 * CONFIG_HZ=250) and never while the M sleeps or waits for a CPU; with
 * CONFIG_POSIX_CPU_TIMERS_TASK_WORK (x86 has it) the signal is queued
 * on the way back to user mode, so it never interrupts a blocking call.
 * Its si_code is SI_TIMER and its value a second cookie. The handler
 * (on_tick) preempts if the P's schedtick is the one the previous signal
 * saw - the same G ran a whole period - and some G waits (its P's queue
 * or the global one); else it notes the schedtick. Such timers cost no
 * measurable CPU, unlike as many CLOCK_MONOTONIC timer signals (hrtimers,
 * each an interrupt of its own). An M whose timer cannot be made
 * (RLIMIT_SIGPENDING) says so once; sysmon then serves every waiter, as it
 * does under valgrind, which reports the stack switch a tick interrupted.
 * Moving to another signal (below) re-creates an M's timer at its next
 * signal.
 *
 * Code no unwinder can walk (a JIT's, in an anonymous executable mapping;
 * hand-written assembly without CFI). The walk cannot pass it, so such a
 * G is never preempted; a G refused there would hold its P for three
 * rounds before the hand-off, and a G in code of no loaded object is
 * handed off at its first refusal instead (preempt_nowalk), within about a
 * slice. Deciding safety there without the walk - a frame-pointer chain
 * up to application code - was considered and rejected: V8 keeps rbp
 * chains in its own frames, but the embedding binary's C++ frames are
 * compiled without frame pointers, so the chain leaves the JIT frames
 * through garbage, and a wrong "safe" verdict switches a G out with a
 * glibc lock held (a deadlock), where the hand-off only lets one more OS
 * thread run beside the Ps for a while.
 *
 * The main G's stack ends in libc (__libc_start_call_main) and _start:
 * for it, libc frames below which only the last frame is application code
 * count as its bottom.
 */
#include <cpuid.h>
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/platform/x86.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <ucontext.h>
#include <unistd.h>
#include <unwind.h>

#include "apptext.h"
#include "libc.h"
#include "preempt.h"
#include "preempt_unw.h"
#include "sched.h"
#include "throw.h"

#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif

_Static_assert(offsetof(struct m, pend_rip) == 8, "preempt_x86_64.S reads m->pend_rip at %gs:8");

void goshim_preempt_entry(void);
void goshim_preempt_tramp(void);
void goshim_preempt_point(const uint64_t *saved);
/* Read by the trampoline: the XSAVE area size, a multiple of 64; 0 until the first
 * injection (xsave_size_learn). */
__attribute__((visibility("hidden"))) uint64_t goshim_xsave_size;

enum {
    STACK_MARGIN = 16384, /* the handler's frame, the trampoline, the walk, with room to spare */
};

static struct {
    bool on;
    int sig;
    int64_t slice;
    int64_t wake_slice; /* the running G's time after which a woken G gets its P */
    bool when_waiting;  /* the kernel's policy: preempt only while another G waits for a P */
    pid_t pid;
    int cookie;
    int tcookie;      /* the slice timers' sigev_value */
    bool notimers;    /* under valgrind: no slice timers, sysmon times every slice */
    bool moved;       /* sig was the default and the application claimed it: now a real-time one */
    bool chosen;      /* sig came from GOSHIM_PREEMPT_SIGNAL: never moved */
    bool handoff;     /* GOSHIM_PREEMPT_HANDOFF */
    uint64_t handled; /* signals whose handler is goshim's (bit sig-1) */
    struct sigaction app_action[65]; /* the application's disposition of each of them */
    bool app_set[65];
    uint64_t nrequests, ndone, nrefused, nstale, nhandoff, ncut, nwakecut, ndemoted, nglobal;
    uint64_t ntickcuts, ntimerfail; /* preemptions slice-timer signals asked; timers refused */
    uint64_t ngate;                 /* preemptions taken at the shim's gate */
    int walker;                     /* PREEMPT_WALK_LIBGCC, _LIBUNWIND or _BOTH */
} pr;

void preempt_refresh(void)
{
    if (!pr.on)
        return;
    apptext_refresh();
    if (pr.walker != PREEMPT_WALK_LIBGCC)
        unwalk_refresh();
}

/* ---- the handler -------------------------------------------------------------------- */

/* The application's handler for a signal that is not ours. */
static void chain(int sig, siginfo_t *info, void *uc)
{
    struct sigaction *a = &pr.app_action[sig];
    if (!pr.app_set[sig])
        return; /* the default action of SIGURG (and of our choice) is to ignore */
    if (a->sa_flags & SA_SIGINFO) {
        if (a->sa_sigaction)
            a->sa_sigaction(sig, info, uc);
    } else if (a->sa_handler != SIG_IGN && a->sa_handler != SIG_DFL) {
        a->sa_handler(sig);
    } else if (a->sa_handler == SIG_DFL && sig != SIGURG) {
        /* Default action of a signal that terminates: do it. */
        struct sigaction dfl = {.sa_handler = SIG_DFL};
        rt_syscall6(SYS_rt_sigaction, sig, (long)&dfl, 0, 8, 0, 0);
        rt_syscall(SYS_tgkill, pr.pid, rt_syscall(SYS_gettid, 0, 0, 0), sig);
    }
}

static void on_request(struct m *mp, bool in_runtime, void *ucv);

/* A request found its G at an unsafe point: counted, for sysmon too. */
static void refuse(struct m *mp)
{
    __atomic_add_fetch(&pr.nrefused, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&mp->preempt_refusals, 1, __ATOMIC_RELAXED);
}

static void on_tick(struct m *mp, bool in_runtime, void *ucv);
static void slicetimer_create(struct m *mp, int sig);
static bool slicetimer_retry_due(struct m *mp);

static void handler(int sig, siginfo_t *info, void *ucv)
{
    int saved_errno = errno;
    bool tick = info->si_code == SI_TIMER && info->si_value.sival_int == pr.tcookie;
    if (!tick && (info->si_code != SI_QUEUE || info->si_pid != pr.pid ||
                  info->si_value.sival_int != pr.cookie)) {
        chain(sig, info, ucv);
        errno = saved_errno;
        return;
    }
    if (!tick && sig != __atomic_load_n(&pr.sig, __ATOMIC_RELAXED))
        return; /* sent just before preemption moved to another signal */
    struct m *mp = m_of_thread();
    if (!mp)
        return;
    /* Held while the handler reads the M's P and G: sysmon does not hand
     * them off meanwhile (syscall.c), nor does it once it had begun. */
    int32_t locks = __atomic_add_fetch(&mp->locks, 1, __ATOMIC_SEQ_CST);
    int sig_now = __atomic_load_n(&pr.sig, __ATOMIC_RELAXED);
    if (tick && mp->slicetimer_sig != sig_now) {
        slicetimer_create(mp, sig_now); /* moved off */
    } else {
        if (!tick && slicetimer_retry_due(mp))
            slicetimer_create(mp, sig_now);
        if (__atomic_load_n(&mp->pless, __ATOMIC_SEQ_CST) == 0) {
            if (tick)
                on_tick(mp, locks > 1, ucv);
            else
                on_request(mp, locks > 1, ucv);
        }
    }
    __atomic_sub_fetch(&mp->locks, 1, __ATOMIC_SEQ_CST);
}

/*
 * The XSAVE area's size for the features the kernel enabled (cpuid leaf 0xd), asked at the
 * first injection rather than at the start: a hypervisor may trap cpuid (7-11 us apiece on
 * a PVM guest), and most short processes are never preempted. A handler on the M that
 * goes on into the trampoline asks; two asking at once write the same value.
 */
static void xsave_size_learn(void)
{
    if (__builtin_expect(__atomic_load_n(&goshim_xsave_size, __ATOMIC_RELAXED) != 0, 1))
        return;
    unsigned a, b, c, d;
    __cpuid_count(0xd, 0, a, b, c, d);
    __atomic_store_n(&goshim_xsave_size, ((uint64_t)b + 63) & ~(uint64_t)63, __ATOMIC_RELAXED);
}

/*
 * Whether gp, interrupted at ucv's PC and stack pointer, may be preempted
 * there by the cheap tests (application text, room on its stack); if so,
 * the saved context is edited to resume in the trampoline. Else the
 * refusal is counted.
 */
static bool inject(struct m *mp, struct g *gp, void *ucv)
{
    ucontext_t *uc = ucv;
    uintptr_t pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
    uintptr_t sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
    if (!ranges_has(apptext_app(), pc) ||
        (gp->stack.lo &&
         (sp < (uintptr_t)gp->stack.lo + STACK_MARGIN || sp > (uintptr_t)gp->stack.hi))) {
        /* Code of no loaded object (a JIT's): no walk will ever pass it,
         * so sysmon hands the P off at once rather than after retries. */
        if (!ranges_has(apptext_loaded(), pc))
            __atomic_store_n(&mp->preempt_nowalk, 1, __ATOMIC_RELAXED);
        refuse(mp);
        return false;
    }
    xsave_size_learn();
    mp->pend_rip = pc;
    mp->preempt_pending = 1;
    uc->uc_mcontext.gregs[REG_RSP] = (greg_t)(sp - 128);
    uc->uc_mcontext.gregs[REG_RIP] = (greg_t)(uintptr_t)goshim_preempt_entry;
    return true;
}

/* The handler's decision for mp, its own M (in_runtime: interrupted inside goshim). */
static void on_request(struct m *mp, bool in_runtime, void *ucv)
{
    struct p *pp = mp->p;
    struct g *gp = mp->curg;
    uint32_t hreq = __atomic_exchange_n(&mp->handoff_req, 0, __ATOMIC_ACQ_REL);
    if (hreq && pp && pp->schedtick + 1 == hreq) {
        /* Stuck (in the kernel outside goshim, or refused too long): let
         * the P go where the G stands; it runs on without one. */
        if (sched_handoff_self(mp))
            __atomic_add_fetch(&pr.nhandoff, 1, __ATOMIC_RELAXED);
        __atomic_store_n(&mp->preempt_req, 0, __ATOMIC_RELEASE);
        return;
    }
    uint32_t req = __atomic_exchange_n(&mp->preempt_req, 0, __ATOMIC_ACQ_REL);
    if (!req || !pp || !gp || in_runtime || __atomic_load_n(&mp->ong0, __ATOMIC_RELAXED) ||
        mp->preempt_pending || pp->schedtick + 1 != req || readgstatus(gp) != Grunning) {
        __atomic_add_fetch(&pr.nstale, 1, __ATOMIC_RELAXED);
        return;
    }
    inject(mp, gp, ucv);
}

/*
 * The M's slice timer fired: its thread has run another period (the
 * slice, rounded up to the kernel's tick) since the last signal. If the
 * same G ran all that time and another G waits for its P, preempt it now,
 * here, without sysmon: the kernel's own tick rotation of tasks that all
 * compute. Anything else (inside goshim, on g0, a new G since the last
 * signal, nobody waiting) waits for the next period.
 */
static void on_tick(struct m *mp, bool in_runtime, void *ucv)
{
    __atomic_store_n(&mp->nticks, mp->nticks + 1, __ATOMIC_RELAXED);
    struct p *pp = mp->p;
    struct g *gp = mp->curg;
    if (!pp || !gp || __atomic_load_n(&mp->ong0, __ATOMIC_RELAXED) || mp->preempt_pending ||
        readgstatus(gp) != Grunning)
        return;
    uint32_t t = __atomic_load_n(&pp->schedtick, __ATOMIC_RELAXED);
    if (mp->tick_p != pp || mp->tick_sched != t) {
        mp->tick_p = pp; /* a G that began within the period: it gets a whole one */
        mp->tick_sched = t;
        return;
    }
    if (runqempty(pp) && __atomic_load_n(&sched.runqsize, __ATOMIC_RELAXED) == 0)
        return; /* nobody waits: it runs on */
    /* Inside goshim (a call's kernel time ends the period there) or refused: at its gate. */
    __atomic_store_n(&mp->gate_preempt, t + 1, __ATOMIC_RELEASE);
    __atomic_add_fetch(&pr.ntickcuts, 1, __ATOMIC_RELAXED);
    if (!in_runtime && inject(mp, gp, ucv))
        mp->tick_sched = t + 1; /* the G that runs next gets a whole period */
}

/* ---- the yield (the walk: preempt_walk.c) --------------------------------------------- */

static void preempt_yield(struct m *mp, struct g *gp, struct p *pp);

/* Called by the trampoline on the G's stack, outside signal context, with
 * its save area (preempt_unw.h). */
void goshim_preempt_point(const uint64_t *saved)
{
    struct m *mp = getm();
    mp->preempt_pending = 0;
    struct g *gp = mp->curg;
    __atomic_add_fetch(&mp->locks, 1,
                       __ATOMIC_SEQ_CST); /* anything the walk calls goes straight to glibc */
    uint64_t calls = sched_ncalls;
    int verdict = preempt_walk(pr.walker, saved, gp);
    sched_ncalls = calls; /* the unwinders' own calls (their locks) are not the G's */
    mp = getm();          /* a walk that met a program's lock parked, maybe resumed elsewhere */
    struct p *pp = mp->p;
    if (verdict == 1 && gp && pp) {
        preempt_yield(mp, gp, pp);
        return;
    }
    __atomic_sub_fetch(&mp->locks, 1, __ATOMIC_SEQ_CST);
    refuse(mp);
}

/* gp, preempted at a safe point (the walk's, or its gate), yields pp; mp->locks is held,
 * and dropped here. Where it goes is chosen before locks drops, when a hand-off signal may
 * take the P (sched_gosched gets one back): behind the Gs of its P, or of the global queue
 * when that holds some and its P has none or it is a spinner (no wrapped call since its
 * last preemption): see "Where a preempted G goes". */
static void preempt_yield(struct m *mp, struct g *gp, struct p *pp)
{
    /* The request is served: a gate request left beside the signal's would be taken by the
     * next G at its first call, one from runnext (it inherits the P's schedtick) - with a
     * fixed slice the sleeper woken by the timer, put behind the spinner it was to replace,
     * waited a second slice: 24 ms late at GOSHIM_PREEMPT=10 for a 1 ms sleep. */
    __atomic_store_n(&mp->gate_preempt, 0, __ATOMIC_RELAXED);
    bool spinner = gp->ncalls_preempted == sched_ncalls;
    __atomic_store_n(&gp->ran_to_cut, 1, __ATOMIC_RELAXED); /* sysmon.c: cut_for */
    bool behind = pr.when_waiting && __atomic_load_n(&sched.runqsize, __ATOMIC_RELAXED) > 0 &&
                  (spinner || runqempty(pp));
    __atomic_sub_fetch(&mp->locks, 1, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&pr.ndone, 1, __ATOMIC_RELAXED);
    if (spinner) { /* a computing waiter from now until it runs (sysmon.c) */
        gp->flags |= G_PREEMPTQ;
        __atomic_add_fetch(&sched.npreemptq, 1, __ATOMIC_RELAXED);
    }
    if (spinner && pr.when_waiting)
        __atomic_add_fetch(&pr.ndemoted, 1, __ATOMIC_RELAXED);
    if (behind) {
        __atomic_add_fetch(&pr.nglobal, 1, __ATOMIC_RELAXED);
        sched_gosched();
    } else {
        sched_goyield();
    }
    if (sched_hooks.resumed)
        sched_hooks.resumed();
    gp->ncalls_preempted = sched_ncalls; /* the hook's own calls do not count */
}

/*
 * The calling G's entry into the shim found a preemption asked (sysmon's request, or its
 * M's slice timer): a wrapper's entry is a safe point (the shim's gate), so it yields here,
 * without a signal or a walk. A G in system calls and libc most of its time (the signal
 * lands there, refused) yields at its next call, not after refusals and a hand-off. Not
 * in a program's signal handler (it may have interrupted libc): that request stays for the
 * next gate.
 */
void preempt_at_gate(struct m *mp)
{
    uint32_t req = __atomic_exchange_n(&mp->gate_preempt, 0, __ATOMIC_ACQ_REL);
    if (!req || __atomic_load_n(&mp->locks, __ATOMIC_SEQ_CST) != 0)
        return;
    __atomic_add_fetch(&mp->locks, 1, __ATOMIC_SEQ_CST); /* no hand-off meanwhile */
    struct p *pp = mp->p;
    struct g *gp = mp->curg;
    bool handler = sched_hooks.in_handler && sched_hooks.in_handler();
    if (handler) /* for its next gate */
        __atomic_store_n(&mp->gate_preempt, req, __ATOMIC_RELEASE);
    if (handler || !pp || !gp || pp->schedtick + 1 != req || readgstatus(gp) != Grunning) {
        __atomic_sub_fetch(&mp->locks, 1, __ATOMIC_SEQ_CST);
        return;
    }
    __atomic_add_fetch(&pr.ngate, 1, __ATOMIC_RELAXED);
    preempt_yield(mp, gp, pp);
}

/* ---- the slice timers -------------------------------------------------------------- */

/* Whether slice timers are wanted at all: the kernel's policy, not under valgrind. */
static bool slicetimers_wanted(void)
{
    return pr.on && pr.when_waiting && !pr.notimers;
}

/* An M refused its timer asks again this long after (at a request of sysmon's). */
#define SLICETIMER_RETRY_NS 20000000

/*
 * Whether mp, whose slices sysmon times because it has no slice timer,
 * should ask the kernel for one again now. A refusal is seldom for good:
 * RLIMIT_SIGPENDING counts the queued and preallocated signals of all the
 * user's processes, so another program's burst of signals or threads
 * refuses a timer that the next moment would give.
 */
static bool slicetimer_retry_due(struct m *mp)
{
    return slicetimers_wanted() && !mp->slicetimer_sig && nanotime() >= mp->slicetimer_retry;
}

/* Give mp, the calling thread's M, a slice timer that signals sig (the old
 * one, if any, is deleted). On failure the M has none: sysmon times its
 * slices (preempt_m_timed says so) and the M asks again later.
 * Async-signal-safe. */
static void slicetimer_create(struct m *mp, int sig)
{
    if (mp->slicetimer_sig) {
        rt_syscall(SYS_timer_delete, mp->slicetimer, 0, 0);
        __atomic_store_n(&mp->slicetimer_sig, 0, __ATOMIC_RELAXED);
    }
    struct sigevent se;
    memset(&se, 0, sizeof se);
    se.sigev_notify = SIGEV_THREAD_ID;
    se.sigev_signo = sig;
    se.sigev_value.sival_int = pr.tcookie;
    se._sigev_un._tid = mp->tid; /* sigev_notify_thread_id */
    int id = -1;
    bool injected = fault_inject(FAULT_TIMER);
    long rc = injected
                  ? -EAGAIN
                  : rt_syscall(SYS_timer_create, CLOCK_THREAD_CPUTIME_ID, (long)&se, (long)&id);
    struct itimerspec its = {{pr.slice / 1000000000, pr.slice % 1000000000},
                             {pr.slice / 1000000000, pr.slice % 1000000000}};
    if (rc == 0 && (rc = rt_syscall6(SYS_timer_settime, id, 0, (long)&its, 0, 0, 0)) != 0)
        rt_syscall(SYS_timer_delete, id, 0, 0);
    if (rc != 0) {
        /* EAGAIN: no signal queue entry to spare (RLIMIT_SIGPENDING); EPERM or ENOSYS:
         * timer_create refused (a seccomp filter, a container's profile). */
        const char *why = rc == -EAGAIN ? "RLIMIT_SIGPENDING reached"
                          : rc == -EPERM || rc == -ENOSYS
                              ? "timer_create refused, by a seccomp filter?"
                              : "timer_create failed";
        if (__atomic_fetch_add(&pr.ntimerfail, 1, __ATOMIC_RELAXED) == 0)
            rt_print(2,
                     "goshim: cannot give a thread its CPU-time slice timer (error %ld: %s): "
                     "sysmon times its slices until it gets one%s\n",
                     -rc, why, fault_note(injected));
        mp->slicetimer_retry = nanotime() + SLICETIMER_RETRY_NS;
        return;
    }
    mp->slicetimer = id;
    __atomic_store_n(&mp->slicetimer_sig, sig, __ATOMIC_RELAXED);
}

void preempt_m_init(struct m *mp)
{
    mp->slicetimer_sig = 0;
    mp->slicetimer_retry = 0;
    mp->tick_p = NULL;
    if (slicetimers_wanted())
        slicetimer_create(mp, __atomic_load_n(&pr.sig, __ATOMIC_RELAXED));
}

void preempt_m_fini(struct m *mp)
{
    if (mp->slicetimer_sig)
        rt_syscall(SYS_timer_delete, mp->slicetimer, 0, 0);
    __atomic_store_n(&mp->slicetimer_sig, 0, __ATOMIC_RELAXED);
}

bool preempt_m_timed(const struct m *mp)
{
    return slicetimers_wanted() && __atomic_load_n(&mp->slicetimer_sig, __ATOMIC_RELAXED) != 0;
}

/* ---- sysmon's side ------------------------------------------------------------------ */

/* sysmon's request of pp's G: at its gate (gate_only), by signal as well, or a hand-off. */
/* Ask pp's G, running on mp, to yield (or hand off); gate_only: at its next gate only. */
static void request_on(struct p *pp, struct m *mp, bool handoff, bool gate_only)
{
    if (!pr.on || !mp || mp->tid <= 0)
        return;
    uint32_t req = __atomic_load_n(&pp->schedtick, __ATOMIC_RELAXED) + 1;
    __atomic_add_fetch(&pr.nrequests, 1, __ATOMIC_RELAXED);
    if (!handoff) /* taken at the G's next gate if that comes before the signal (a call) */
        __atomic_store_n(&mp->gate_preempt, req, __ATOMIC_RELEASE);
    if (gate_only)
        return;
    __atomic_store_n(handoff ? &mp->handoff_req : &mp->preempt_req, req, __ATOMIC_RELEASE);
    siginfo_t si;
    memset(&si, 0, sizeof si);
    int sig = __atomic_load_n(&pr.sig, __ATOMIC_ACQUIRE);
    si.si_signo = sig;
    si.si_code = SI_QUEUE;
    si.si_pid = pr.pid; /* si_uid: never read (a getuid, a system call, per request) */
    si.si_value.sival_int = pr.cookie;
    bool injected = fault_inject(FAULT_SIGQUEUE);
    long rc = injected ? -EAGAIN
                       : rt_syscall6(SYS_rt_tgsigqueueinfo, pr.pid, mp->tid, sig, (long)&si, 0, 0);
    if (rc < 0 && fault_first(FAULT_SIGQUEUE))
        rt_print(2,
                 "goshim: cannot queue the preemption signal to an OS thread (error %ld; "
                 "RLIMIT_SIGPENDING?): sysmon asks again at its next round, and the thread's "
                 "slice timer at its next tick%s\n",
                 -rc, fault_note(injected));
}

static void request(struct p *pp, bool handoff, bool gate_only)
{
    request_on(pp, __atomic_load_n(&pp->m, __ATOMIC_ACQUIRE), handoff, gate_only);
}

void preempt_request(struct p *pp, bool handoff)
{
    request(pp, handoff, false);
}

void preempt_ask_at_gate(struct p *pp)
{
    request(pp, false, true);
}

void preempt_ask_call_at_gate(struct p *pp, struct m *mp)
{
    request_on(pp, mp, false, true);
}

void sched_preempt_g(struct g *gp)
{
    struct m *mp = __atomic_load_n(&gp->m, __ATOMIC_ACQUIRE);
    struct p *pp =
        mp && readgstatus(gp) == Grunning ? __atomic_load_n(&mp->p, __ATOMIC_ACQUIRE) : NULL;
    if (pp && __atomic_load_n(&pp->m, __ATOMIC_ACQUIRE) == mp)
        preempt_request(pp, false);
}

void preempt_count_handoff(void)
{
    __atomic_add_fetch(&pr.nhandoff, 1, __ATOMIC_RELAXED);
}

bool preempt_handoff_on(void)
{
    return pr.handoff;
}

int64_t preempt_slice(void)
{
    return pr.on ? pr.slice : 0;
}

int64_t preempt_wake_slice(void)
{
    return pr.on ? pr.wake_slice : 0;
}

bool preempt_when_waiting(void)
{
    return pr.when_waiting;
}

void preempt_count_cut(bool wake)
{
    __atomic_add_fetch(&pr.ncut, 1, __ATOMIC_RELAXED);
    if (wake)
        __atomic_add_fetch(&pr.nwakecut, 1, __ATOMIC_RELAXED);
}

/* ---- the application's disposition of the signal --------------------------------- */

bool preempt_owns(int sig)
{
    return sig > 0 && sig < 65 && (preempt_owned() & (1ULL << (sig - 1)));
}

uint64_t preempt_owned(void)
{
    return pr.on ? pr.handled : 0;
}

static int install(int sig)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = handler;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    struct sigaction old;
    if (libc_sigaction(sig, &sa, &old) != 0)
        return -1;
    if (old.sa_handler != SIG_DFL) { /* installed before goshim started (a preloaded library) */
        pr.app_action[sig] = old;
        pr.app_set[sig] = true;
    }
    pr.handled |= 1ULL << (sig - 1);
    return 0;
}

/*
 * The application installs a handler for the default preemption signal:
 * preempt with a free real-time signal from now on. Standard signals do
 * not queue: one of goshim's pending on a thread would swallow one the
 * application raises there. goshim's
 * handler stays on the old signal, chaining to the application's.
 */
static void move_off(void)
{
    for (int sig = SIGRTMAX - 2; sig > SIGRTMIN + 4; sig--) {
        struct sigaction cur;
        if (preempt_owns(sig) || libc_sigaction(sig, NULL, &cur) != 0 || cur.sa_handler != SIG_DFL)
            continue;
        if (install(sig) == 0) {
            __atomic_store_n(&pr.sig, sig, __ATOMIC_RELEASE);
            pr.moved = true;
        }
        return;
    }
}

void preempt_app_action(int sig, const struct sigaction *act, struct sigaction *old)
{
    if (old) {
        if (pr.app_set[sig])
            *old = pr.app_action[sig];
        else
            memset(old, 0, sizeof *old); /* SIG_DFL */
    }
    if (act) {
        pr.app_action[sig] = *act;
        pr.app_set[sig] = true;
        if (sig == pr.sig && !pr.chosen && !pr.moved && act->sa_handler != SIG_DFL &&
            act->sa_handler != SIG_IGN)
            move_off();
    }
}

/* ---- start-up ---------------------------------------------------------------------- */

/*
 * The kernel's base slice for nprocs CPUs, as EEVDF computes it:
 * sysctl_sched_base_slice (0.75 ms until Linux 6.14, 0.70 ms from 6.15)
 * times 1 + ilog2(min(ncpu, 8)) (sched_update_scaling's default, log
 * scaling): 0.70 ms at one P, 1.40 at 2, 2.10 at 4, 2.80 from 8 on.
 */
int64_t preempt_kernel_slice(int nprocs)
{
    int64_t base = 700000;
    struct utsname u;
    int major = 0, minor = 0;
    if (uname(&u) == 0 && sscanf(u.release, "%d.%d", &major, &minor) == 2 &&
        (major < 6 || (major == 6 && minor < 15)))
        base = 750000;
    int n = nprocs < 1 ? 1 : nprocs > 8 ? 8 : nprocs;
    int log = 0;
    while (n >>= 1)
        log++;
    return base * (1 + log);
}

int preempt_init(int64_t slice_ns, int sig, bool chosen, bool handoff, int walker)
{
    pr.pid = getpid();
    if (slice_ns == 0)
        return 0;
    pr.when_waiting = slice_ns < 0;
    /* valgrind, which moves signal frames onto the stack it believes
     * current, reports (and may act on) writes of the stack switch that a
     * tick signal interrupted: no slice timers there. */
    pr.notimers = RUNNING_ON_VALGRIND;
    if (slice_ns < 0)
        slice_ns = preempt_kernel_slice(sched.gomaxprocs);
    /* cpuid leaf 1 as ld.so read it at the process's start, not asked again (a trap). */
    if (!CPU_FEATURE_PRESENT(XSAVE) || !CPU_FEATURE_PRESENT(OSXSAVE)) {
        rt_print(2, "goshim: no XSAVE on this CPU: async preemption is off\n");
        return 0;
    }
    pr.sig = sig;
    pr.chosen = chosen;
    pr.handoff = handoff;
    pr.slice = slice_ns;
    pr.wake_slice = pr.when_waiting ? preempt_kernel_slice(1) / 2 : slice_ns;
    if (pr.wake_slice > slice_ns)
        pr.wake_slice = slice_ns;
    pr.cookie = (int)(((uint64_t)nanotime() * 0x9E3779B97F4A7C15ULL) >> 33) | 1;
    pr.tcookie = (int)(((uint64_t)pr.cookie * 0xC2B2AE3D27D4EB4FULL) >> 33) | 2;
    pr.on = true;
    if (walker != PREEMPT_WALK_LIBGCC && !unwalk_load())
        rt_print(2, "goshim: GOSHIM_PREEMPT_WALK: libunwind-x86_64.so.8 cannot be loaded "
                    "(Debian package libunwind8); using libgcc's unwinder\n");
    else
        pr.walker = walker;
    preempt_refresh();
    if (install(sig) != 0) {
        pr.on = false;
        rt_print(2, "goshim: cannot install the preemption signal handler: async preemption "
                    "is off\n");
    }
    return 0;
}

/* A fork child's M has no slice timer (timers are not inherited): it gets one once a second
 * thread may wait. With one thread there is nothing to switch to, and a tick costs a signal;
 * nor is there a walk to count before then. */
static int slicetimer_late(void)
{
    walkstat_reset(); /* none before */
    preempt_m_init(getm());
    return 0;
}

void preempt_after_fork(void)
{
    pr.pid = getpid();
    __atomic_store_n(&sched.npreemptq, 0, __ATOMIC_RELAXED); /* the parent's queued Gs are gone */
    preempt_walk_fork_child();
    struct m *mp = getm();
    mp->slicetimer_sig = 0;
    mp->tick_p = NULL;
    if (!sched_helper_defer(slicetimer_late))
        slicetimer_late();
}

void preempt_stats(struct preempt_stats *s)
{
    s->requests = __atomic_load_n(&pr.nrequests, __ATOMIC_RELAXED);
    s->done = __atomic_load_n(&pr.ndone, __ATOMIC_RELAXED);
    s->refused = __atomic_load_n(&pr.nrefused, __ATOMIC_RELAXED);
    s->stale = __atomic_load_n(&pr.nstale, __ATOMIC_RELAXED);
    s->handoffs = __atomic_load_n(&pr.nhandoff, __ATOMIC_RELAXED);
    s->cut = __atomic_load_n(&pr.ncut, __ATOMIC_RELAXED);
    s->wake_cut = __atomic_load_n(&pr.nwakecut, __ATOMIC_RELAXED);
    s->demoted = __atomic_load_n(&pr.ndemoted, __ATOMIC_RELAXED);
    s->to_global = __atomic_load_n(&pr.nglobal, __ATOMIC_RELAXED);
    s->ticks = 0;
    runtime_lock(&sched.lock);
    for (struct m *mp = sched.allm; mp; mp = mp->alllink)
        s->ticks += __atomic_load_n(&mp->nticks, __ATOMIC_RELAXED);
    runtime_unlock(&sched.lock);
    s->tickcuts = __atomic_load_n(&pr.ntickcuts, __ATOMIC_RELAXED);
    s->gate = __atomic_load_n(&pr.ngate, __ATOMIC_RELAXED);
    s->timerfail = __atomic_load_n(&pr.ntimerfail, __ATOMIC_RELAXED);
    preempt_walk_stats(s);
    s->walker = pr.walker == PREEMPT_WALK_LIBUNWIND ? "libunwind"
                : pr.walker == PREEMPT_WALK_BOTH    ? "both"
                                                    : "libgcc";
}
