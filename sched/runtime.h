/*
 * The runtime's types: G (task), M (OS thread), P (logical processor) and
 * the global scheduler state, after Go's runtime2.go. Each field says who
 * owns or locks it.
 *
 * G states (gp->atomicstatus, changed with casgstatus, or setgstatus_owned by the one
 * party that may):
 *   Gidle      just allocated, not yet initialised.
 *   Grunnable  on a run queue (runnext, local ring or global queue); not
 *              executing; its stack and TCB are not owned by anyone.
 *   Grunning   executing on an M that holds a P; owned by that M. A G
 *              stays Grunning while its M switches away from it, until the
 *              M has moved its FS base elsewhere and commits the release
 *              (see struct release).
 *   Gwaiting   parked by gopark; on no run queue; whoever holds the lock
 *              passed to gopark (or the object it protects) readies it.
 *   Gsyscall   in a blocking system call, between entersyscall (or
 *              entersyscallblock) and exitsyscall (syscall.c).
 *   Gdead      exited; on a free list, keeping its stack and TCB.
 *
 * P states: Pidle (on sched.pidle, no M), Prunning (owned by an M),
 * Psyscall, Pdead.
 */
#ifndef GOSHIM_RUNTIME_H
#define GOSHIM_RUNTIME_H

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "api.h"
#include "context.h"
#include "lock.h"
#include "stack.h"

enum gstatus { Gidle, Grunnable, Grunning, Gsyscall, Gwaiting, Gdead };
enum pstatus { Pidle, Prunning, Psyscall, Pdead };

enum waitreason {
    waitReasonZero,
    waitReasonWaitGroup,
    waitReasonSemacquire,
    waitReasonTest,
    waitReasonFutex,
    waitReasonCount
};

enum {
    RUNQ_SIZE = 256,         /* local run queue slots, as Go */
    SCHED_FAIR_TICK = 61,    /* every 61st schedule checks the global queue first */
    STEAL_TRIES = 4,         /* steal rounds; runnext only in the last */
    RUNNEXT_GRACE_NS = 3000, /* a thief leaves a running P's runnext G that long to its owner */
    OWNER_RAN_NAP = 4,       /* graces in a row that saw the owner run it: the thief sleeps */
    GFREE_LOCAL_MAX = 64,    /* per-P free G cache; half goes global above this */
    TCB_PCACHE_MAX = 32,     /* per-P cache of joined threads' TCBs (sched_tcb_free) */
    MAX_PROCS = 1024,
};

/* Flags in gp->flags. */
enum {
    G_STARTED = 1,   /* has run: its TCB holds a thread's state */
    G_TCB_DIRTY = 2, /* TCB used by a previous thread: reset before reuse */
    G_MAIN = 4,      /* the adopted main thread: its TCB and stack are glibc's, never reused */
    G_TCB_BOUND = 8, /* TCB bound at spawn (pthread_create needs the pthread_t); not yet run */
    G_KEEP_TCB =
        16, /* exiting, its TCB (a joinable pthread_t) goes to sched_hooks.exited, not reuse */
    G_PREEMPTQ = 32, /* queued by a preemption (counted in sched.npreemptq) until it runs */
};

