/*
 * The runtime's public interface: all that the layer above it, the shim and
 * the preload, may use of sched/. The G, M and P stay opaque here (struct g
 * and struct m are only named): the shim reads a G through the accessors
 * below, never through its fields, and the runtime learns about threads'
 * records and objects only through struct sched_hooks. The netpoller's
 * descriptors are opaque too: an I/O wrapper drives one call through the
 * readiness protocol below and reads no descriptor field. Three small
 * headers of primitives come with it as they are: lock.h (runtime locks,
 * notes, nanotime), gfutex.h (the futex table every wait parks on) and
 * throw.h (printing without malloc, assertions, raw system calls).
 *
 * sched/'s own files include sched.h, which adds the types (runtime.h) and
 * the internals shared between them; scripts/check-layers.sh fails the
 * build's tests if shim/ or preload/ includes anything of sched/ but this
 * file. Nothing here is exported from libgoshim.so.
 *
 * Contents, in order (the files that define each part):
 *   configuration             config.c: struct sched_config, the GOSHIM_ variables
 *   fault injection           fault.c: GOSHIM_FAULT's failures, at the failure sites
 *   start-up and Gs           schedinit.c, proc.c, threadblock.c: sched_init,
 *                             sched_spawn, a thread's TCB and record
 *   signal state per G        signal.c, machines.c: masks, sigaltstack, routed
 *                             signals, the runtime's own threads
 *   yielding and parking      proc.c: sched_gosched, gopark, goready
 *   the hooks                 schedinit.c: what the runtime asks of the shim
 *   dumps and deadlocks       dump.c: what a G waits for, SIGQUIT
 *   chaos and preemption      chaos.c, proc.c, preempt.c: chaos_point,
 *     requests                sched_ncalls, sched_preempt_g
 *   inside the runtime        proc.c: acquirem, releasem, goexit
 *   system calls and the gate syscall.c: entersyscall, exitsyscall, sched_gate
 *   CPU-time clocks           cputime.c
 *   a G as the shim sees it   api.c: ids, TCB, record, stack, liveness
 *   TLS                       tls.c, tls_static.c
 *   preemption                preempt.c: application text, the signals goshim owns
 *   the netpoller             netpoll.c: descriptors, the readiness protocol of one
 *                             I/O call, per-fd state the application sets
 *   goshim's own descriptors  ownfd.c
 */
#ifndef GOSHIM_API_H
#define GOSHIM_API_H

#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <unwind.h>

#include "gfutex.h"
#include "lock.h"
#include "throw.h"

struct g;
struct m;

/* ---- configuration (config.c) ---------------------------------------- */

/* GOSHIM_FAULT (fault.c): which failures to inject, one call in rate[k] of kind k. */
enum fault_kind { FAULT_STACK, FAULT_M, FAULT_POLLER, FAULT_TIMER, FAULT_SIGQUEUE, FAULT_NKINDS };
struct fault_spec {
    uint32_t kinds; /* bit per kind; 0 = no faults */
    uint32_t rate[FAULT_NKINDS];
    uint64_t seed;
    bool seeded; /* seed:S was given */
};

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
    int preempt_walk;        /* GOSHIM_PREEMPT_WALK: PREEMPT_WALK_LIBGCC, _LIBUNWIND, _BOTH */
    uint64_t chaos_seed;     /* GOSHIM_CHAOS */
    int deadlock;            /* GOSHIM_DEADLOCK: DEADLOCK_*; applied by the preload only */
    bool chaos;              /* GOSHIM_CHAOS was given */
    bool start_now;          /* GOSHIM_START=now: at load, not at the first pthread_create;
                                applied by the preload only */
    struct fault_spec fault; /* GOSHIM_FAULT */
};

/* Defaults, then the GOSHIM_ variables. A malformed value prints a message
 * naming the variable and the accepted form, and the default is kept.
 * Returns the number of malformed variables. */
