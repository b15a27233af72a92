/*
 * Gs: creation (newproc), exit, park/ready, yield, and the free lists.
 *
 * A G is a task with its own stack and its own glibc TCB (thread control
 * block + static TLS, see tls.c), so errno and __thread variables belong
 * to it wherever it runs. Dead Gs keep their stack and TCB and are reused
 * through a per-P free list (no lock) and a global one (sched.gflock), as
 * Go's gfput/gfget.
 *
 * Switching away from a G always goes through the M's scheduler stack
 * (g0) with ctx_mcall, after the G recorded in m->rel what should become
 * of it (park, Gosched, yield, exit). The FS base is *not* changed on the
 * way to g0: g0 code uses no thread-local storage, so it can run under the
 * FS base of the G it just left, and the common case (the next G is found
 * at once) pays for one FS write instead of two — with arch_prctl on a
 * kernel without FSGSBASE that is a system call each. The release is
 * committed (release_commit) only after the FS base points elsewhere, so a
 * G's TCB is never installed on two Ms at once: if another M could run the
 * released G while this one still had its TCB as FS, a signal handler on
 * either would write the same errno, and glibc's per-thread malloc words
 * (which travel with the FS base, see tls_malloc_move) would be shared.
 * The G's alternate signal stack, if it set one, leaves the M at the same
 * points, for the same reason (signal.c).
 *
 * Rejected: Go's way (g0 has its own FS) costs two FS writes per switch;
 * switching G to G directly on the G's stack saves the stack switch but
 * makes the idle path run on a user stack that may be tiny.
 *
 * A thread's TCB, when it has one of its own, lives at the top of its
 * stack block: threadblock.c.
 */
#include <errno.h>
#include <linux/membarrier.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>

#include "libc.h"
#include "preempt.h"
#include "prefetch.h"
#include "sched.h"
#include "throw.h"
#include "timer.h"
#include "threadblock.h"
#include "tls.h"

struct schedt sched;
/* Page-aligned: the section of FORK_WRITTEN variables starts a page. */
struct schedfork schedfork FORK_WRITTEN __attribute__((aligned(4096)));

static void runnable_to(struct p *pp, struct g *gp);
static bool stack_fits(const struct g *gp);

/* The current G: per G in full TLS mode (each G has its own TCB), per M in
 * errno mode (the switch updates it). On g0 it may name a G this M just
 * left; g0 code uses getm(). */
__thread struct g *tls_g __attribute__((tls_model("initial-exec")));
__thread uint64_t sched_ncalls __attribute__((tls_model("initial-exec")));

/* Read tls_g freshly: never let the compiler keep it (or its address)
 * across a switch, after which the G may run on another M. */
__attribute__((noinline)) static struct g *getg(void)
{
    struct g *gp = tls_g;
    __asm__ volatile("" ::: "memory");
    return gp;
}

struct g *sched_self(void)
{
    if (!sched.started)
        return NULL;
    struct g *gp = getg();
    /* On g0 tls_g still names the G the M left (getg): the scheduler's own calls into
     * libc (glibc's pthread_create in newm calls the program's calloc) come back to the
     * shim, which must not take g0 for that G (it would park it). Only Ms have a
     * non-NULL tls_g, so the GS read is safe. */
    if (gp && __atomic_load_n(&getm()->ong0, __ATOMIC_RELAXED))
        return NULL;
    return gp;
}

uint32_t sched_gstatus(struct g *gp)
{
    return readgstatus(gp);
}

int sched_gtid(struct g *gp)
{
    struct m *mp = __atomic_load_n(&gp->m, __ATOMIC_ACQUIRE);
    return mp ? mp->tid : 0;
}

int sched_mtid(void)
{
    return getm()->tid;
}

/* Set in an M's own TCB (its g0 context), NULL in every G's and elsewhere. */
static __thread struct m *tls_own_m __attribute__((tls_model("initial-exec")));

void m_mark_own_tls(struct m *mp, void *tcb)
{
    *(struct m **)((char *)tcb + ((char *)&tls_own_m - (char *)tls_self())) = mp;
}