struct g {
    struct gobuf sched;    /* saved context; owner: the G's M */
    struct gstack stack;   /* the G's stack; owner: whoever owns the G */
    void *tcb;             /* its glibc TCB (full TLS mode); bound at first execute */
    struct m *m;           /* M executing it, when Grunning */
    uint32_t atomicstatus; /* enum gstatus; casgstatus */
    uint32_t flags;        /* G_*; owner */
    uint64_t goid;         /* unique id, set at newproc */
    struct g *schedlink;   /* global run queue / free lists / wait lists */
    void (*fn)(void *);    /* entry function and argument */
    void *arg;
    int waitreason;      /* enum waitreason, while Gwaiting */
    int waitkind;        /* enum waitkind: what the wrapper it waits in waits for (dump.c) */
    void *waitobj;       /* ... and on which object (a mutex, a thread record...) */
    int errno_save;      /* errno while switched out (GOSHIM_TLS=errno) */
    uint64_t sigmask;    /* blocked signals, bit sig-1; its M's mask while it runs; atomic */
    stack_t altstack;    /* its sigaltstack (ss_sp NULL: none); its M's while it runs; owner */
    uint64_t nswitch;    /* times it was switched in; owner */
    uint32_t ran_to_cut; /* its last run ended in a preemption, not a wait of its own (cut_for,
                            sysmon.c); written by its M, read by sysmon; atomic */
    uint64_t ncalls_preempted; /* sched_ncalls when it resumed from its last preemption
                                  (equal at the next one: a spinner, preempt.c); owner */
    struct g *alllink;         /* sched.allg list; sched.allglock */
    uint64_t fpctl;            /* MXCSR | x87 CW << 32 to start with (the creator's) */
    size_t want_stacksize;     /* stack requested at spawn, bound at first run */
    size_t want_guard;
    void *want_stackaddr; /* pthread_attr_setstack memory, or NULL */
    void *thr;            /* the shim's thread record (a pthread), or NULL */
    void *san_fake;       /* ASan fake stack while switched out (sanitizer builds) */
    void *san_fiber;      /* TSan fiber (sanitizer builds) */
    /* gfutex: the bucket it waits in (set before it checks interrupt; changed by requeue
     * under the bucket locks), its waiter record and whether that is queued (bucket lock),
     * and a pending gfutex_interrupt, consumed by the next or current wait (EINTR). */
    void *gfbucket;
    void *gfwaiter;
    uint32_t gfqueued;
    uint32_t interrupt;
    /* Its CPU-time clock (cputime.c): TSC ticks of the slices it ran while no thread
     * CPU clock was asked for; nanoseconds of the slices measured with its M's CPU clock
     * since; cpu_seq is odd while its M updates them (readers on other threads retry).
     * Written by its M. */
    uint64_t cpu_tsc;
    int64_t cpu_ns;
    uint32_t cpu_seq;
    /* sched.tls_static_gen when its TCB last got every static TLS image (bind, then
     * tls_static_catch_up at its first run; tls_static.c); owner. */
    uint64_t tls_gen;
    uint32_t forkgen; /* schedfork.forkgen when it was last made (newproc): g_status */
};

/*
 * What an M does with the G it just switched away from, once that G's TCB
 * is no longer its FS base (so no two Ms ever share an FS base).
 */
enum release_kind { REL_NONE, REL_PARK, REL_GOSCHED, REL_YIELD, REL_EXIT };
struct release {
    int kind;
    struct g *gp;
    bool (*unlockf)(struct g *, void *);
    void *lock;
};