int sched_config_from_env(struct sched_config *c);
/* Usable CPUs: the affinity mask, capped by the cgroup v2 cpu.max quota. */
int sched_usable_cpus(void);
/* The CPUs a cgroup v2 cpu.max text allows (rounded up); 0 for none (max) or not one. */
int sched_cpu_max_cpus(const char *text);

/* ---- fault injection (fault.c) ----------------------------------------- */

/* Parse a GOSHIM_FAULT list into *out; false with why naming the bad part. */
bool fault_parse(const char *s, struct fault_spec *out, char *why, size_t nwhy);
/* Arm the kinds of spec (sched_init; before any M). chaos_seed: GOSHIM_CHAOS's, or NULL. */
void fault_init(const struct fault_spec *spec, const uint64_t *chaos_seed);
extern uint32_t fault_kinds; /* bit per armed kind; written once, before any M */
bool fault_draw(enum fault_kind k);
/* Whether this call of kind k is to fail (GOSHIM_FAULT): one predicted branch when off. */
static inline bool fault_inject(enum fault_kind k)
{
    if (__builtin_expect(fault_kinds == 0, 1))
        return false;
    return fault_draw(k);
}
/* True the first time only, per kind: the caller says what failed and what goshim does. */
bool fault_first(enum fault_kind k);
/* What a failure message ends with: says whether GOSHIM_FAULT made the failure. */
const char *fault_note(bool injected);

/* ---- start-up and Gs (schedinit.c, proc.c, threadblock.c) ------------- */

/* Start the runtime: nprocs Ps, all idle; Ms start on demand. Call once,
 * from an ordinary thread. Returns 0 or an errno value. */
int sched_init(const struct sched_config *c);
/* Register the runtime's fork handlers (sched_init does, once): before the program
 * registers its own, when the runtime starts later (glibc runs prepare handlers in reverse
 * order of registration, child handlers in order: fork.c says why ours come first). */
int sched_atfork_init(void);
/* pthread_atfork(prepare, parent, child) unless *done, which it sets once registered: a
 * handler registered at load and again by a later start stays registered once. */
int sched_atfork_once(bool *done, void (*prepare)(void), void (*parent)(void), void (*child)(void));
/* In a fork child's handlers after the runtime's: the child's pid if a G forked it (its one
 * thread's tid, which the runtime's handler read), else 0. Saves them a getpid each. */
int sched_fork_pid(void);

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
/*
 * One thread so far: no G but the first has been created since start-up, or since the
 * fork that made this process (the child has only the thread that forked), and chaos is
 * off. Such a thread's blocking calls go straight to the kernel, as glibc's: no other
 * thread could run meanwhile. Set for good by the first spawn (proc.c), cleared in a fork
 * child (fork.c).
 */
bool sched_lone(void);
/* Whether a G that found a lock held should spin a while before it parks: more than one P,
 * another P running a G (the holder may be about to let go), no chaos, and Gs queued on
 * the caller's P. Parking would switch to one of those (two G switches, one FS-base write
 * each), which is dearer than the spin; with none queued, parking idles the P and leaves the
 * holder to run uncontended, which is what a lock taken in a tight loop does best. */
bool sched_spin_worth(void);
/* Throw away a G spawned suspended that never ran (its creation failed later). */
void sched_spawn_abandon(struct g *gp);
/* Hand over the TCB of a joined thread (installed nowhere): cached on the
 * caller's P for the next spawn there, or destroyed. Full TLS mode. */
void sched_tcb_free(void *tcb);
/* Fix the layout of a thread's block (threadblock.c's top comment): record_size
 * bytes for the shim's thread record. Once, after sched_init, before any
 * spawn. */
void sched_tcb_layout_init(size_t record_size);
/* The record space in gp's block (gp spawned with eager_tls, suspended),
 * or NULL when its TCB is not in its stack block. *zeroed: the bytes are
 * zero (else the caller clears them). Valid until the TCB is freed. */
void *sched_g_record(struct g *gp, bool *zeroed);

