/*
 * The scheduler's internal interface: the public one (api.h), the types
 * (runtime.h) and the prototypes shared between sched/'s files, which the
 * unit tests use too. The shim and the preload include api.h only. Nothing
 * here is exported from libgoshim.so.
 */
#ifndef GOSHIM_SCHED_H
#define GOSHIM_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api.h"
#include "runtime.h"

/* Parse helpers (exposed for tests). */
bool config_parse_int(const char *s, long min, long max, long *out);
bool config_parse_size(const char *s, size_t *out);
bool config_parse_bool(const char *s, bool *out);
bool config_parse_msec(const char *s, long min, long max, int64_t *out);
bool config_parse_signal(const char *s, int *out);
bool config_parse_seed(const char *s, uint64_t *out);

/* ---- internals shared between files ----------------------------------- */

/* gp's status (enum gstatus) and the kernel tid of the M running it (0 if
 * none); snapshots (proc.c). */
uint32_t sched_gstatus(struct g *gp);
int sched_gtid(struct g *gp);
/* The M the calling thread is, from its GS base (a system call: safe in a signal handler on
 * any thread), or NULL on threads goshim does not run (api.c). */
struct m *m_of_thread(void);
/* The same from TLS alone, no system call (full mode; NULL where TLS cannot tell): for the
 * dispatcher of the program's signals (proc.c). */
struct m *m_by_tls(void);
/* Ms running on their own glibc descriptor (real_tcb) for a fork or a set*id: M0's is the
 * main G's TCB, while the main G may run on another M (m_by_tls). Atomic. A fork child
 * keeps the count of the parent's other Ms (not reset: a page the child would read): its
 * main G's handlers then ask the GS base, as before. */
extern int m_on_real_tcb;
/* The dispatcher's m_of_thread: TLS first (m_by_tls), the GS base where it cannot tell. */
struct m *m_of_signal_thread(void);
/* The calling thread's M, from TLS and the GS base, no system call; NULL on threads goshim
 * does not run. Not on g0 in errno mode (proc.c's getg). */
struct m *m_current(void);

/* Zeroed memory for an object never freed (struct m, g, p: rtpool.c); NULL if none. align
 * is a power of two. */
void *rtpool_alloc(size_t size, size_t align);
/* Zeroed memory of its own mapping, whose pages the kernel gives as they are first
 * touched (sanitizer builds: calloc, whose blocks LeakSanitizer scans); NULL if none. */
void *rtpool_zeroed(size_t len);
void rtpool_zeroed_free(void *p, size_t len);
/* The next object starts a page. */
void rtpool_new_page(void);
void rtpool_fork_child(void);

/* signal.c: the switch-in steps that install a G's mask and altstack on its M. */
void m_apply_sigmask(struct m *mp, uint64_t set);  /* on mp's own thread */
void m_apply_altstack(struct m *mp, struct g *gp); /* gp NULL: the M's own */
void m_record_altstack(struct m *mp); /* the M's own, once it has it (stack_thread_init) */
/* signal.c: an idle M's routed signals. It blocks those it must (stopm, each pass); whether
 * some are not blocked yet (sched.lock held). */
void block_while_idle(struct m *mp);
bool idle_unblocked(struct m *mp);
/* machines.c, for signal.c: every idle M off the list (sched.lock held; see there), and the
 * M whose handler routes a signal while it sleeps (startm runs what it readied). */
struct m *midle_take_all(bool *polling);
extern __thread struct m *asleep_self;

/* dump.c, sysmon.c */
void leaks_print(int fd);  /* GOSHIM_STATS at exit: threads still waiting, and true leaks */
void deadlock_check(void); /* sysmon, every round */
void quit_check(void);     /* sysmon: dump and exit after SIGQUIT */
void sysmon_wake(void);
/* The only thread parked (its P idle, stopm): out of sysmon's single-thread sleep, for the
 * deadlock check. */
void sysmon_lone_parked(void);
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
/* An M at a point of its scheduler that holds no lock (its own TCB installed, or in execute
 * the next G's): the signals posted to the router that it can hand on itself
 * (sched_hooks.route_posted). */
static inline void route_posted_here(void)
{
    if (sched_hooks.route_posted)
        sched_hooks.route_posted(true);
}
/* The M leaves findrunnable's search (routes_soon): what was posted meanwhile and not
 * handed on goes to the router. */
