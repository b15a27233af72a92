/*
 * The scheduler's internal interface: cross-file prototypes of sched/ and
 * the C API that tests and the shim use. Nothing here is exported from
 * libgoshim.so.
 */
#ifndef GOSHIM_SCHED_H
#define GOSHIM_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime.h"

/* ---- configuration (config.c) ---------------------------------------- */

struct sched_config {
    int nprocs;              /* GOSHIM_PROCS: number of P; 0 = usable CPUs */
    int maxthreads;          /* GOSHIM_MAXTHREADS: cap on M */
    size_t stack_size;       /* GOSHIM_STACK: default G stack; 0 = glibc's default */
    int tls_mode;            /* GOSHIM_TLS: TLS_MODE_FULL or TLS_MODE_ERRNO */
    int schedtrace_ms;       /* GOSHIM_SCHEDTRACE: 0 = off */
    bool scheddetail;        /* GOSHIM_SCHEDDETAIL */
    bool stats;              /* GOSHIM_STATS */
    int64_t preempt_ns;      /* GOSHIM_PREEMPT: fixed time slice before async preemption; 0 = off;
                                PREEMPT_KERNEL: the kernel's base slice while others wait */
    int preempt_signal;      /* GOSHIM_PREEMPT_SIGNAL */
    bool preempt_signal_set; /* GOSHIM_PREEMPT_SIGNAL was given */
    bool preempt_handoff;    /* GOSHIM_PREEMPT_HANDOFF: hand off the P of a stuck G */
    int preempt_walk;        /* GOSHIM_PREEMPT_WALK: PREEMPT_WALK_LIBGCC or _LIBUNWIND */
    uint64_t chaos_seed;     /* GOSHIM_CHAOS */
    int deadlock;            /* GOSHIM_DEADLOCK: DEADLOCK_*; applied by the preload only */
    bool chaos;              /* GOSHIM_CHAOS was given */
};

/* Defaults, then the GOSHIM_ variables. A malformed value prints a message
 * naming the variable and the accepted form, and the default is kept.
 * Returns the number of malformed variables. */
int sched_config_from_env(struct sched_config *c);
/* Usable CPUs: the affinity mask, capped by the cgroup v2 cpu.max quota. */
int sched_usable_cpus(void);
/* Parse helpers (exposed for tests). */
bool config_parse_int(const char *s, long min, long max, long *out);
bool config_parse_size(const char *s, size_t *out);
bool config_parse_bool(const char *s, bool *out);
bool config_parse_msec(const char *s, long min, long max, int64_t *out);
bool config_parse_signal(const char *s, int *out);
bool config_parse_seed(const char *s, uint64_t *out);

/* ---- the C API -------------------------------------------------------- */

/* Hook: the real pthread_create (the shim points it past its interposer). */

/* Start the runtime: nprocs Ps, all idle; Ms start on demand. Call once,
 * from an ordinary thread. Returns 0 or an errno value. */
int sched_init(const struct sched_config *c);

/*
 * Turn the calling thread into M0 running the main G: the thread keeps its
 * stack and glibc TCB (pthread_self, errno, __thread stay what they were)
 * and from now on is a G like any other, which may park and migrate. M0's
 * scheduler context gets a fresh TCB and stack. Call once, after
 * sched_init, before spawning. Returns 0 or an errno value.
 */
int sched_adopt_main(void);

struct spawn_attr {
    size_t stacksize; /* 0 = default */
    size_t guardsize; /* (size_t)-1 = default */
    void *stackaddr;  /* user stack (pthread_attr_setstack) or NULL */
    bool eager_tls;   /* bind the TCB now: gp->tcb is the pthread_t (full TLS mode) */
    bool suspended;   /* leave the G waiting: the caller makes it runnable with goready */
};

/* Create a G running fn(arg). From a G: it goes to this P's runnext. From
 * any other thread: to the global queue. Returns NULL with *err set
 * (EAGAIN: no memory for a stack or TCB). */
struct g *sched_spawn(void (*fn)(void *), void *arg, const struct spawn_attr *a, int *err);
/* Throw away a G spawned suspended that never ran (its creation failed later). */
void sched_spawn_abandon(struct g *gp);
/* Hand over the TCB of a joined thread (installed nowhere): cached on the
 * caller's P for the next spawn there, or destroyed. Full TLS mode. */
void sched_tcb_free(void *tcb);
/* Fix the layout of a thread's block (proc.c's top comment): record_size
 * bytes for the shim's thread record. Once, after sched_init, before any
 * spawn. */
void sched_tcb_layout_init(size_t record_size);
/* The record space in gp's block (gp spawned with eager_tls, suspended),
 * or NULL when its TCB is not in its stack block. *zeroed: the bytes are
 * zero (else the caller clears them). Valid until the TCB is freed. */