/* The current G, or NULL when not called from a G. */
struct g *sched_self(void);
/* The kernel tid of the calling M. */
int sched_mtid(void);

/* ---- signal state per G (signal.c, machines.c) ------------------------- */

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
/* Helper threads made in this process (GOSHIM_STATS). */
uint32_t sched_helpers_made(void);
/* In a fork child of one thread, record start to be called when the child first needs its
 * helpers (true), instead of now (false: call it). See machines.c. */
bool sched_helper_defer(int (*start)(void));
bool sched_helpers_deferred(void);
void sched_helpers_want(void);  /* async-signal-safe: start them at the next safe point */
void sched_helpers_start(void); /* from a G's own call or a lock-free scheduler context */
/* sched_helpers_start if a signal handler asked for them; true if it started them now. */
bool sched_helpers_check(void);
/* The helpers only routed signals need (the router, the waker): record start for the first
 * routed signal (true), or false: call it now (one was routed already). helpers.c. */
bool sched_helper_for_signals(int (*start)(void));
bool sched_signal_helpers_lazy(void); /* not started (yet) */
/* Start them, if not yet: from a context that may make threads (no handler, no lock). True
 * if this call made them. */
bool sched_signal_helpers_start(void);
/* Async-signal-safe: start them at the next safe point (sched_helpers_check). */
void sched_signal_helpers_want(void);
/* The signals the shim routes to a thread (bit sig-1, atomic): those with a program handler,
 * and those at their default action that a thread has blocked (shim/signal.c). An idle M
 * blocks them besides its last G's mask (machines.c). */
extern uint64_t sched_routed_signals;
/* Add set to sched_routed_signals, and have every idle M block it before this returns (a
 * bounded wait; none from inside the runtime). */
void sched_idle_block(uint64_t set);
/* sigaltstack is per G too: the current G's, as the system call (0 or an
 * errno value). */
int sched_sigaltstack(const stack_t *ss, stack_t *old);

/* ---- yielding and parking (proc.c) ------------------------------------- */

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

/* ---- the hooks (schedinit.c) ------------------------------------------- */

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
 *   signal_may_wake  whether a handler of the program's may still wake a
 *                parked G (a signal from outside can come): then every G
 *                asleep is no deadlock.
 *   deadlock     DEADLOCK_*: what the detector does (GOSHIM_DEADLOCK); off
 *                until the preload arms it, once the program runs.
 */
struct sched_hooks {
    void (*exited)(struct g *gp);
    void (*resumed)(void);
    void (*describe)(struct g *gp, char *name, size_t nlen, char *obj, size_t olen);
    struct g *(*blocker)(struct g *gp, int *gone_id);
    bool (*signal_may_wake)(void);
    /* An M at a point of its scheduler that holds no lock: hand on the signals posted for
     * the router that it can (see shim/sigroute.c). */
    void (*route_posted)(bool here); /* here false: the router, if anything is posted */
    /* The routed signals an idle M lets through (sched_routed_signals: the rest it blocks):
     * those it hands on itself when one lands on it (sched_route_asleep). */
    uint64_t (*idle_lets)(void);
    /* Whether the calling G runs a handler of the program's (no preemption at its gate). */
    bool (*in_handler)(void);
    int deadlock;
};
extern struct sched_hooks sched_hooks;
void sched_set_hooks(const struct sched_hooks *h);
/* The first G, not dead, that match accepts; for the hooks (allglock held; api.c). */
struct g *sched_g_find_locked(bool (*match)(struct g *gp, void *arg), void *arg);

/* ---- dumps and deadlocks (dump.c) -------------------------------------- */

/* Deadlock reports and thread dumps. A wrapper says what its G
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
void quit_install(void); /* a SIGQUIT handler, if the program has none */
bool sched_quit_handler_is(void (*h)(int));

/* ---- chaos and preemption requests (chaos.c, proc.c, preempt.c) -------- */