int m_on_real_tcb;

/*
 * The calling thread's M as its TLS tells it, without a system call (NULL: TLS cannot tell,
 * ask the GS base). In full TLS mode every TCB an M installs says whose it is: its own
 * (tls_own_m) or a G's, whose m is the M that runs it from execute until the G is released
 * on another M, which happens only once this one's FS points elsewhere (release_commit);
 * but the main G's, which M0 installs too as its own descriptor for a fork (while glibc's
 * list heads are unknown, sched_fork_prepare's fallback) or a set*id: while an M does
 * either (m_on_real_tcb, counted before it installs the descriptor), the GS base is asked.
 * Reading the GS base (arch_prctl) in every signal handler cost 12% of a timer signal's
 * path on a PVM guest (a trapped MSR read); the main G's every handler paid it until
 * the count.
 */
struct m *m_by_tls(void)
{
    if (!tls_full())
        return NULL;
    struct m *mp = tls_own_m;
    if (mp)
        return mp;
    struct g *gp = getg();
    if (!gp || ((gp->flags & G_MAIN) && __atomic_load_n(&m_on_real_tcb, __ATOMIC_SEQ_CST)))
        return NULL;
    mp = __atomic_load_n(&gp->m, __ATOMIC_ACQUIRE);
    return mp && mp->self == mp ? mp : NULL;
}

bool m_asym_fence;

void m_fence_init(void)
{
    long cmds = rt_syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    m_asym_fence = cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
                   rt_syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
}

bool m_fence_remote(void)
{
    return !m_asym_fence || m_fence_all(); /* without it, the Ms fence their own entries */
}

bool m_fence_all(void)
{
    if (m_asym_fence && rt_syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0)
        return true;
    return rt_syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) == 0; /* slow, but there */
}

struct m *acquirem(void)
{
    if (!sched.started || !getg())
        return NULL;
    struct m *mp = getm();
    int32_t held = __atomic_load_n(&mp->locks, __ATOMIC_RELAXED);
    if (held > 0) { /* already inside: no fence, and no P to take back (as releasem) */
        __atomic_store_n(&mp->locks, held + 1, __ATOMIC_RELAXED);
        return mp;
    }
    m_locks_enter(mp); /* entering from outside: see runtime.h */
    /* A G whose P was handed off while it stayed away takes one back (or
     * any idle one) at its first entry into the runtime, without
     * switching: this may be a signal handler. */
    if (__atomic_load_n(&mp->pless, __ATOMIC_SEQ_CST) && mp->locks == 1 &&
        !__atomic_load_n(&mp->ong0, __ATOMIC_RELAXED))
        sched_pless_reacquire();
    return mp;
}

void releasem(struct m *mp)
{
    /* Not a locked instruction: only this thread writes locks, and a signal
     * handler that runs between the load and the store gives back what it took.
     * The current M's, not mp's: runtime code that waited for a program's lock
     * (gfutex_wait) may have moved to another M, its count with it. */
    if (mp) {
        mp = getm();
        __atomic_store_n(&mp->locks, __atomic_load_n(&mp->locks, __ATOMIC_RELAXED) - 1,
                         __ATOMIC_RELEASE);
    }
}

/* Only fork's (FORK_TEXT): tls_g read here, getg staying on the hot code's pages. */
FORK_TEXT struct m *m_current(void)
{
    struct g *gp = tls_g;
    __asm__ volatile("" ::: "memory");
    return gp ? getm() : NULL;
}

bool m_in_runtime(void)
{
    if (!sched.started)
        return false;
    if (getg()) {
        struct m *mp = getm();
        return __atomic_load_n(&mp->ong0, __ATOMIC_RELAXED) ||
               __atomic_load_n(&mp->locks, __ATOMIC_RELAXED) > 0;
    }
    return tls_own_m != NULL; /* g0 with the M's own TCB installed */
}

bool casgstatus(struct g *gp, uint32_t oldval, uint32_t newval)
{
    return __atomic_compare_exchange_n(&gp->atomicstatus, &oldval, newval, 0, __ATOMIC_ACQ_REL,
                                       __ATOMIC_ACQUIRE);
}