void *sched_g_record(struct g *gp, bool *zeroed);

/* The current G, or NULL when not called from a G. */
struct g *sched_self(void);
/* gp's status (enum gstatus) and the kernel tid of the M running it (0 if
 * none); a snapshot. The kernel tid of the calling M. */
uint32_t sched_gstatus(struct g *gp);
int sched_gtid(struct g *gp);
int sched_mtid(void);

/* Signal masks (bit sig-1) are per G: the M installs its G's when it
 * switches to it, with a system call only when the two differ. */
uint64_t sched_sigmask(void);          /* the current G's */
void sched_set_sigmask(uint64_t set);  /* the current G's, applied to its M now */
uint64_t sched_gsigmask(struct g *gp); /* another G's, a snapshot */
uint64_t thread_sigmask(void);         /* the calling OS thread's, from the kernel */
/* Start one of goshim's own threads (sysmon, the waker): detached, a small
 * stack, and every signal blocked, so that a signal for the process
 * reaches one of the program's threads, as natively. 0 or an errno value. */
int sched_helper_thread(void *(*fn)(void *));
void m_apply_sigmask(struct m *mp, uint64_t set); /* on mp's own thread */
/* The signals with a program handler, which the shim routes to a thread (bit sig-1,
 * atomic): an idle M blocks them besides its last G's mask (machines.c). */
extern uint64_t sched_routed_signals;
/* sigaltstack is per G too: the current G's, as the system call (0 or an
 * errno value); and the switch-in step that installs a G's on its M. */
int sched_sigaltstack(const stack_t *ss, stack_t *old);
void m_apply_altstack(struct m *mp, struct g *gp);
void m_record_altstack(struct m *mp); /* the M's own, once it has it (stack_thread_init) */

/* Go's Gosched: the G goes to the global run queue and others run. */
void sched_gosched(void);
/* goyield: like Gosched, but to the tail of the local run queue. */
void sched_goyield(void);
/* sched_yield(2) for the program: returns at once when no G waits anywhere, else sched_goyield. */
bool sched_yield_explicit(void);

/* Park the current G. unlockf(gp, lock) runs once the G is switched out
 * and its TCB is no longer installed anywhere; if it returns false the G
 * is made runnable again at once. */
void gopark(bool (*unlockf)(struct g *, void *), void *lock, int reason);
/* Make a parked G runnable (to the readier's runnext when the readier is a
 * G; else to the global queue), waking an idle P if there is one. */
void goready(struct g *gp);
/* gopark's usual unlockf: unlock a runtime_lock. */
bool park_unlock(struct g *gp, void *lock);

/*
 * What the runtime asks of the layer above it, the shim, which knows the
 * threads' records, names and objects. The preload sets them
 * (sched_set_hooks); each may be NULL (unit tests, which link sched/
 * alone), and none may block.
 *   exited       a G ended: after its TCB is installed on no M (so a
 *                joiner may free it), before the G is recycled; it may
 *                take gp->tcb (set it to NULL) when the G had G_KEEP_TCB.
 *   resumed      a G runs again after a preemption or a wait for a P, with
 *                no wrapper around it to deliver the signals sent to it
 *                meanwhile: this does.
 *   describe     a G's name (" \"left\"") and, if it waits, its object, for
 *                dumps and deadlock reports (dump.c).
 *   blocker      the G whose progress gp's wait needs (a mutex's holder,
 *                a joined thread), or NULL, with *gone_id set to the
 *                holder's id when a mutex is held by no G that exists
 *                (allglock held: sched_g_find_locked).
 *   deadlock     DEADLOCK_*: what the detector does (GOSHIM_DEADLOCK); off
 *                until the preload arms it, once the program runs.
 */
struct sched_hooks {
    void (*exited)(struct g *gp);
    void (*resumed)(void);
    void (*describe)(struct g *gp, char *name, size_t nlen, char *obj, size_t olen);
    struct g *(*blocker)(struct g *gp, int *gone_id);
    int deadlock;
};
extern struct sched_hooks sched_hooks;
void sched_set_hooks(const struct sched_hooks *h);
/* The first G, not dead, that match accepts; for the hooks (allglock held). */
struct g *sched_g_find_locked(bool (*match)(struct g *gp, void *arg), void *arg);

/* Deadlock reports and thread dumps (dump.c). A wrapper says what its G
 * is about to wait for (cleared with WAIT_NONE once it is back); the shim
 * names threads and objects. */