/* Chaos mode (chaos.c). */
extern bool sched_chaos;
void chaos_yield(void);     /* a wrapper boundary: maybe yield the P */
void sched_chaos_arm(void); /* the shim is on: chaos_yield may yield from now */
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

/* ---- inside the runtime (proc.c) --------------------------------------- */

/*
 * acquirem marks the M of the calling G "inside the runtime" until
 * releasem (see struct m); NULL (and nothing to release) when not on a G.
 * A G that parks drops its marks: do not releasem after gopark returns.
 */
struct m *acquirem(void);
void releasem(struct m *mp);
/* True when the calling thread is an M inside the runtime (see struct m). */
bool m_in_runtime(void);
/*
 * For a signal handler on goshim's scheduler: *where says where the M it interrupted is.
 * M_ASLEEP: asleep in stopm, holding no lock; then route(sig, info) is called, and returned:
 * it may take the scheduler's locks, and a G it readies is run by this M (startm wakes it
 * first). M_ROUTES_SOON: looking for work, and hands on what is posted to the router before
 * it runs a G or stops. Else -1.
 */
enum { M_ELSEWHERE, M_ASLEEP, M_ROUTES_SOON };
/* gp is the G the calling M is switching to (it hands on posted signals in execute): what
 * is pending for it is taken as it resumes, no bell needed. */
bool sched_g_resuming_here(struct g *gp);
int sched_route_asleep(int (*route)(int, const siginfo_t *), int sig, const siginfo_t *info,
                       int *where);

/* End the current G (what returning from its function does). */
__attribute__((noreturn)) void goexit(void);

/* ---- system calls and the gate (syscall.c) ----------------------------- */

/* Around a system call that may block (syscall.c): the P is handed off.
 * entersyscall returns false when it did nothing (not on a G holding a P:
 * a signal handler inside another call, or g0); then skip exitsyscall. */
bool entersyscall(void);
bool entersyscallblock(void); /* the same, handing the P off at once */
/* entersyscallblock, having waited first, parked, while no OS thread could be had for the
 * Gs its P leaves (sched/mmaker.c): for a call that prepared nothing on its OS thread. */
bool entersyscallblock_waiting(void);
/* entersyscall only while the process is otherwise idle (a P idle, nothing runnable: the P
 * stays attached, sysmon retakes it if work comes); false: did nothing, the caller parks. */
bool entersyscall_idle(void);
void exitsyscall(void);
/*
 * A raw system call (nr and its arguments) made only while *word == seen: a handler that
 * moved the word on between the check and the kernel's entry (a signal delivered in user
 * mode just before the call) makes it return SCHED_SYSCALL_SIGNALLED rather than wait,
 * once sched_checked_syscall_rewind has seen the handler's interrupted context: call it
 * after each handler of the program's, with its ucontext (checked_syscall_x86_64.S).
 * Otherwise the kernel's result: the value, or -errno.
 */
#define SCHED_SYSCALL_SIGNALLED (LONG_MIN + 1)
long sched_checked_syscall(long nr, long a, long b, long c, long d, long e, const uint32_t *word,
                           uint32_t seen);
void sched_checked_syscall_rewind(void *ucontext);
/* A G whose P was handed off while it stayed away from the runtime takes
 * one back at a wrapper's entry, yielding to the Gs that wait meanwhile. */
void sched_pless_return(void);
/* The gate's slow path: sched_pless_return, or the preemption asked of the G (syscall.c). */
void sched_gate_slow(void);
/*
 * The head of every M, at the address %gs:0 holds on an M's thread: what
 * the inline gate reads. struct m begins with these fields (runtime.h
 * checks it); nothing else of an M is public.
 */
struct m_head {
    struct m *self;     /* the M itself */
    uintptr_t pend_rip; /* where a preempted G was interrupted (preempt.c's) */
    union {
        struct {
            uint32_t pless;        /* its G runs on without the P it gave up (syscall.c) */
            uint32_t gate_preempt; /* a preemption its G takes at the gate (preempt.c) */
        };
        uint64_t gate; /* both, for the gate's one load */
    };
};
/* The gate at a G's every entry into the shim, "may I run here": a G
 * whose P was handed off while it stayed away takes one back, and a G asked
 * to yield its P does so here, where a switch is safe (one load). */