__attribute__((noreturn)) static void bad_status(struct g *gp, uint32_t cur, uint32_t oldval,
                                                 const char *who)
{
    rt_print(2, "goshim: %s: G%lu has status %u, want %u\n", who, (unsigned long)gp->goid, cur,
             oldval);
    goshim_throw("casgstatus: bad incoming status");
}

static void castatus_or_throw(struct g *gp, uint32_t oldval, uint32_t newval, const char *who)
{
    if (!casgstatus(gp, oldval, newval))
        bad_status(gp, readgstatus(gp), oldval, who);
}

/*
 * A transition only the caller may make: the M that parks its own G (on g0,
 * ong0 set: sysmon keeps off), the one waker that took a parked G off its
 * queue, or the M of a G that enters or leaves a system call (inside
 * m_locks, where sysmon's hand-off keeps off: syscall.c). Nobody else
 * changes the status meanwhile, so a check and a release store do what the
 * CAS did without its locked instruction (two of the three per hand-off;
 * execute keeps its CAS). What must be seen in order around it is ordered
 * by the lock or CAS that hands the G over.
 */
void setgstatus_owned(struct g *gp, uint32_t oldval, uint32_t newval, const char *who)
{
    uint32_t cur = readgstatus(gp);
    if (cur != oldval)
        bad_status(gp, cur, oldval, who);
    __atomic_store_n(&gp->atomicstatus, newval, __ATOMIC_RELEASE);
}

/* ---- free lists -------------------------------------------------------- */

/* Put a dead G on pp's free list (the global one if pp is NULL). */
void gfput(struct p *pp, struct g *gp)
{
    if (gp->flags & G_MAIN) {
        /* glibc's main TCB and the process stack: never reused. */
        gp->tcb = NULL;
        gp->flags &= ~(uint32_t)(G_MAIN | G_TCB_DIRTY);
    }
    if (gp->stack.kind == STACK_USER) {
        memset(&gp->stack, 0, sizeof gp->stack); /* the program owns it */
    } else if (gp->stack.lo && (size_t)(gp->stack.hi - gp->stack.lo) != stack_default_size()) {
        g_drop_stack(pp, gp); /* with the TCB it holds, if any */
    }
    if (pp) {
        gp->schedlink = pp->gfree;
        pp->gfree = gp;
        pp->gburst = 0;
        if (++pp->gfreecnt < GFREE_LOCAL_MAX)
            return;
        /* Move half to the global list. */
        runtime_lock(&sched.gflock);
        while (pp->gfreecnt > GFREE_LOCAL_MAX / 2) {
            struct g *x = pp->gfree;
            pp->gfree = x->schedlink;
            pp->gfreecnt--;
            x->schedlink = sched.gfree;
            sched.gfree = x;
            __atomic_fetch_add(&sched.ngfree, 1, __ATOMIC_RELAXED);
        }
        runtime_unlock(&sched.gflock);
        return;
    }
    runtime_lock(&sched.gflock);
    gp->schedlink = sched.gfree;
    sched.gfree = gp;
    __atomic_fetch_add(&sched.ngfree, 1, __ATOMIC_RELAXED);
    runtime_unlock(&sched.gflock);
}