/* Its first three fields are api.h's struct m_head, which the shim's inline gate reads. */
struct m {
    struct m *self;     /* %gs:0 reads this: getm() */
    uintptr_t pend_rip; /* %gs:8: where a preempted G was interrupted (preempt.c) */
    union {
        struct {
            uint32_t pless;        /* its G runs on without the P it gave up (syscall.c) */
            uint32_t gate_preempt; /* a preemption asked (the P's schedtick + 1), which its
                                      G takes at its next gate (preempt_at_gate); atomic */
        };
        uint64_t gate;
    };
    int64_t id;
    struct g *curg;      /* G running on it, or NULL on g0; owner */
    struct p *p;         /* attached P; owner */
    struct p *nextp;     /* P to attach when woken; set under sched.lock */
    bool spinning;       /* looking for work, counted in sched.nmspinning */
    struct note park;    /* stopm sleeps here */
    struct m *schedlink; /* sched.midle; sched.lock */
    struct m *alllink;   /* sched.allm; sched.lock */
    uintptr_t g0_sp;     /* top of the scheduler stack (g0) */
    char *g0_lo;         /* its lowest byte, for sanitizers */
    void *g0_fiber;      /* TSan fiber of g0 (sanitizer builds) */
    void *g0tcb;         /* the OS thread's own TCB */
    void *curfs;         /* TCB installed as FS base now (full mode) */
    void *real_tcb;      /* glibc's descriptor of its OS thread (M0: the main G's) */
    uint8_t listed;      /* enum tls_listed: glibc's list of real_tcb (fork.c) */
    void *own_arena;     /* its thread's malloc arena, while a G's TCB is installed */
    bool curmain;        /* the TCB installed has main_arena, the main G's (schedule.c) */
    struct release rel;  /* pending release, see above */
    uint64_t fastrand;   /* per-M random state */
    int tid;
    /* counters (owner writes, relaxed; readers tolerate tearing-free 64-bit loads) */
    uint64_t nstopm; /* times it parked on its note */
    uint64_t nwoken; /* times it was woken by startm */
    /*
     * "Inside the runtime": a signal handler that runs here must not take
     * scheduler locks or touch this P's queues, because the code it
     * interrupted may hold or be changing them (gfutex_wake_async defers
     * then). locks counts acquirem() by G code; ong0 is set from the moment
     * a G starts switching to g0 until g0 resumes a G. The owner writes
     * both atomically and keeps one of them set (locks > 0 or ong0) all
     * the time it works on the fields below, so that sysmon, once it has
     * marked mp->pless TAKING and read both as zero, may change them
     * (syscall.c, sched_handoff_asleep): execute hands the G locks == 1,
     * and the G drops it when it is back in its own code. Only an entry
     * from outside (locks 0 -> 1 with ong0 clear: acquirem, switch_enter,
     * entersyscall) needs a full fence before the M reads pless, as
     * sysmon's mark is before it reads these two (Dekker; m_locks_enter
     * says who makes it). Every other
     * change keeps the M inside or leaves it, and needs release order
     * only: the last store that clears the pair is seen after the work.
     */
    int32_t locks;
    uint32_t ong0;
    bool coming;  /* counted in sched.nmcoming until its first stopm */
    bool going;   /* gave its P back: counted in sched.nmgoing until it reaches stopm */
    bool forking; /* its G is in fork(), from our prepare handler to parent or child's */
    bool kept;    /* its G's call kept the P while the process was idle (keep_idle_p); owner */
    /* Where a signal handler that lands on it finds it (sched_route_asleep): asleep in
     * stopm on its note, holding no lock (it may take the scheduler's locks there); or in
     * findrunnable's search or execute, which hand on what is posted to the router before
     * it runs a G or stops (route_posted_here). Owner writes. */
    uint32_t idle_sleep;
    uint32_t routes_soon;
    struct p *oldp; /* the P it gave up in entersyscall; owner */
    /* Async preemption (preempt.c): sysmon's request (the P's schedtick + 1
     * it saw, 0 = none; exchanged by the handler) and an injection that
     * the trampoline has not consumed yet. */
    uint32_t preempt_req;
    uint32_t preempt_pending;
    uint32_t handoff_req;      /* like preempt_req: give up the P where the G stands */
    uint32_t preempt_refusals; /* requests refused as unsafe; atomic, sysmon reads */
    uint32_t preempt_nowalk;   /* the last refusal was in code of no loaded object (a JIT's);
                                  set by the handler, cleared by sysmon; atomic */
    clockid_t cpuclock;        /* its thread's CPU-time clock (sysmon tells running from blocked) */
    /* Its slice timer (preempt.c): a kernel timer on the thread's CPU
     * time that signals the thread itself at the scheduler tick; -1 none.
     * tick_p/tick_sched: the P and schedtick its last signal saw (the
     * same G still running at the next one has run a whole period). */
    int slicetimer;
    int slicetimer_sig;       /* 0: none (atomic: sysmon reads) */
    int64_t slicetimer_retry; /* refused: when to ask again (nanotime) */
    struct p *tick_p;
    uint32_t tick_sched;
    /* Its slice-timer signals (GOSHIM_STATS); owner writes. Here, not in a global: a tick in
     * a forking parent would copy one more page after the fork. */
    uint64_t nticks;
    uint64_t nsyscall; /* blocking system calls; owner writes */
    uint64_t sigmask;  /* the thread's blocked signals in the kernel; owner */
    void *altstack;    /* ss_sp of the thread's sigaltstack in the kernel (NULL: none) */
    stack_t own_alt;   /* its own (goshim's overflow stack): installed under Gs without one */
    /* cputime.c: where the slice of the G it runs started, the TSC (0: unknown) and,
     * once thread CPU clocks are on, its thread CPU clock (0: none yet): the last switch
     * away from a G, or its wake-up from idleness. Owner. */
    uint64_t tsc_mark;
    int64_t cpu_mark;
    /* Retirement (machines.c, m_retire): mstart's context, resumed when the M's thread is
     * to end (sp 0: an M that cannot end, M0 or a fork child's); the alternate stack its
     * thread was given; set once the thread gave everything back (the struct is on
     * sched.mfree, or never started), until newm uses it again. */
    struct gobuf exitctx;
    struct mstacks *stacks; /* allocm's, for good */
    /* The descriptor of the thread last on stacks->own, gone once its tid is 0. */
    void *ownstack_tcb;
    bool retired;
    bool shed; /* taken off sched.midle to end at once (machines_fork_shed) */
};

