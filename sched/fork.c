/*
 * fork() from a G: the child keeps only the calling G, on a runtime
 * restarted around it before any of the program's code runs there.
 *
 * Done in pthread_atfork handlers, registered at start-up, so that every
 * fork glibc makes is covered: the program's fork(), daemon(), and any
 * other caller inside libc. glibc runs prepare handlers in reverse order
 * of registration (ours, registered first, runs last, right before the
 * clone) and child/parent handlers in order (ours first): the program's
 * own handlers run on the G as usual.
 *
 * glibc forks on the descriptor the FS base points to, the G's TCB, and in
 * the child keeps it as its one listed thread (reclaim_stacks), putting
 * every other thread's stack in its cache for reuse - the forking M's own
 * too, still its scheduler stack in the child. So the child puts the M's own
 * descriptor (real_tcb) back in the G's place (tls_relist_child), as glibc
 * would have left it had it forked on it. glibc did fork on it before: the
 * FS base went to the M's descriptor and back, with malloc's per-thread
 * state (tls_malloc_move) - two system calls on a host without FSGSBASE,
 * and pages of both descriptors written in the parent and the child right
 * after the fork, each a copy. M0's own descriptor is the main thread's,
 * which the main G may be using on another M at that very moment. That way
 * stays for when the lists' heads are unknown (tls_relist_ready).
 *
 * The M holds a lock (acquirem) from prepare to child/parent, so the G is
 * neither preempted nor handed off in between; mp->forking marks the M for
 * the child and parent handlers (a thread goshim does not run has no M).
 *
 * The child's reset: the calling M is the only M, with its P (or P0 if it
 * had none); every other G is dead (its thread does not exist in the
 * child, as with native threads); run queues, timers, futex waiters,
 * netpoller (whose descriptors the child closes: it makes its own when it
 * first needs them), the waker and sysmon threads start afresh; runtime locks the
 * parent's other threads held are released. The calling G takes the
 * child's real tid in its TCB: its fake one is its parent's G's too. Only
 * what concerns the calling thread is done at once; the rest waits until
 * the child first needs the runtime (sched_fork_settle).
 */
#include "libc.h"
#include "sched.h"
#include "ldt.h"
#include "netpoll.h"
#include "preempt.h"
#include "throw.h"
#include "tls.h"

#include <string.h>
#include <sys/syscall.h>

/* FORK_TEXT begins on a page: ".0" sorts before the code's ".1" (lock.h). */
__asm__(".section .text.sorted.goshim_fork.0,\"ax\",@progbits\n.balign 4096\n.previous");

void sched_fork_prepare(void)
{
    if (!sched.started || sched_self() == NULL)
        return;
    machines_fork_shed();
    struct m *mp = acquirem(); /* released by the parent or child handler */
    mp->forking = true;
    if (tls_full() && mp->curfs != mp->real_tcb && !tls_relist_ready(mp->listed)) {
        tls_malloc_move(mp->curfs, mp->real_tcb);
        __atomic_add_fetch(&m_on_real_tcb, 1, __ATOMIC_SEQ_CST);
        ctx_setfs(mp->real_tcb);
    }
}

/* The forking M, back on its G's TCB (mp->curfs) if the fork was made on its own, errno
 * with it; NULL on a thread goshim does not run. *on: the TCB glibc forked on. */
FORK_TEXT static struct m *fork_resume(void **forked_on)
{
    struct m *mp = m_current();
    if (!mp || !mp->forking)
        return NULL;
    mp->forking = false;
    void *on = tls_full() ? tls_self() : mp->curfs;
    *forked_on = on;
    if (on != mp->curfs) {
        int e = errno_get();
        tls_malloc_move(on, mp->curfs);
        ctx_setfs(mp->curfs);
        __atomic_sub_fetch(&m_on_real_tcb, 1, __ATOMIC_SEQ_CST);
        errno_set(e);
    }
    return mp;
}

void sched_fork_parent(void)
{
    void *on;
    struct m *mp = fork_resume(&on);
    if (sched.started)
        netpoll_fork_parent();
    if (mp)
        releasem(mp);
}