/* Get a dead G from pp's free list (refilled from the global one), or NULL. */
struct g *gfget(struct p *pp)
{
    if (pp && pp->gfree == NULL && __atomic_load_n(&sched.ngfree, __ATOMIC_RELAXED) > 0) {
        runtime_lock(&sched.gflock);
        while (pp->gfreecnt < GFREE_LOCAL_MAX / 2 && sched.gfree) {
            struct g *x = sched.gfree;
            sched.gfree = x->schedlink;
            __atomic_fetch_sub(&sched.ngfree, 1, __ATOMIC_RELAXED);
            x->schedlink = pp->gfree;
            pp->gfree = x;
            pp->gfreecnt++;
        }
        runtime_unlock(&sched.gflock);
    }
    struct g *gp;
    if (pp) {
        gp = pp->gfree;
        if (gp) {
            pp->gfree = gp->schedlink;
            pp->gfreecnt--;
            /* In a burst of spawns, the next one's descriptor (cold: it ended a thousand
             * threads ago) for the next spawn; outside one, the G just put back comes next. */
            if (pp->gfree && ++pp->gburst >= 2)
                prefetch_lines(pp->gfree, sizeof(struct g));
        }
    } else {
        runtime_lock(&sched.gflock);
        gp = sched.gfree;
        if (gp) {
            sched.gfree = gp->schedlink;
            __atomic_fetch_sub(&sched.ngfree, 1, __ATOMIC_RELAXED);
        }
        runtime_unlock(&sched.gflock);
    }
    if (gp)
        gp->schedlink = NULL;
    return gp;
}

struct g *malg(void)
{
    struct g *gp = rtpool_alloc(sizeof *gp, 64);
    if (!gp)
        return NULL;
    gp->atomicstatus = Gdead;
    runtime_lock(&sched.allglock);
    gp->alllink = sched.allg;
    sched.allg = gp;
    sched.allglen++;
    runtime_unlock(&sched.allglock);
    return gp;
}

/* ---- entry and exit ---------------------------------------------------- */

/*
 * errno in GOSHIM_TLS=errno mode, read and written out of line: glibc
 * declares __errno_location const, so inline code may keep errno's address
 * from before a switch, when the G ran on another M with another errno.
 */
__attribute__((noinline, noipa)) int errno_get(void)
{
    return errno;
}

__attribute__((noinline, noipa)) void errno_set(int v)
{
    errno = v;
}

/* First code of every G, on its own stack and TCB; a preemption walk ends here. */
GOSHIM_NO_TSAN GOSHIM_G_ENTRY static void gostart(void *arg)
{
    struct g *gp = arg;
    san_switch_end(NULL);
    if (tls_full())
        tls_thread_start();
    else
        errno_set(0);
    __atomic_store_n(&getm()->locks, 0, __ATOMIC_RELEASE); /* execute's; in the G's code now */
    gp->fn(gp->arg);
    goexit();
}

GOSHIM_NO_TSAN static void mcall_schedule(void *arg)
{
    (void)arg;
    san_switch_end(NULL);
    getm()->curg = NULL;
    schedule();
}

/* Switch the current G out to g0 and run fn there (it never returns). */
void switch_out_to(struct m *mp, struct g *gp, void (*fn)(void *))
{
    if (!tls_full())
        gp->errno_save = errno_get();
    __atomic_store_n(&mp->ong0, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&mp->locks, 0, __ATOMIC_RELEASE);
    cputime_out(mp, gp); /* its CPU-time clock: the slice ends (cputime.c) */
    san_switch_begin(&gp->san_fake, mp->g0_lo, mp->g0_sp - (uintptr_t)mp->g0_lo, mp->g0_fiber);
    ctx_mcall(&gp->sched, fn, NULL, mp->g0_sp);
    san_switch_end(gp->san_fake);
    if (!tls_full())
        errno_set(gp->errno_save);
    /* Resumed, maybe on another M, with the locks == 1 execute gave. */
    __atomic_store_n(&getm()->locks, 0, __ATOMIC_RELEASE);
}

/*
 * Enter a switch from G code: hold the M (locks, so sysmon cannot hand the
 * P off under us) with a P. A G whose P was handed off takes one back
 * first, switching out if none is idle.
 */
static struct m *switch_enter(void)
{
    fork_settled(); /* a fork child's run queues are its parent's until then */
    for (;;) {
        struct m *mp = getm();
        m_locks_enter(mp);
        if (!__atomic_load_n(&mp->pless, __ATOMIC_SEQ_CST))
            return mp;
        m_locks_leave(mp);
        exitsyscall();
    }
}

/* Switch the current G out to g0, which commits mp->rel and schedules. */
static void switch_out(struct m *mp, struct g *gp)
{
    switch_out_to(mp, gp, mcall_schedule);
}