static inline void sched_gate(void)
{
    const struct m_head *h;
    __asm__ volatile("mov %%gs:0, %0" : "=r"(h));
    if (__builtin_expect(__atomic_load_n(&h->gate, __ATOMIC_SEQ_CST) != 0, 0))
        sched_gate_slow();
}

/* ---- per-G CPU-time clocks (cputime.c) -------------------------------- */

/* gp's CPU time in ns (the calling G's, or any other's); the first call turns exact
 * measurement on. */
int64_t cputime_of(struct g *gp);
/* The G whose fake tid (its TCB's) is tid, or NULL. */
struct g *cputime_g_by_tid(unsigned tid);

/* ---- a G as the shim sees it (api.c) ---------------------------------- */

/* Its id (Go's goid): unique, never reused; the thread number of dumps. */
uint64_t sched_g_id(struct g *gp);
/* Its glibc TCB in full TLS mode (NULL before it is bound, or once taken). */
void *sched_g_tcb(struct g *gp);
/* The shim's record of the thread gp runs, or NULL: an acquire load; and
 * setting it (a release store), before gp first runs or from its exit hook. */
void *sched_g_thread(struct g *gp);
void sched_g_set_thread(struct g *gp, void *thr);
/* The argument its function gets: gp spawned suspended, not yet run. */
void sched_g_set_arg(struct g *gp, void *arg);
/* What gp waits for in a wrapper (enum waitkind, from sched_set_wait) and
 * on which object; a snapshot. */
int sched_g_waiting(struct g *gp, void **obj);
/* Its stack: usable bytes from *lo, and the guard below them; false when
 * it has none yet (not run); a snapshot. */
bool sched_g_stack(struct g *gp, void **lo, size_t *size, size_t *guard);
/* The calling G ends with a TCB its joiner still needs (a joinable
 * pthread_t): its exited hook takes it with sched_g_take_tcb, and hands it
 * back with sched_tcb_free, instead of the runtime recycling it. */
void sched_keep_tcb(void);
void *sched_g_take_tcb(struct g *gp); /* exited hook only; NULL if not kept */
/* gp has ended (a G is never freed: it may be asked about at any time). */
bool sched_g_dead(struct g *gp);
/* The kernel tid of the M on which gp runs or sits in a system call, 0 when
 * it does neither (queued, parked, dead); a snapshot. */
int sched_g_cpu_tid(struct g *gp);
/* In a signal handler, on any thread: whether the thread is one of the
 * runtime's Ms (false: a thread goshim does not run); then the G it runs
 * (*gp, NULL on its scheduler context), and whether the handler
 * interrupted that G's own code (*on_g) rather than a switch. */
bool sched_signal_context(struct g **gp, bool *on_g);
/* The first G, not dead, that match accepts, with allglock taken (try:
 * only tried; NULL and *busy if another holds it). */
struct g *sched_g_find(bool (*match)(struct g *gp, void *arg), void *arg, bool try, bool *busy);

/* ---- TLS (tls.c, tls_static.c) ---------------------------------------- */

/* GOSHIM_TLS: each G has its own glibc TCB (full), or the Ms' TCBs are
 * shared and only errno is switched (errno mode). */
enum tls_mode { TLS_MODE_FULL = 0, TLS_MODE_ERRNO = 1 };
extern int tls_mode; /* effective mode after tls_init: the one record of it */
/* Per-G TCBs in use (TLS_MODE_FULL): each G has its own TLS. */
static inline bool tls_full(void)
{
    return tls_mode == TLS_MODE_FULL;
}
/* The current thread pointer (%fs:0). TLS-free. */
void *tls_self(void);
/* Where a TCB keeps its thread's tid, from the thread pointer: set once full mode is on
 * (0 until then), for an owner id read as glibc reads its own, one %fs load (sync.h). */