enum waitkind {
    WAIT_NONE,
    WAIT_MUTEX,
    WAIT_COND,
    WAIT_RWLOCK,
    WAIT_SEM,
    WAIT_JOIN,
    WAIT_BARRIER,
    WAIT_ONCE,
    WAIT_SLEEP,
    WAIT_IO,
    WAIT_FUTEX,
    WAIT_SIGNAL,
    WAIT_KINDS
};
enum { DEADLOCK_OFF, DEADLOCK_REPORT, DEADLOCK_ABORT };
void sched_set_wait(int kind, void *obj);
/* gp's name and, if it waits, what for (" \"left\" [mutex 0x..., held by thread 3]"). */
void sched_describe(struct g *gp, char *buf, size_t len);
void leaks_print(int fd);  /* GOSHIM_STATS at exit: threads still waiting, and true leaks */
void deadlock_check(void); /* sysmon, every round */
void quit_install(void);   /* a SIGQUIT handler, if the program has none */
void quit_check(void);     /* sysmon: dump and exit after SIGQUIT */
bool sched_quit_handler_is(void (*h)(int));
void sysmon_wake(void);
/* A G begins to wait for a P (created, woken, back from a system call
 * without one) or a timer is set for when: if every P runs and sysmon
 * sleeps past that without looking, wake it (sysmon.c). One load when it
 * does not. */
void sysmon_kick_slow(int64_t when);
static inline void sysmon_kick(int64_t when)
{
    if (__builtin_expect(__atomic_load_n(&sched.sysmon_longsleep, __ATOMIC_RELAXED), 0))
        sysmon_kick_slow(when);
}
/* A G queued by a preemption runs again (execute): it no longer counts
 * among the preempted waiters sysmon weighs (sysmon.c). Owner only. */
static inline void preemptq_leave(struct g *gp)
{
    if (__builtin_expect(gp->flags & G_PREEMPTQ, 0)) {
        gp->flags &= ~(uint32_t)G_PREEMPTQ;
        __atomic_sub_fetch(&sched.npreemptq, 1, __ATOMIC_RELAXED);
    }
}

/* Chaos mode (chaos.c). */
extern bool sched_chaos;
void chaos_init(uint64_t seed);
uint64_t chaos_rand(void);           /* the next draw of the seeded generator */
uint64_t chaos_seed_for(int64_t id); /* a per-M generator seed */
void chaos_yield(void);              /* a wrapper boundary: maybe yield the P */
/* Calls into goshim's wrappers by the running thread: per G with per-G
 * TLS, per OS thread in errno mode. preempt.c tells a spinner by it (no
 * call between two preemptions). One TLS increment, safe on any thread. */
extern __thread uint64_t sched_ncalls
    __attribute__((tls_model("initial-exec"), visibility("hidden")));
static inline void sched_note_call(void)
{
    sched_ncalls++;
}
static inline void chaos_point(void)
{
    if (__builtin_expect(sched_chaos, 0))
        chaos_yield();
}
/* Ask gp, if it runs, to yield at its next safe point (preempt.c). */
void sched_preempt_g(struct g *gp);

/*
 * acquirem marks the M of the calling G "inside the runtime" until
 * releasem (see struct m); NULL (and nothing to release) when not on a G.
 * A G that parks drops its marks: do not releasem after gopark returns.
 */
struct m *acquirem(void);
void releasem(struct m *mp);
/* True when the calling thread is an M inside the runtime (see struct m). */
bool m_in_runtime(void);
/* The M's own TCB marker: set on an M's own thread (g0's TLS). */
void m_mark_own_tls(struct m *mp, void *tcb);

/* End the current G (what returning from its function does). */
__attribute__((noreturn)) void goexit(void);

/* ---- internals shared between files ----------------------------------- */

/* proc.c */
bool casgstatus(struct g *gp, uint32_t oldval, uint32_t newval);
struct g *gfget(struct p *pp);
void gfput(struct p *pp, struct g *gp);
void release_commit(struct m *mp);
void bind_stack(struct m *mp, struct g *gp);
void bind_tcb(struct m *mp, struct g *gp);
struct g *malg(void);

/* schedule.c */
__attribute__((noreturn)) void schedule(void);
struct g *findrunnable_local(struct p *pp, bool *inherit);
struct g *stealwork(struct m *mp, struct p *pp, int *round);
void wakep(void);
void resetspinning(struct m *mp);
void restore_own_fs(struct m *mp);
__attribute__((noreturn)) void execute(struct m *mp, struct g *gp, bool inherit);
void switch_out_to(struct m *mp, struct g *gp, void (*fn)(void *));

/* ---- per-G CPU-time clocks (cputime.c) ---- */
extern bool cputime_on; /* a thread CPU clock was asked for: slices are measured exactly */
void cputime_out_exact(struct m *mp, struct g *gp);
/* The G leaves its M (a switch, or its exit): charge it the slice since the M's mark, which
 * is where the next slice on this M starts. */