GOSHIM_NO_TSAN void goexit(void)
{
    fork_settled();
    struct g *gp = getg();
    if (tls_full())
        tls_thread_exit();
    struct m *mp = switch_enter(); /* its P may have been handed off: get one to exit on */
    mp->rel = (struct release){REL_EXIT, gp, NULL, NULL};
    cputime_out(mp, gp);
    __atomic_store_n(&mp->ong0, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&mp->locks, 0, __ATOMIC_RELEASE);
    san_switch_begin(NULL, mp->g0_lo, mp->g0_sp - (uintptr_t)mp->g0_lo, mp->g0_fiber);
    ctx_mcall(&gp->sched, mcall_schedule, NULL, mp->g0_sp);
    goshim_throw("goexit: dead G resumed");
}

static struct g *newproc(void (*fn)(void *), void *arg, const struct spawn_attr *a, int *err)
{
    fork_settled(); /* a fork child's P caches are its parent's until then */
    struct g *self = sched_self();
    struct p *pp = self ? getm()->p : NULL;
    size_t size = a && a->stacksize ? a->stacksize : stack_default_size();
    size_t guard = a && a->guardsize != (size_t)-1 ? a->guardsize : stack_default_guard();
    if (a && a->stackaddr)
        guard = 0;

    struct g *gp = gfget(pp);
    if (!gp && !(gp = malg())) {
        *err = EAGAIN;
        return NULL;
    }
    /* As a new thread does, the G starts with its creator's FP control
     * (not with that of the scheduler context that binds its stack later). */
    gp->fpctl = ctx_fpctl();
    /* ... and its signal mask (from another thread: that thread's). */
    gp->sigmask = self ? __atomic_load_n(&self->sigmask, __ATOMIC_RELAXED) : thread_sigmask();
    gp->altstack = (stack_t){.ss_flags = SS_DISABLE}; /* a new thread has none */
    gp->cpu_tsc = 0;                                  /* ... and a CPU-time clock at 0 */
    __atomic_store_n(&gp->ran_to_cut, 0, __ATOMIC_RELAXED);
    gp->cpu_ns = 0;
    /* The stack is bound when the G first runs (bind_stack): a burst of
     * spawns that outruns the Ps then costs a struct g each, not a stack
     * each, and short tasks reuse the stack of the one that just ended. */
    gp->want_stacksize = size;
    gp->want_guard = guard;
    gp->want_stackaddr = a ? a->stackaddr : NULL;
    if (a && a->eager_tls && tls_full() && tls_bind_eager(pp, gp) != 0) {
        gfput(self ? getm()->p : NULL, gp);
        *err = EAGAIN;
        return NULL;
    }
    /* The TCB's DTV is the program's calloc: a G that waited there for a program's lock
     * may be on another M and P now (gfutex_wait). */
    pp = self ? getm()->p : NULL;
    /* A pthread's stack, if its TCB did not bring one: mapped now, so that a failure is
     * pthread_create's EAGAIN, as glibc's, not a thread that cannot start (bind_stack). */
    if (a && a->eager_tls && !a->stackaddr && !stack_fits(gp) && g_stack_alloc(pp, gp) != 0) {
        gfput(pp, gp);
        *err = EAGAIN;
        return NULL;
    }
    gp->fn = fn;
    gp->arg = arg;
    gp->goid = __atomic_add_fetch(&sched.goidgen, 1, __ATOMIC_RELAXED);
    gp->flags &= ~(uint32_t)G_STARTED;
    gp->waitreason = waitReasonZero;
    if (!__atomic_load_n(&schedfork.multi, __ATOMIC_RELAXED)) { /* written once: no line bouncing */
        __atomic_store_n(&schedfork.multi, 1, __ATOMIC_SEQ_CST);
        sched_helpers_start(); /* a fork child's, if it deferred them */
        sysmon_wake();         /* out of its single-thread sleep */
    }
    if (pp) /* a counter of this P's: a shared one moves between CPUs at every spawn */
        __atomic_store_n(&pp->nspawn, pp->nspawn + 1, __ATOMIC_RELAXED);
    else
        __atomic_fetch_add(&sched.nspawned, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&gp->forkgen, schedfork.forkgen, __ATOMIC_RELEASE);
    if (a && a->suspended) {
        castatus_or_throw(gp, Gdead, Gwaiting, "newproc");
        return gp;
    }
    castatus_or_throw(gp, Gdead, Grunnable, "newproc");
    runnable_to(pp, gp);
    return gp;
}