extern size_t tls_tid_off;
/*
 * Late static TLS (tls_static.c): the image of a module with static TLS
 * that dlopen loaded while Gs exist, copied into every G's TCB (glibc
 * does so only for the threads on its lists). (base, modid) name the
 * module as dl_iterate_phdr does; block is its TLS block on the calling
 * thread (__tls_get_addr); filesz bytes of image, zeros to memsz. Once per
 * module; false if nothing was copied. forget drops the modules that
 * loaded() says are gone (dlclose); count is how many are remembered.
 */
bool sched_tls_static_init(uintptr_t base, size_t modid, void *block, const void *image,
                           size_t filesz, size_t memsz);
void sched_tls_static_forget(bool (*loaded)(uintptr_t base, size_t modid, void *arg), void *arg);
int sched_tls_static_count(void);
/* The fake tid stored in a TCB (full mode): what gettid says on that G. */
unsigned tls_tcb_tid(void *tcb);
/* A fresh fake tid, from the TCBs' sequence (errno mode: a G's id without a TCB). */
unsigned tls_fake_tid(void);
/*
 * The thread's last act, on its own TCB: thread_local destructors
 * (__call_tls_dtors) and the dlerror state. Key destructors are the
 * shim's job.
 */
void tls_thread_exit(void);
/*
 * Then, once its key destructors ran: what the kernel does with an OS thread's robust
 * list when the thread ends, for the G's own list (the kernel knows only the Ms' lists,
 * by their real tids): each mutex the thread still owns gets FUTEX_OWNER_DIED and one
 * waiter is woken, so the next lock returns EOWNERDEAD, as natively. Full mode only (in
 * errno mode the Gs of an M share its list). Not for priority-inheritance mutexes.
 */
void tls_robust_exit(void);

/* ---- preemption (preempt.c) ------------------------------------------- */

/* A large zeroed table of which a process touches little (a slot per P, per signal, per
 * fd, a cache): placed after the small variables (.lbss follows .bss), which then lie on a
 * few pages together; spread among the tables, a start wrote into 25 pages of .bss, a page
 * fault apiece (2 us on a PVM guest). */
#define GOSHIM_LARGE __attribute__((section(".lbss.goshim")))

/* G entry functions: the bottom of the safety walk's unwinding. */
#define GOSHIM_G_ENTRY __attribute__((section("goshim_bottom"), noinline))
/* Rebuild the table of application text (after dlopen/dlclose). */
void preempt_refresh(void);
/* The application's view of the signals goshim handles (shim's sigaction):
 * preempt_owns says whether sig is one; preempt_app_action records act (if
 * not NULL) as the application's handler, to which goshim chains, and
 * returns the previous one in old. */
bool preempt_owns(int sig);
/* All of them, bit sig - 1 for each (a load: the shim's mask calls ask at each call). */
uint64_t preempt_owned(void);
void preempt_app_action(int sig, const struct sigaction *act, struct sigaction *old);

/* ---- the netpoller (netpoll.c; its design in netpoll.h) --------------- */

enum pd_kind {
    PD_NOWAIT = 1, /* pollable and takes RWF_NOWAIT: park on EAGAIN */
    PD_BLOCKING,   /* char device (a tty), or no RWF_NOWAIT (eventfd): hand off the P */
    PD_FILE,       /* regular file, block device, directory: hand off the P; file work */
};

enum pd_mode { PD_READ, PD_WRITE };

struct pdesc; /* per fd, never freed; its fields are netpoll.c's */

/* A poll/select/epoll_wait waiter subscribed to some descriptors: word is
 * bumped (and woken) whenever one of them may have become ready. */
struct psub {
    struct psub *next, *prev;
    struct pdesc *pd;
    uint32_t *word;
    bool counted; /* in the epoll waiters */
};
/* Subscribe/unsubscribe a poll-style waiter. */
void netpoll_subscribe(struct pdesc *pd, struct psub *s, uint32_t *word);
void netpoll_unsubscribe(struct psub *s);