void fork_zero(void *p, size_t n)
{
    unsigned char *b = p, *end = b + n;
    while (b < end) {
        /* Up to the next page boundary, so that a page with one non-zero byte is the only
         * one written. */
        unsigned char *stop = (unsigned char *)(((uintptr_t)b | 4095) + 1);
        if (stop > end)
            stop = end;
        for (unsigned char *q = b; q < stop; q++)
            if (*q) {
                memset(b, 0, (size_t)(stop - b));
                break;
            }
        b = stop;
    }
}

/* Child, at once: the forking thread - its M and G - is the process's one thread, and
 * every other G is dead (g_status). on: the TCB glibc forked on. */
FORK_TEXT static void fork_own_thread(struct m *mp, void *on)
{
    struct g *self = mp->curg;
    /* glibc's fork has the kernel write the child's tid into the TCB it forks on
     * (CLONE_CHILD_SETTID): read there, a system call less; a value that cannot be a
     * kernel's tid (above PID_MAX_LIMIT, 2^22) would mean it did not. */
    unsigned settid = tls_full() ? tls_tcb_tid(on) : 0;
    mp->tid = settid > 0 && settid <= 1u << 22 ? (int)settid : (int)rt_syscall(SYS_gettid, 0, 0, 0);
    schedfork.pid = mp->tid; /* the one thread leads its group */
    /* The forking thread's fake tid is its parent's too: a process-shared errorcheck or
     * recursive mutex, owned by tid, would take the two for one thread (EDEADLK). The
     * child's real tid is unique on the system and no G of the parent has it. The main
     * thread's TCB is glibc's, but glibc forked on the M's own (sched_fork_prepare), where
     * the kernel wrote the new tid: unless the M is M0, the main thread kept its parent's
     * tid, in every child (pthread_cond_broadcast/2-3: EDEADLK in the 20 children). Glibc
     * forks on the G's TCB now, but not always (sched_fork_prepare). */
    if (tls_full() && self && self->tcb)
        tls_tcb_set_tid(self->tcb, (unsigned)mp->tid);
    mp->cpuclock = libc_thread_cpuclock(mp->tid);
    FORK_SET(mp->preempt_req, 0);
    FORK_SET(mp->gate_preempt, 0);
    FORK_SET(mp->handoff_req, 0);
    FORK_SET(mp->preempt_pending, 0);
    /* A new process's thread: its CPU-time clock starts at 0 (cputime.c). */
    if (self) {
        self->cpu_tsc = 0;
        self->cpu_ns = 0;
    }
    mp->cpu_mark = 0;
    cputime_m_ready(mp);
    FORK_SET(mp->spinning, false);
    FORK_SET(mp->nextp, NULL);
    FORK_SET(mp->schedlink, NULL);
    mp->exitctx.sp = 0;  /* the child's main thread now: it never ends as an M (m_retire) */
    schedfork.multi = 0; /* one thread again (sched_lone) */
    /* Every other thread is gone: its G is dead (g_status), not reused (its stack and TCB
     * hold what the parent's thread left there; it is on no free list). */
    schedfork.forkgen++;
    if (self)
        self->forkgen = schedfork.forkgen;
}

/* Child: mp and one P the whole scheduler (fork_p: the P mp held at the fork, which the
 * child's one thread may have put anywhere since, in its own calls). */
static void reset_sched(struct m *mp, struct p *fork_p)
{
    sched.lock.key = 0;
    sched.gflock.key = 0;
    sched.allglock.key = 0;
    sched.tls_static_walking = 0; /* a walk in the parent's other threads: gone here */
    sched.allm = mp;
    mp->alllink = NULL;
    sched.mfree = NULL;
    sched.nmfreestacks = 0;
    sched.midle = NULL;
    sched.nmidle = 0;
    sched.nmcoming = 0;
    sched.nmgoing = 0;
    sched.mcount = 1;
    sched.nmspinning = 0;
    FORK_SET(*sched.nkept, 0);
    sched.scavasked = 0;
    sched.runq.head = sched.runq.tail = NULL;
    sched.runqsize = 0;

    /* Its P: the one it runs on, the one it left in a system call or a
     * hand-off, or P0. */
    struct p *mine = fork_p ? fork_p : mp->p ? mp->p : mp->oldp ? mp->oldp : sched.allp[0];
    sched.pidle = NULL;
    sched.npidle = 0;
    for (int32_t i = sched.gomaxprocs - 1; i >= 0; i--) {
        struct p *pp = sched.allp[i];
        FORK_SET(pp->runqhead, 0);
        FORK_SET(pp->runqtail, 0);
        FORK_SET(pp->runnext, NULL);
        if (pp == fork_p || (pp == mine && mp->p == pp))
            continue;
        FORK_SET(pp->link, NULL);
        FORK_SET(pp->status, Pidle);
        FORK_SET(pp->m, NULL);
        if (pp != mine)
            pidleput(pp);
    }
    if (mp->p == NULL && fork_p == NULL) {
        acquirep(mine);
        mp->oldp = NULL;
        mp->pless = 0;
        casgstatus(mp->curg, Gsyscall, Grunning);
    }
}