/* An M's stacks of goshim's making, map NULL where none: its thread's (mretire.c: m_stack),
 * kept for the struct's next thread, and the alternate signal stack its thread was given. */
struct mstacks {
    struct gstack own, alt;
};

struct p {
    int32_t id;
    uint32_t status;      /* enum pstatus */
    struct p *link;       /* sched.pidle; sched.lock */
    uint32_t schedtick;   /* incremented on every schedule that does not inherit time */
    int64_t schedwhen;    /* when its G began its slice, stamped while sysmon sleeps long; atomic */
    int64_t switchwhen;   /* when its G was switched in: stamped with schedwhen, not if inherited */
    uint32_t syscalltick; /* incremented at every system call entry and exit by the P's
                           * owner of the moment (p_tick_call); others read it; atomic */
    uint32_t kepttick;    /* syscalltick of the call that kept it while idle (keep_idle_p) */
    struct m *m;          /* owner M, when Prunning */
    struct m *callm;      /* the M of its latest system call (Psyscall): its CPU time; atomic */
    bool fairdue;         /* the next look takes the global queue first (fair_defer); owner */

    /* Local run queue: lock-free ring. Only the owner writes runqtail and
     * the slots; thieves advance runqhead with CAS. */
    uint32_t runqhead;
    uint32_t runqtail;
    struct g *runq[RUNQ_SIZE];
    struct g *runnext;  /* runs next, inheriting the time slice; CAS */
    uint32_t owner_ran; /* graces in a row that saw its owner run runnext itself; thieves, atomic */

    struct g *gfree; /* dead Gs with stacks; owner */
    int32_t gfreecnt;
    uint32_t gburst; /* Gs taken from gfree since one was last put back (gfget's prefetch) */
    struct stackcache stackcache;   /* owner */
    void *tcbcache[TCB_PCACHE_MAX]; /* TCBs of joined threads, for new Gs; owner */
    uint32_t ntcbcache;             /* owner */

    /* counters: owner writes, relaxed */
    uint64_t nschedule; /* Gs switched in */
    uint64_t nsteal;    /* successful steals */
    uint64_t nstolen;   /* Gs taken by those steals */
    uint64_t nglobget;  /* batches taken from the global queue */
    uint64_t noverflow; /* runqputslow: half the ring moved global */
    uint64_t npark;     /* gopark */
    uint64_t nready;    /* goready */
    uint64_t nspawn;    /* Gs newproc made here (atomic stores: the stats sum them) */
    uint64_t ngosched;  /* Gosched / yield */
};

struct gqueue {
    struct g *head, *tail;
};