/* The descriptor of fd, classified (a few system calls, once per fd until
 * it is closed); NULL if fd is not open or out of range. */
struct pdesc *netpoll_fd(int fd);
/* Describe a fd the caller just created (no system call). */
void netpoll_known(int fd, int kind, bool stream, bool socket, bool user_nb);
/* open() (with these flags) just made fd: taken for a file until something needs to know. */
void netpoll_opened(int fd, int flags);
/* The two ends of a pipe or socketpair this process just created. */
void netpoll_pair(int a, int b);
/* Forget everything about fd (it is being closed or replaced): waiters
 * wake with EBADF, the other end of an own pair becomes readable (EOF) or
 * writable (EPIPE). Before the real close. */
void netpoll_close(int fd);
/* fd was duplicated (dup, dup2, F_DUPFD): another name now writes to it. */
void netpoll_dup(int oldfd, int newfd);

/* Register fd in the epoll set (edge-triggered, both directions). False if
 * it cannot be (netpoll_never_armed: it is then always ready: regular
 * files, /dev/null), or not now (no epoll instance can be made: EMFILE). */
bool netpoll_arm(struct pdesc *pd);
bool netpoll_never_armed(const struct pdesc *pd);

/*
 * ---- one I/O call: the readiness protocol ----
 *
 * After Go's pollDesc (poll_runtime_pollReset, pollWait, netpollcheckerr),
 * with the try in the caller's hands since the call itself is the
 * application's:
 *
 *      netpoll_reset               is fd for the netpoller, or a hand-off?
 *      loop:
 *          netpoll_try_begin       read the sequence; false: known empty, no try
 *          (the non-blocking try, by the caller)
 *          netpoll_tried           bookkeeping; done, failed, or wait
 *          netpoll_prepare         register fd (false: never ready by epoll)
 *          netpoll_waitcall        park until the sequence moves (through shim_wait)
 *
 * The per-call state lives in struct pdcall on the caller's stack; the
 * caller reads none of it nor any pdesc field.
 */
struct pdcall {
    struct pdesc *pd;
    struct pdesc *peer; /* own pair's other end a write is in progress to */
    int mode;           /* PD_READ / PD_WRITE */
    uint32_t gen;       /* the generation at the start: a close meanwhile is EBADF */
    uint32_t seq;       /* the mode's sequence read before the last try */
    uint32_t edges;     /* pd->edges read after seq */
    uint32_t direct;    /* pd->direct read with seq */
    uint32_t direct0;   /* direct when it last parked */
    bool parked;
    int64_t deadline; /* SO_RCVTIMEO / SO_SNDTIMEO: monotonic ns, -1 none */
};

enum pd_reset {
    PD_POLL,     /* park on EAGAIN */
    PD_HANDOFF,  /* not for the netpoller (ttys, eventfds): hand the P off */
    PD_FILEWORK, /* a file's: hand the P off; a call that waits for nobody */
    PD_NOTOPEN,  /* fd not open (or out of range): let the kernel say EBADF */
};

/* Start a call on fd for mode: its descriptor, classified, its timeout
 * started. listening: accept, which needs O_NONBLOCK on the socket (set
 * once, hidden by netpoll_getfl). Returns enum pd_reset. */
int netpoll_reset(struct pdcall *c, int fd, int mode, bool listening);
/* Before each try: read the readiness sequence (and, writing to an own
 * pair, mark the write in progress). False when a read is known to find
 * nothing (no system call needed): the caller goes straight to waiting. */
bool netpoll_try_begin(struct pdcall *c);
/* Read the sequence again without a try (connect: before it looks again). */
void netpoll_snapshot(struct pdcall *c);

enum pd_tried {
    PD_DONE, /* n >= 0: transferred */
    PD_FAIL, /* -errno to return, EAGAIN included when the application asked for it */
    PD_WAIT, /* EAGAIN: wait for readiness, then try again */
};