/* Child: everything of the parent's runtime but the forking thread's own. */
static void fork_reset_runtime(struct m *mp, struct p *fork_p)
{
    reset_sched(mp, fork_p);
    rtpool_fork_child();
    ldt_fork_child(); /* the LDT is inherited; its allocator's lock may be another thread's */
    machines_fork_child();
    stack_fork_child();
    timers_fork_child();
    gfutex_fork_child();
    mmaker_fork_child();
    netpoll_fork_child();
    preempt_after_fork();
    sysmon_fork_child();
}

/*
 * A fork child's first touch of a page costs it (a copy for a write; here, a PVM guest,
 * a shadow page-table entry even for a read): the reset above reads and writes dozens of
 * pages, most of the cost of a fork with threads alive, and most children exec or exit
 * before they need any of it. So while the child has one thread and nothing that runs
 * without it (sched_helpers_may_defer), the reset waits (schedfork.fork_due) until the child
 * first reaches shared scheduler state: a runtime lock (runtime_lock), a switch, a spawn,
 * a G made ready, an M woken, or its deferred helpers started - each of which settles it
 * first. Before that the one thread touches nothing of the parent's runtime but its own
 * M, G and P, whose state the child keeps.
 */
void sched_fork_settle(void)
{
    /* Signals blocked: a handler that took a runtime lock would settle again, halfway. */
    uint64_t all = ~0ULL, old = 0;
    rt_syscall6(SYS_rt_sigprocmask, SIG_SETMASK, (long)&all, (long)&old, sizeof all, 0, 0);
    if (__atomic_exchange_n(&schedfork.fork_due, 0, __ATOMIC_SEQ_CST))
        fork_reset_runtime(getm(), schedfork.fork_p);
    rt_syscall6(SYS_rt_sigprocmask, SIG_SETMASK, (long)&old, 0, sizeof old, 0, 0);
}

FORK_TEXT int sched_fork_pid(void)
{
    return schedfork.pid;
}

FORK_TEXT void sched_fork_child(void)
{
    void *on = NULL;
    struct m *mp = fork_resume(&on);
    if (mp == NULL) {
        FORK_SET(schedfork.pid, 0);
        /* Forked by a thread goshim does not run: the child has no M and
         * no G; all it needs is not to share the parent's epoll. */
        if (sched.started) {
            ownfd_fork_child();
            netpoll_fork_own();
            netpoll_fork_child();
        }
        return;
    }
    fork_own_thread(mp, on);
    if (on == mp->curfs && mp->curfs != mp->real_tcb)
        tls_relist_child(mp->curfs, mp->real_tcb, mp->listed, (unsigned)mp->tid);
    sched_helpers_fork_child();
    ownfd_fork_child();
    netpoll_fork_own(); /* the parent's epoll instance: closed now, never shared */
    if (mp->p && sched_helpers_may_defer()) {
        schedfork.fork_p = mp->p;
        __atomic_store_n(&schedfork.fork_due, 1, __ATOMIC_SEQ_CST);
    } else {
        FORK_SET(schedfork.fork_due, 0); /* a fork of a child that had not settled: now */
        fork_reset_runtime(mp, NULL);
    }
    stats_fork_child(); /* after: its snapshot takes runtime locks (GOSHIM_STATS only) */
    releasem(mp);
}