bool sched_lone(void)
{
    return !__atomic_load_n(&schedfork.multi, __ATOMIC_RELAXED) && !sched_chaos;
}

bool sched_spin_worth(void)
{
    int32_t n = sched.gomaxprocs;
    if (n < 2 || sched_chaos)
        return false;
    /* Some other P runs a G (the holder, perhaps), not merely an M looking for work. */
    if (n <= __atomic_load_n(&sched.npidle, __ATOMIC_RELAXED) +
                 __atomic_load_n(&sched.nmspinning, __ATOMIC_RELAXED) + 1)
        return false;
    if (sched_self() == NULL)
        return false; /* not a G: another thread, or an M's scheduler (no GS base on others) */
    struct p *pp = __atomic_load_n(&getm()->p, __ATOMIC_RELAXED);
    return pp && !runqempty(pp);
}

struct g *sched_spawn(void (*fn)(void *), void *arg, const struct spawn_attr *a, int *err)
{
    struct m *mp = acquirem(); /* newproc works on this P's queues and caches */
    struct g *gp = newproc(fn, arg, a, err);
    releasem(mp);
    return gp;
}

void sched_spawn_abandon(struct g *gp)
{
    struct m *mp = acquirem();
    castatus_or_throw(gp, Gwaiting, Gdead, "sched_spawn_abandon");
    __atomic_fetch_sub(&sched.nspawned, 1, __ATOMIC_RELAXED);
    gfput(mp && !mp->ong0 ? mp->p : NULL, gp); /* keeps its stack and TCB for the next */
    releasem(mp);
}

/* gp has a stack of the size and guard it wants, of goshim's making. */
static bool stack_fits(const struct g *gp)
{
    const struct gstack *st = &gp->stack;
    return st->lo && st->kind != STACK_USER && (size_t)(st->hi - st->lo) == gp->want_stacksize &&
           st->guard == gp->want_guard;
}

int g_stack_alloc(struct p *pp, struct g *gp)
{
    g_drop_stack(pp, gp);
    bool injected = fault_inject(FAULT_STACK);
    int r = injected ? -ENOMEM
                     : stack_alloc(pp ? &pp->stackcache : NULL, gp->want_stacksize, gp->want_guard,
                                   &gp->stack);
    if (r == 0)
        return 0;
    memset(&gp->stack, 0, sizeof gp->stack);
    if (fault_first(FAULT_STACK))
        rt_print(2,
                 "goshim: cannot map a %lu-byte thread stack (error %d: out of memory, "
                 "RLIMIT_AS or vm.max_map_count?): pthread_create returns EAGAIN%s\n",
                 (unsigned long)gp->want_stacksize, -r, fault_note(injected));
    return EAGAIN;
}

/*
 * Give gp, about to run for the first time, the stack it asked for: a user
 * stack as given; else its own if it fits; else the stack of the G that
 * just exited on this M (warm in cache); else one from the caches or a new
 * mapping. Runs on g0. A stack that cannot be mapped at all is fatal here:
 * the thread was already reported created.
 */
