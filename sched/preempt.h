/*
 * Async preemption (preempt.c): a G that runs longer than GOSHIM_PREEMPT
 * without blocking is switched out at a safe point, found by a signal
 * handler's cheap test and a whole-stack walk outside signal context.
 */
#ifndef GOSHIM_PREEMPT_H
#define GOSHIM_PREEMPT_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "api.h" /* preempt_owns, preempt_app_action, preempt_refresh, GOSHIM_G_ENTRY */

struct p;

/* Start (sched_init): slice_ns 0 = off, PREEMPT_KERNEL = the kernel's
 * policy (its base slice for this many Ps, only while another G waits),
 * else a fixed slice in ns. Installs the handler for sig
 * (chosen: set by GOSHIM_PREEMPT_SIGNAL, kept even if the application
 * takes it; handoff: GOSHIM_PREEMPT_HANDOFF). */
enum { PREEMPT_KERNEL = -1 };
/* walker: which unwinder checks the stack (GOSHIM_PREEMPT_WALK); both:
 * each, in turn first, to compare them (safe only if both say so). */
enum { PREEMPT_WALK_LIBGCC, PREEMPT_WALK_LIBUNWIND, PREEMPT_WALK_BOTH };
int preempt_init(int64_t slice_ns, int sig, bool chosen, bool handoff, int walker);
/* GOSHIM_PREEMPT_HANDOFF: sysmon may hand a stuck G's P to another M. */
bool preempt_handoff_on(void);
void preempt_count_handoff(void);
/* The slice, or 0 when preemption is off. */
int64_t preempt_slice(void);
/* Under the kernel's policy, how long a G runs before one woken from a sleep (I/O, a
 * lock, a timer) that waits for its P preempts it: half the kernel's base slice for one
 * CPU; with a fixed slice, the slice. 0 when preemption is off. */
int64_t preempt_wake_slice(void);
/* The kernel's policy: a G is preempted only while another waits for a P. */
bool preempt_when_waiting(void);
/* sysmon: a slice cut short because another G waited. */
void preempt_count_cut(bool wake); /* wake: at the wake cut, before the whole slice */
/* The kernel's EEVDF base slice for nprocs CPUs, in ns (sysmon.c, beside its tick). */
int64_t preempt_kernel_slice(int nprocs);
/* sysmon: pp has run the same G past the slice: signal its M to preempt
 * the G, or (handoff) to let the P go where the G stands. */
void preempt_request(struct p *pp, bool handoff);
/* The same without a signal: pp's G yields at its next entry into the shim (its gate). */
void preempt_ask_at_gate(struct p *pp);
/* The same for pp's G while it is in a system call on mp (pp->m is NULL then): it yields at
 * its first wrapped call after this one. */
void preempt_ask_call_at_gate(struct p *pp, struct m *mp);
/* In a forked child: the new pid, the one M's slice timer. */
void preempt_after_fork(void);
/* On a new M's own thread, before it runs a G: its slice timer (the
 * kernel's policy only). */
struct m;
void preempt_m_init(struct m *mp);
/* On an M's own thread, before the thread ends: its slice timer deleted. */
void preempt_m_fini(struct m *mp);
/* mp has its slice timer: sysmon leaves the rotation of its P's Gs that
 * were only preempted to it. */
bool preempt_m_timed(const struct m *mp);

struct preempt_stats {
    uint64_t requests, done, refused, stale, handoffs;
    uint64_t cut;             /* slices cut short because another G waited (the kernel's policy) */
    uint64_t wake_cut;        /* of those, cut at half the one-CPU slice for a woken G */
    uint64_t demoted;         /* preempted spinners sent behind the waiting Gs */
    uint64_t to_global;       /* preempted Gs sent to the global queue's tail */
    uint64_t ticks, tickcuts; /* slice-timer signals, and the preemptions they began */
    uint64_t gate;            /* preemptions taken at the shim's gate (preempt_at_gate) */
    uint64_t timerfail;       /* slice timers refused (an M asks again while it has none) */
    uint64_t walks, walk_ns;  /* safety walks and their total time */
    uint64_t walk_faults;     /* walks that faulted (refused: stack_fault_escape) */
    const char *walker;       /* "libgcc", "libunwind" or "both" */
    struct walk_times {
        uint64_t n, ns, p50_ns,
            p99_ns;  /* walks, their total time, the median, the 99th percentile */
    } by[2];         /* libgcc's walks, libunwind's (since start, or the fork) */
    uint64_t differ; /* walker both: walks whose verdicts differed */
};
void preempt_stats(struct preempt_stats *s);

/* A preemption's request met the G at its gate (sched_gate_slow): it yields there. */
void preempt_at_gate(struct m *mp);

/* preempt_walk.c: walk gp's stack, interrupted with the registers saved, with walker's
 * unwinder (both: each, safe only if both say so): 1 safe, else not; timed and counted. */
int preempt_walk(int walker, const uint64_t *saved, struct g *gp);
void preempt_walk_stats(struct preempt_stats *s); /* walks, walk_ns, walk_faults, by, differ */
void preempt_walk_fork_child(void);

/* walkstat.c: each unwinder's walk times (k: 0 libgcc's, 1 libunwind's), as a histogram. */
void walkstat_add(int k, uint64_t ns);
void walkstat_read(int k, struct walk_times *t);
void walkstat_reset(void); /* a fork child's: its walks are its own */

#endif