static inline void cputime_out(struct m *mp, struct g *gp)
{
    if (__builtin_expect(cputime_on, 0)) {
        cputime_out_exact(mp, gp);
        return;
    }
    uint64_t now = __builtin_ia32_rdtsc();
    if (mp->tsc_mark)
        gp->cpu_tsc += now - mp->tsc_mark;
    mp->tsc_mark = now;
}
/* The M starts running Gs, or wakes from idleness: its next slice starts now. */
static inline void cputime_m_ready(struct m *mp)
{
    mp->tsc_mark = __builtin_ia32_rdtsc();
}
/* gp's CPU time in ns (the calling G's, or any other's); the first call turns exact
 * measurement on. */
int64_t cputime_of(struct g *gp);
/* The G whose fake tid (its TCB's) is tid, or NULL. */
struct g *cputime_g_by_tid(unsigned tid);
/* The calling OS thread's own CPU-time clock id (never the G's). */
clockid_t m_cpuclock(void);

/* syscall.c: around a system call that may block (the P is handed off).
 * entersyscall returns false when it did nothing (not on a G holding a P:
 * a signal handler inside another call, or g0); then skip exitsyscall. */
bool entersyscall(void);
bool entersyscallblock(void); /* the same, handing the P off at once */
void exitsyscall(void);
void handoffp(struct p *pp);
/* The handoff of a P from a G that stays away from the runtime (syscall.c):
 * done on its own M by the preemption handler, which holds one mp->locks
 * while it runs; undone at the shim's gate. */
bool sched_handoff_self(struct m *mp);
bool sched_handoff_asleep(struct m *mp, bool (*still_asleep)(struct m *));
void sched_pless_reacquire(void);
/* The same at a wrapper's entry, yielding to the Gs that wait meanwhile. */
void sched_pless_return(void);
/* The gate at a G's every entry into the shim, "may I run here": a G
 * whose P was handed off while it stayed away takes one back (one load). */
static inline void sched_gate(void)
{
    if (__builtin_expect(__atomic_load_n(&getm()->pless, __ATOMIC_SEQ_CST), 0))
        sched_pless_return();
}

/* sysmon.c */
int sysmon_start(int trace_ms, bool detailed);
/* Fork child resets of each part of the runtime (fork.c calls them). */
void sysmon_fork_child(void);
void machines_fork_child(void);
/* setxid.c: set*id calls work while Gs run on Ms (call once, at start-up). */
void setxid_init(void);
void timers_fork_child(void);
void gfutex_fork_child(void);
/* fork.c: pthread_atfork handlers; registered by sched_init. */
void sched_fork_prepare(void);
void sched_fork_parent(void);
void sched_fork_child(void);
/* errno of whatever TCB is the FS base now, through a call the compiler
 * cannot fold across an FS switch (__errno_location is "const"). */
int errno_get(void);
void errno_set(int v);
int sysmon_threads(void);
uint64_t sysmon_retakes(void);
void sched_steal_order_init(uint32_t n);

/* runq.c */
void runqput(struct p *pp, struct g *gp, bool next);
struct g *runqget(struct p *pp, bool *inherit);
bool runqempty(struct p *pp);
/* Whether any G waits in the global queue or in any P's local queue. */
bool any_runq_nonempty(void);
uint32_t runqlen(struct p *pp);
struct g *runqsteal(struct p *pp, struct p *victim, bool stealRunNextG);
void globrunqput(struct g *gp);
void globrunqputhead(struct g *gp);
void globrunqputbatch(struct gqueue *batch, int32_t n);
struct g *globrunqget(struct p *pp, int32_t max);

/* procs.c */
int procresize(int32_t nprocs);
void acquirep(struct p *pp);
struct p *releasep(void);
void pidleput(struct p *pp);
struct p *pidleget(void);

/* machines.c */
void startm(struct p *pp, bool spinning);
void stopm(void);
void mput(struct m *mp);
struct m *mget(void);
struct m *allocm(void);

/* trace.c */
void schedtrace(bool detailed);
void stats_print(int fd);
void stats_at_exit(void);
void stats_open(void);

/* tls glue (proc.c) */
int sched_stack_lookup(void *addr, unsigned long *id, size_t *size);

/* ---- timers and the idle Ms (machines.c; timer API in timer.h) ---------- */

/* timer_add made a new earliest timer, due at when: wake an M for it. */
void timer_wakeup(int64_t when);
/* Take mp off sched.midle; false if not there. sched.lock must be held. */
bool mremove(struct m *mp);

#endif