void bind_stack(struct m *mp, struct g *gp)
{
    struct p *pp = mp->p;
    struct gstack *st = &gp->stack;
    if (gp->want_stackaddr) {
        g_drop_stack(pp, gp);
        stack_user(gp->want_stackaddr, gp->want_stacksize, st);
    } else if (!st->lo || (size_t)(st->hi - st->lo) != gp->want_stacksize ||
               st->guard != gp->want_guard) {
        g_drop_stack(pp, gp);
        struct g *dead = mp->rel.kind == REL_EXIT ? mp->rel.gp : NULL;
        /* Not a block with the dead G's TCB in it: a joiner may still free that block. */
        if (dead && dead->stack.lo && dead->stack.kind != STACK_USER && !dead->stack.tcb &&
            (size_t)(dead->stack.hi - dead->stack.lo) == gp->want_stacksize &&
            dead->stack.guard == gp->want_guard) {
            *st = dead->stack;
            memset(&dead->stack, 0, sizeof dead->stack);
        } else if (g_stack_alloc(pp, gp) != 0) { /* a pthread's was mapped at spawn */
            rt_print(2, "goshim: cannot map a %lu-byte stack for thread %lu: out of memory\n",
                     (unsigned long)gp->want_stacksize, (unsigned long)gp->goid);
            goshim_throw("bind_stack: out of memory");
        }
    }
    ctx_init(&gp->sched, stack_sp_top(st), gostart, gp, gp->fpctl);
#ifdef GOSHIM_SAN
    /* TSan caps live fibers (8128) and makes them slowly: a G gets one at
     * first run, preferably the one of the G that just exited here, and
     * gives it back when it dies (release_commit). */
    if (!gp->san_fiber) {
        struct g *dead = mp->rel.kind == REL_EXIT ? mp->rel.gp : NULL;
        if (dead && dead->san_fiber && !(dead->flags & G_MAIN)) {
            gp->san_fiber = dead->san_fiber;
            dead->san_fiber = NULL;
        } else {
            gp->san_fiber = san_fiber_create();
        }
    }
#endif
}

/* ---- park, ready, yield ------------------------------------------------ */

/*
 * Queue a runnable G: into pp's runnext (the caller is a G running on pp),
 * or onto the global queue when the caller has no P (any other thread).
 * Then make sure an idle P gets an M if there is one.
 */
static void runnable_to(struct p *pp, struct g *gp)
{
    if (pp) {
        runqput(pp, gp, true);
        if (__builtin_expect(sched_chaos, 0))
            __atomic_thread_fence(__ATOMIC_SEQ_CST); /* it may have gone to the ring: wakep */
    } else {
        runtime_lock(&sched.lock);
        globrunqput(gp);
        runtime_unlock(&sched.lock);
    }
    wakep();
    sysmon_kick(0);
}

void gopark(bool (*unlockf)(struct g *, void *), void *lock, int reason)
{
    struct m *mp = getm();
    m_locks_enter(mp); /* no hand-off from here on */
    /* Handed off between its caller's check and here: it cannot switch
     * out without a P, nor drop the caller's lock to wait for one. */
    while (__atomic_load_n(&mp->pless, __ATOMIC_SEQ_CST)) {
        sched_pless_reacquire();
        if (mp->p == NULL)
            osyield();
    }
    struct g *gp = mp->curg;
    if (gp == NULL || gp != getg())
        goshim_throw("gopark: not on a G");
    gp->waitreason = reason;
    __atomic_store_n(&gp->ran_to_cut, 0, __ATOMIC_RELAXED); /* it waits of its own: cut_for */
    mp->p->npark++;
    mp->rel = (struct release){REL_PARK, gp, unlockf, lock};
    switch_out(mp, gp);
    sched_helpers_check(); /* a signal posted to a fork child's absent router meanwhile */
}

bool park_unlock(struct g *gp, void *lock)
{
    (void)gp;
    runtime_unlock(lock);
    return true;
}

void goready(struct g *gp)
{
    fork_settled();
    struct m *mp = acquirem();
    setgstatus_owned(gp, Gwaiting, Grunnable, "goready");
    /* From a G or from an M's scheduler context (timers, netpoll in
     * findrunnable): to this P. From any other thread: the global queue. */
    struct p *pp = sched.started && getg() ? getm()->p : tls_own_m ? tls_own_m->p : NULL;
    if (pp)
        pp->nready++;
    runnable_to(pp, gp);
    releasem(mp);
}

void sched_gosched(void)
{
    struct m *mp = switch_enter();
    struct g *gp = getg();
    mp->p->ngosched++;
    mp->rel = (struct release){REL_GOSCHED, gp, NULL, NULL};
    switch_out(mp, gp);
}