static inline void routes_soon_end(struct m *mp)
{
    __atomic_store_n(&mp->routes_soon, 0, __ATOMIC_RELEASE);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    if (sched_hooks.route_posted)
        sched_hooks.route_posted(false);
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

/* ownfd.c: goshim's own descriptors (the shim's part is in api.h). A slot names one. */
enum ownfd_slot { OWNFD_EPOLL, OWNFD_WAKE, OWNFD_STATS, OWNFD_N };
/* The lock for making, moving and forgetting them (marks the M inside the runtime). */
struct m *ownfd_lock(void);
void ownfd_unlock(struct m *mp);
/* A slot's number (-1: none). Set only under ownfd_lock. */
int ownfd_get(int slot);
void ownfd_set(int slot, int fd);
/* Around a system call on a slot's number: the number, held against ownfd_evict until unhold
 * (with the phase hold gave). Never ownfd_lock while holding. */
int ownfd_hold(int slot, int *phase);
void ownfd_unhold(int phase);
/* A copy of fd at goshim's high numbers (close-on-exec), or -1 if there is no room. */
int ownfd_dup_high(int fd);
/* The fd table grown to hold the high numbers, once a process, while it has one thread:
 * before the runtime makes a thread (libc_pthread_create). */
void ownfd_grow_table(void);
/* fd, a descriptor goshim just made, moved to the high numbers: the new number (fd closed),
 * or fd itself if there is no room up there. */
int ownfd_place(int fd);
/* The slot's number was lost (closed or replaced behind goshim's back): forget it without
 * closing it (it may be the program's now). ownfd_lock held. */
void ownfd_forget(int slot);
void ownfd_counts(uint64_t *moved, uint64_t *lost);
void ownfd_fork_child(void);
/* netpoll.c, for ownfd.c: wake a netpoll that blocks (the wake-up eventfd, unconditionally;
 * ownfd_lock held), and a slot of the netpoller's moved from oldfd to newfd (ownfd_lock held,
 * oldfd still goshim's file). */
void netpoll_interrupt(void);
void netpoll_own_moved(int slot, int oldfd, int newfd);

/* chaos.c */
void chaos_init(uint64_t seed);
uint64_t chaos_rand(void);           /* the next draw of the seeded generator */
uint64_t chaos_seed_for(int64_t id); /* a per-M generator seed */

/* machines.c */
/* The M's own TCB marker: set on an M's own thread (g0's TLS). */
void m_mark_own_tls(struct m *mp, void *tcb);

/* proc.c */
bool casgstatus(struct g *gp, uint32_t oldval, uint32_t newval);
/* A transition no one else may make at the same time: checked (a throw names who), then a
 * release store, no locked instruction. */
void setgstatus_owned(struct g *gp, uint32_t oldval, uint32_t newval, const char *who);
/* One more system call entry or exit on pp, counted by whoever owns pp at the moment (its
 * M, or the one that took it from a call with a CAS): one writer, so no locked add. */
static inline void p_tick_call(struct p *pp)
{
    __atomic_store_n(&pp->syscalltick, __atomic_load_n(&pp->syscalltick, __ATOMIC_RELAXED) + 1,
                     __ATOMIC_RELEASE);
}
struct g *gfget(struct p *pp);
void gfput(struct p *pp, struct g *gp);
void release_commit(struct m *mp);
void bind_stack(struct m *mp, struct g *gp);
/* Map gp the stack it wants (its old one given back): 0, or EAGAIN, said once
 * (GOSHIM_FAULT's stack kind fails it here). pp: the caller's P or NULL. */
int g_stack_alloc(struct p *pp, struct g *gp);
void bind_tcb(struct m *mp, struct g *gp);
struct g *malg(void);

/* tls_static.c: late static TLS images for a G's first run, and an exiting G's wait. */
void tls_static_catch_up(struct g *gp);
void tls_static_exit_wait(void);

/* schedule.c */
__attribute__((noreturn)) void schedule(void);
struct g *findrunnable_local(struct p *pp, bool *inherit);
struct g *stealwork(struct m *mp, struct p *pp, int *round);
void wakep(void);
/* wakep with no P idle: a P kept by a blocking call while the process was idle is handed
 * off for the work (syscall.c). */
void take_kept_p(void);
void resetspinning(struct m *mp);
void restore_own_fs_altstack(struct m *mp);
__attribute__((noreturn)) void execute(struct m *mp, struct g *gp, bool inherit);
void switch_out_to(struct m *mp, struct g *gp, void (*fn)(void *));

/* The main thread's stack as glibc's pthread_getattr_np gives it (schedinit.c): by
 * PROCMAP_QUERY where the kernel has it, else by glibc's. */
void sched_main_stack(void **lo, size_t *size);

/* ---- per-G CPU-time clocks (cputime.c) ---- */
extern bool cputime_on;         /* a thread CPU clock was asked for: slices are measured exactly */
void cputime_init(int64_t now); /* the TSC's rate is measured from now on */
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
/* The calling OS thread's own CPU-time clock id (never the G's). */
clockid_t m_cpuclock(void);
/* mp's thread, read from another (sysmon): the CPU time it has used (ns), or -1; whether it
 * sleeps in the kernel (state S or D in /proc), as opposed to running or waiting for a CPU,
 * which its CPU clock alone cannot tell apart on a busy machine (a /proc read: only once
 * the clock says it did not run). */
int64_t m_thread_cputime(struct m *mp);
bool m_thread_sleeping(struct m *mp);

/* syscall.c (entersyscall and exitsyscall: api.h) */
void handoffp(struct p *pp);
/* The handoff of a P from a G that stays away from the runtime (syscall.c):
 * done on its own M by the preemption handler, which holds one mp->locks
 * while it runs; undone at the shim's gate. */
bool sched_handoff_self(struct m *mp);
bool sched_handoff_asleep(struct m *mp, bool (*still_asleep)(struct m *));
void sched_pless_reacquire(void);

/* sysmon.c */
int sysmon_start(int trace_ms, bool detailed);
int64_t sysmon_traces(void); /* GOSHIM_SCHEDTRACE's period in ns, 0 if off */
bool sysmon_deferred(void);  /* not running yet in a fork child (sched_helper_defer) */
/* machines.c: the helpers of a one-thread fork child, started when it needs them. */
bool sched_helpers_may_defer(void);
void sched_helpers_fork_child(void);
/* helpers.c: the TLS probe's thread kept as the first helper (the spare). */
void sched_spare_arrive(void);  /* on it, once its probe passed (tls_init's then) */
void sched_spare_expect(void);  /* main: it comes; the next sched_helper_thread takes it */
void sched_spare_dismiss(void); /* main: not taken by now, it ends */
/* Fork child resets of each part of the runtime (fork.c calls them). A fork child pays for
 * each page it first touches (a write copies it; in a VM with shadow page tables a read
 * costs too): resets look at as few pages as they can and write only what differs. */
void fork_zero(void *p, size_t n); /* zero p[0..n) but the pages already zero */
/* FORK_SET (lock.h) sets a value only if it differs. */
void sysmon_fork_child(void);
void machines_fork_child(void);
/* Before a fork (the parent, on the forking G): the surplus idle Ms end now, and this
 * waits (briefly) until their threads are gone. */
void machines_fork_shed(void);

/* ---- the end of surplus Ms (mretire.c) ---- */
/* Idle Ms that stay however long they idle: one per P (a wave of Gs blocking in the
 * kernel hands them all off at once) and a few more (the maker's reserve). sched.lock. */
int32_t m_idle_keep(void);
/* Whether mp's thread can end (mretire.c says which can). */
bool m_can_end(struct m *mp);
/* mp, just put on sched.midle (sched.lock held): -1, or, if it is one too many idle Ms,
 * when it ends unless it is woken before (stopm sleeps until then). */
int64_t m_surplus_until(struct m *mp);
/* mp, off sched.midle, ends its thread (sched.lock held; released): back in mstart. */
GOSHIM_NO_TSAN __attribute__((noreturn)) void m_retire(struct m *mp);
/* mp was shed for a fork (machines_fork_shed) and just woken: it ends. */
void m_end_if_shed(struct m *mp);
/* In mstart, once m_retire came back there: the thread gives back what it holds. */
void m_exit(struct m *mp);
/* A retired M's struct for newm (sched.lock held), or NULL: on allm with its id and
 * counters, the rest afresh. */
struct m *m_reuse(void);
/* A new M struct, given an id and put on allm; NULL without memory. */
struct m *m_alloc_listed(void);
/* The stack (its lowest byte) for mp's next thread, M_STACK_SIZE bytes of goshim's, with
 * a guard below; NULL: glibc makes one (mretire.c says when). */
enum { M_STACK_SIZE = 1 << 20, M_STACK_GUARD = 4096 };
char *m_stack(struct m *mp);
/* Unmap the stacks of ended Ms beyond those kept for the next, of threads gone (mretire.c);
 * no lock held. */
void m_stacks_trim(void);
/* mp's thread could not be made (sched.lock held): the struct waits for the next newm. */
void m_unstarted(struct m *mp);
/* Take off sched.midle an M that can end, not the timer watcher, while more than
 * m_idle_keep() idle; NULL if none. sched.lock held. */
struct m *mget_surplus(void);
/* setxid.c: set*id calls work while Gs run on Ms (call once, at start-up). */
void setxid_init(void);
void timers_fork_child(void);
void gfutex_fork_child(void);
/* fork.c: pthread_atfork handlers; registered by sched_init. */
void sched_fork_prepare(void);
void sched_fork_parent(void);
void sched_fork_child(void);
/* A fork child's runtime reset, if it still waits (schedfork.fork_due): async-signal-safe. */
void sched_fork_settle(void);
/* The gate before shared scheduler state (fork.c). */
static inline void fork_settled(void)
{
    if (__builtin_expect(__atomic_load_n(&schedfork.fork_due, __ATOMIC_RELAXED) != 0, 0))
        sched_fork_settle();
}
/* errno of whatever TCB is the FS base now, through a call the compiler
 * cannot fold across an FS switch (__errno_location is "const"). */
int errno_get(void);
void errno_set(int v);
int sysmon_threads(void);
uint64_t sysmon_retakes(void);
uint64_t sysmon_rounds(void);
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
/* Create an M for pp (NULL: one that starts idle), for a G's work, the scheduler's,
 * or as a reserve (no message if it cannot be made); machines.c. */
enum newm_for { NEWM_G, NEWM_SCHED, NEWM_RESERVE };
bool newm(struct p *pp, bool spinning, enum newm_for why); /* false: not made */
/* Hand pp to nmp, just taken off sched.midle, and wake it. */
void mwake(struct m *nmp, struct p *pp, bool spinning);
/* Move pp's runnable Gs to the global queue (pp has no M). */
void runq_to_global(struct p *pp);
/* mmaker.c: the thread that makes Ms. ask: pp goes idle and an M is made for an idle P
 * (false: no maker, the caller makes it); poke: the last idle M was taken. */
bool mmaker_ask(struct p *pp, bool spinning);
void mmaker_poke(void);
bool mmaker_reserve_left(bool came); /* sched.lock held */
/* sched.lock held: newm counts the M the maker made for a request coming (sched.nmcoming),
 * and the request is no longer wanted, in one step (mmaker_ask's count). */
void mmaker_counted(void);
/* entersyscallblock: an idle M for pp's queued work, or true: mmaker_wait(seen) first. */
bool mmaker_m_for_block(struct p *pp, struct m **nmp, uint32_t *seen);
void mmaker_wait(uint32_t seen);
/* A G waits in mmaker_wait: the maker will wake it (no deadlock; it may be slow to run). */
bool mmaker_awaited(void);
int mmaker_init(void);
void mmaker_fork_child(void);
/* sysmon: start an M for an idle P that work waits for, after a failed newm. */
void m_retry(int64_t now);
void stopm(void);
void mput(struct m *mp);
struct m *mget(void);
struct m *allocm(void);

/* trace.c */
void schedtrace(bool detailed);
void stats_print(int fd);
void stats_fork_child(void); /* a fork child's counters start at zero */
void stats_at_exit(void);
void stats_open(void);

/* proc.c: the G whose stack holds addr, for the stack-overflow report (stack_signal.c) */
int sched_stack_lookup(void *addr, unsigned long *id, size_t *size);

/* ---- timers and the idle Ms (machines.c; timer API in timer.h) ---------- */

/* timer_add made a new earliest timer, due at when: wake an M for it. */
void timer_wakeup(int64_t when);
/* Take mp off sched.midle; false if not there. sched.lock must be held. */
bool mremove(struct m *mp);

#endif