struct schedt {
    struct runtime_lock lock; /* protects what is marked sched.lock */
    /* atomic; a line of its own: every spawn adds to it, and sched.lock's line moves
     * between CPUs with the idle Ms and Ps */
    uint64_t goidgen __attribute__((aligned(64)));
    struct m *midle __attribute__((aligned(64))); /* idle Ms; sched.lock */
    int32_t nmidle;                               /* sched.lock */
    int32_t nmcoming; /* made idle (the maker's) and not at stopm yet; sched.lock */
    int32_t nmgoing;  /* gave their P back and not at stopm yet (m->going); sched.lock */
    int32_t mcount;   /* Ms created; sched.lock */
    int32_t maxmcount;
    struct m *allm;       /* sched.lock; retired ones too (m->retired) */
    struct m *mfree;      /* retired Ms, linked by schedlink, for newm; sched.lock */
    int64_t mids;         /* ids given to M structs; sched.lock */
    uint64_t nmretired;   /* Ms whose threads ended; sched.lock */
    int32_t nmfreestacks; /* Ms on mfree that keep a stack (mretire.c); sched.lock */
    struct p *pidle;      /* idle Ps; sched.lock */
    int32_t npidle;       /* atomic (written under sched.lock) */
    int32_t nmspinning;   /* atomic */
    /* Gs in blocking calls that kept their P (keep_idle_p); atomic. On P0's page
     * (procresize), which the main G's blocking calls write anyway: a forking parent copies
     * each page it writes after a fork, and the main thread is the one that forks most. */
    int32_t *nkept;
    int32_t scavasked;  /* an idle M woken to give back stacks (scavenge_ask); atomic */
    struct gqueue runq; /* global run queue; sched.lock */
    int32_t runqsize;   /* sched.lock; read racily as a hint */
    int32_t npreemptq;  /* atomic: runnable Gs that wait because they were preempted */
    /* sysmon sleeps without looking for a while (until sysmon_wake_at):
     * a G that starts to wait while every P runs wakes it (sysmon_kick);
     * 2: past a slice, so the Ps stamp when their Gs begin (schedwhen). */
    int32_t sysmon_longsleep;   /* atomic */
    int64_t sysmon_wake_at;     /* atomic */
    struct runtime_lock gflock; /* global free G list */
    struct g *gfree;            /* gflock */
    int32_t ngfree;             /* gflock */
    struct runtime_lock allglock;
    struct g *allg;   /* allglock */
    uint64_t allglen; /* allglock */
    /* Late static TLS (tls_static.c): bumped, under allglock, for each module whose
     * image went to every G (atomic reads); nonzero while one is being copied. */
    uint64_t tls_static_gen;
    uint32_t tls_static_walking; /* atomic */
    int32_t gomaxprocs;
    struct p *allp[MAX_PROCS];
    size_t tls_g_off;      /* offset of tls_g from the thread pointer */
    uint64_t nspawned;     /* atomic: Gs created without a P, less those abandoned (the
                              stats add every P's nspawn) */
    uint64_t nmthreadfail; /* atomic: M creations that failed or hit the cap */
    int64_t starttime;     /* nanotime at sched_init */
    bool started;
};

extern struct schedt sched;

/* What a fork child writes of the scheduler's state at once (FORK_WRITTEN). */
struct schedfork {
    uint32_t multi;    /* atomic: a G was spawned since start-up or the fork (sched_lone) */
    uint32_t forkgen;  /* forks this process is removed from its first (g_status) */
    uint32_t fork_due; /* atomic: a fork child's reset waits until it needs the runtime */
    struct p *fork_p;  /* ... and the P its thread held at the fork (fork.c) */
    int32_t pid;       /* a fork child's, if a G forked it (sched_fork_pid) */
};
extern struct schedfork schedfork;