/*
 * sched_yield_explicit: a program's own sched_yield. When no G waits
 * anywhere (no run queue holds one, none is due from a timer) there is
 * nothing to yield to and it returns at once, as sched_yield(2) does on an
 * idle CPU, rather than pay the switch through g0 and the steal attempts
 * that would end in resuming the same G. Otherwise as sched_goyield. Not for
 * preemption's yields, which must give sysmon's waiting G the chance.
 * False when it returned at once.
 */
bool sched_yield_explicit(void)
{
    int64_t next;
    if (!any_runq_nonempty() && ((next = timers_next()) < 0 || next > nanotime())) {
        struct m *mp = acquirem();
        if (mp && mp->p)
            mp->p->ngosched++;
        releasem(mp);
        return false;
    }
    sched_goyield();
    return true;
}

void sched_goyield(void)
{
    struct m *mp = switch_enter();
    struct g *gp = getg();
    mp->p->ngosched++;
    mp->rel = (struct release){REL_YIELD, gp, NULL, NULL};
    switch_out(mp, gp);
    sched_helpers_check(); /* as gopark's */
}

/*
 * Commit m->rel: the G this M switched away from becomes waiting,
 * runnable or dead. Runs on g0 once the FS base is no longer that G's.
 */
void release_commit(struct m *mp)
{
    struct release r = mp->rel;
    mp->rel.kind = REL_NONE;
    struct p *pp = mp->p;
    switch (r.kind) {
    case REL_NONE:
        return;
    case REL_PARK:
        setgstatus_owned(r.gp, Grunning, Gwaiting, "park_m");
        if (r.unlockf && !r.unlockf(r.gp, r.lock)) {
            castatus_or_throw(r.gp, Gwaiting, Grunnable, "park_m");
            runqput(pp, r.gp, true);
        }
        return;
    case REL_GOSCHED:
        setgstatus_owned(r.gp, Grunning, Grunnable, "gosched_m");
        runtime_lock(&sched.lock);
        globrunqput(r.gp);
        runtime_unlock(&sched.lock);
        wakep();
        return;
    case REL_YIELD:
        setgstatus_owned(r.gp, Grunning, Grunnable, "goyield_m");
        runqput(pp, r.gp, false);
        /* Go's goyield does not wake an idle P: here a preempted G yields so (its P
         * keeps it), and an idle P's M, asleep, would never see the queue it waits in. */
        wakep();
        return;
    case REL_EXIT:
        castatus_or_throw(r.gp, Grunning, Gdead, "goexit0");
        tls_static_exit_wait(); /* a late static TLS copy may still write its TCB */
        r.gp->m = NULL;
        /* The G's TCB is installed nowhere now: a joiner may free it. */
        if (sched_hooks.exited)
            sched_hooks.exited(r.gp);
        if (r.gp->tcb == NULL && r.gp->stack.tcb) /* the block went with its TCB, to the join */
            memset(&r.gp->stack, 0, sizeof r.gp->stack);
        r.gp->flags &= ~(uint32_t)G_KEEP_TCB;
        if (r.gp->san_fiber && !(r.gp->flags & G_MAIN)) {
            san_fiber_destroy(r.gp->san_fiber);
            r.gp->san_fiber = NULL;
        }

        gfput(pp, r.gp);
        return;
    }
    goshim_throw("release_commit: bad kind");
}

/* ---- stack overflow lookup (called from the SIGSEGV handler) ----------- */

int sched_stack_lookup(void *addr, unsigned long *id, size_t *size)
{
    struct m *mp = sched.started ? m_of_thread() : NULL;
    if (!mp)
        return 0;
    struct g *gp = mp->curg;
    if (!gp || !gp->stack.lo)
        return 0;
    char *a = addr;
    /* The guard, plus one page below it for frames that skipped over it. */
    if (a >= gp->stack.lo || a < gp->stack.lo - gp->stack.guard - 4096)
        return 0;
    *id = (unsigned long)gp->goid;
    *size = (size_t)(gp->stack.hi - gp->stack.lo);
    return 1;
}