/* After the try that netpoll_try_begin allowed: n bytes or -errno; rest:
 * the bytes the call still wanted (a short read drains a stream). Returns
 * enum pd_tried. */
int netpoll_tried(struct pdcall *c, long n, size_t rest);
/* accept's try gave fd (instead of netpoll_tried): it inherits the listener's
 * kind and timeouts (Linux copies the socket options), not its O_NONBLOCK. */
void netpoll_accepted(struct pdcall *c, int fd, int flags);
/* A blocking stream (pipe, FIFO, stream socket, not made non-blocking): a
 * blocking write, or a MSG_WAITALL read, goes on until all is done. */
bool netpoll_whole(const struct pdcall *c);
/* The fd is not for per-call non-blocking tries (no RWF_NOWAIT, or cannot
 * be registered): every later call hands off. */
void netpoll_set_blocking(struct pdcall *c);
/* Ready to park: the fd registered. False if it cannot be (then the call
 * hands off; every later one too if it never can be, netpoll_set_blocking). */
bool netpoll_prepare(struct pdcall *c);
/*
 * Park the calling G (arg: its struct pdcall) until the sequence read by the
 * last netpoll_try_begin/netpoll_snapshot moves, or until the deadline. 0:
 * maybe ready, try again; ETIMEDOUT; EINTR (cancellation or a signal for
 * this thread); EBADF: closed meanwhile. The shape of a shim_wait park.
 */
int netpoll_waitcall(void *arg);
/* The descriptor is a socket the application left blocking (connect). */
bool netpoll_blocking_socket(const struct pdcall *c);
/* goshim set O_NONBLOCK on it for good (connect must not clear it). */
bool netpoll_forced_nonblock(const struct pdcall *c);

/* ---- per-fd state the application sets (taken under the descriptor's lock) ---- */

/* F_SETFL / FIONBIO: the application's O_NONBLOCK. True if goshim keeps
 * O_NONBLOCK set underneath (a listening socket): the caller then keeps it. */
bool netpoll_set_user_nonblock(int fd, bool nb);
/* F_GETFL's result fl for fd, without the O_NONBLOCK goshim set itself. */
int netpoll_getfl(int fd, int fl);
/* SO_RCVTIMEO (PD_READ) / SO_SNDTIMEO (PD_WRITE) in ns, 0 none. */
void netpoll_set_timeout(int fd, int mode, int64_t ns);
/* close_range/closefrom: netpoll_close for every known fd in [first, last]. */
void netpoll_close_range(unsigned first, unsigned last);

/* ---- goshim's own descriptors (ownfd.c): not open, as far as the program can tell ---- */

/* fd is one of goshim's own (its epoll instance, its wake-up eventfd, GOSHIM_STATS's copy of
 * stderr): the program's close, fcntl, dup... of it fail with EBADF. One load per slot. */
bool ownfd_is(int fd);
/* The program is about to put a file of its own at fd (dup2, dup3): if fd is goshim's, move
 * goshim's elsewhere first and wait until no call of goshim's uses fd. True if it was goshim's:
 * the old file is still there until the program's call replaces it; if that call fails, the
 * caller closes fd. */
bool ownfd_evict(int fd);
/* close_range/closefrom over [first, last]: gap(from, to, arg) for each part of it without
 * goshim's own fds (to may be UINT_MAX), with none of them made or moved meanwhile; stops at
 * the first that returns non-zero, and returns that. */
int ownfd_close_range(unsigned first, unsigned last, int (*gap)(unsigned, unsigned, void *),
                      void *arg);

/* libgcc's forced unwind and a frame's CFA, for the shim's pthread_exit (libc.c: libgcc_s
 * is loaded as the runtime starts, or here; without it the unwind fails). */
_Unwind_Reason_Code libc_unwind_forced(struct _Unwind_Exception *exc, _Unwind_Stop_Fn stop,
                                       void *arg);
_Unwind_Word libc_unwind_cfa(struct _Unwind_Context *ctx);

#endif