_Static_assert(offsetof(struct m, self) == offsetof(struct m_head, self) &&
                   offsetof(struct m, pend_rip) == offsetof(struct m_head, pend_rip) &&
                   offsetof(struct m, pless) == offsetof(struct m_head, pless) &&
                   offsetof(struct m, gate_preempt) == offsetof(struct m_head, gate_preempt) &&
                   offsetof(struct m, gate) == offsetof(struct m_head, gate),
               "struct m must begin with api.h's struct m_head");

/*
 * Functions that are entered and never return (they end by switching to
 * another context) are not instrumented by TSan: its shadow call stack
 * would grow by one frame at every switch.
 */
#define GOSHIM_NO_TSAN __attribute__((no_sanitize("thread")))

/* The M running this code: %gs:0. Valid only on an M. */
__attribute__((always_inline)) static inline struct m *getm(void)
{
    struct m *mp;
    __asm__ volatile("mov %%gs:0, %0" : "=r"(mp));
    return mp;
}

/*
 * An M's entry from outside (m->locks from 0, or switch_enter): one half of
 * the Dekker pair with sysmon's pless mark (struct m). Where the kernel has
 * the private expedited membarrier, sysmon's half makes the fence for both
 * (m_fence_remote): after its mark it runs membarrier, which puts a full
 * barrier on every CPU that runs a thread of the process (a thread that is
 * not running went through a context switch, which is one). Then the M's
 * half is a plain store and a compiler barrier: whether the M's CPU passed
 * that barrier before its store, after its load, or between them, either
 * sysmon sees the store or the M sees the mark. Without it (old kernels, a
 * seccomp filter), the M's half is a locked add. m_asym_fence is chosen at
 * start-up, before any M runs; a fork child inherits it with the registration.
 */
extern bool m_asym_fence;

static inline void m_locks_enter(struct m *mp)
{
    if (__builtin_expect(m_asym_fence, 1)) {
        /* A signal handler on this thread between the two gives back what it takes. */
        __atomic_store_n(&mp->locks, __atomic_load_n(&mp->locks, __ATOMIC_RELAXED) + 1,
                         __ATOMIC_RELAXED);
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
    } else {
        __atomic_add_fetch(&mp->locks, 1, __ATOMIC_SEQ_CST);
    }
}

/* Leaving needs release order only (struct m). */
static inline void m_locks_leave(struct m *mp)
{
    __atomic_store_n(&mp->locks, __atomic_load_n(&mp->locks, __ATOMIC_RELAXED) - 1,
                     __ATOMIC_RELEASE);
}

/* Choose m_asym_fence (registers with membarrier); at start-up and in a fork child. */
void m_fence_init(void);
/* sysmon's half, after it marked pless: false if the fence could not be made. */
bool m_fence_remote(void);
/* A full barrier on every thread of the process that runs now (membarrier); false if the
 * kernel makes none. */
bool m_fence_all(void);

static inline uint32_t fastrand(struct m *mp)
{
    /* xorshift64* */
    uint64_t x = mp->fastrand;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    mp->fastrand = x;
    return (uint32_t)((x * 0x2545F4914F6CDD1DULL) >> 32);
}

static inline uint32_t fastrandn(struct m *mp, uint32_t n)
{
    return (uint32_t)(((uint64_t)fastrand(mp) * n) >> 32);
}

static inline uint32_t readgstatus(struct g *gp)
{
    return __atomic_load_n(&gp->atomicstatus, __ATOMIC_ACQUIRE);
}

/*
 * gp's status as a walk of allg or a question from the shim sees it: Gdead for a G of a
 * parent process. A fork child keeps only the forking thread's G, and tells the others
 * dead by one increment of schedfork.forkgen instead of a write to each (which would touch a
 * page a G: fork.c); a G made since (newproc) carries the new count. Its own status
 * (readgstatus) is what the G's life in this process changes.
 */
static inline uint32_t g_status(struct g *gp)
{
    if (__atomic_load_n(&gp->forkgen, __ATOMIC_ACQUIRE) != schedfork.forkgen)
        return Gdead;
    return readgstatus(gp);
}

#endif
