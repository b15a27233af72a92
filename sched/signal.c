/*
 * The signal state each G carries, and its installation on the M that runs
 * it: the blocked set (a G's own, which execute installs in the kernel when
 * it differs from the M's) and the alternate signal stack (the G's own if
 * it set one, else the M's, where goshim's stack-overflow report runs).
 * The shim keeps what the kernel cannot (pending per-thread signals, the
 * routing of process signals); this is the part that must follow the G
 * from M to M at every switch.
 *
 * A G's alternate stack is installed on an M only while that M runs the G:
 * an M that leaves it for its scheduler context installs its own again
 * before the G is released (restore_own_fs_altstack, schedule.c), exactly
 * when it gives the G's TCB up as FS base. The kernel knows an alternate
 * stack per OS thread, not that another thread uses it: an M idle with
 * the G's stack still installed could take an SA_ONSTACK signal (a
 * process signal the kernel gave it) at the top of that stack while the
 * G, on another M, runs a handler there; the two signal frames would
 * overlap, and the idle M's sigreturn would resume the G's registers on
 * the idle M, with its own FS base (CPython's test_signal StressTest,
 * with faulthandler's alternate stack and SA_ONSTACK handlers, does
 * this).
 *
 * An idle M blocks, besides its last G's mask, the signals the shim routes
 * (sched_routed_signals: those with a program handler, and those at their default action
 * that a thread has blocked) but the ones it hands on itself (sched_hooks.idle_lets: those
 * the dispatcher stands in for that no thread has left waiting in the kernel), and never
 * the faults it may raise itself or glibc's two (set*id must reach it). Asleep in stopm it
 * routes such a signal in its handler and runs the thread it readied (sched_route_asleep,
 * startm's asleep_self): one wake-up, as natively, where the router's hand-off cost two.
 * It routes at once only with nothing queued for the router (real-time signals stay in
 * order); else it queues behind. execute installs the G's mask again. A new M is born with
 * every signal blocked but glibc's two, and lets its creator's mask in only once its GS
 * base names it (newm, mstart): before that, it would pass for its creator's M.
 */
#include <signal.h>
#include <stdint.h>
#include <sys/syscall.h>

#include "netpoll.h"
#include "sched.h"
#include "throw.h"

uint64_t thread_sigmask(void)
{
    uint64_t set = 0;
    rt_syscall6(SYS_rt_sigprocmask, SIG_BLOCK, 0, (long)&set, sizeof set, 0, 0);
    return set;
}

void m_apply_sigmask(struct m *mp, uint64_t set)
{
    if (rt_syscall6(SYS_rt_sigprocmask, SIG_SETMASK, (long)&set, 0, sizeof set, 0, 0) == 0)
        mp->sigmask = set;
}

void m_record_altstack(struct m *mp)
{
    stack_t cur;
    if (rt_syscall(SYS_sigaltstack, NULL, &cur, 0) != 0 || (cur.ss_flags & SS_DISABLE))
        cur = (stack_t){.ss_flags = SS_DISABLE};
    cur.ss_flags &= ~SS_ONSTACK;
    mp->own_alt = cur;
    mp->altstack = cur.ss_sp;
}

/* What gp runs with: its own alternate stack, else its M's (overflow reports); the M's
 * for its scheduler context (gp NULL). */
static const stack_t *altstack_for(struct m *mp, struct g *gp)
{
    return gp && gp->altstack.ss_sp ? &gp->altstack : &mp->own_alt;
}

void m_apply_altstack(struct m *mp, struct g *gp)
{
    const stack_t *want = altstack_for(mp, gp);
    if (want->ss_sp == mp->altstack)
        return;
    stack_t none = {.ss_flags = SS_DISABLE};
    if (rt_syscall(SYS_sigaltstack, want->ss_sp ? want : &none, NULL, 0) == 0)
        mp->altstack = want->ss_sp;
}

int sched_sigaltstack(const stack_t *ss, stack_t *old)
{
    struct m *mp = acquirem(); /* its M's is its own while it runs */
    struct g *gp = mp->curg;
    m_apply_altstack(mp, gp);
    stack_t cur;
    if (rt_syscall(SYS_sigaltstack, NULL, &cur, 0) != 0)
        cur = (stack_t){.ss_flags = SS_DISABLE};
    long r = 0;
    if (ss && !(ss->ss_flags & SS_DISABLE)) {
        r = rt_syscall(SYS_sigaltstack, ss, NULL, 0); /* the kernel checks it */
        if (r == 0) {
            gp->altstack = *ss;
            mp->altstack = ss->ss_sp;
        }
    } else if (ss) {
        gp->altstack = (stack_t){.ss_flags = SS_DISABLE};
        m_apply_altstack(mp, gp); /* back to the M's own */
    }
    /* Its own as the kernel had it (SS_ONSTACK included); none if it had none. */
    if (r == 0 && old)
        *old =
            cur.ss_sp && cur.ss_sp != mp->own_alt.ss_sp ? cur : (stack_t){.ss_flags = SS_DISABLE};
    releasem(mp);
    return (int)-r;
}

uint64_t sched_sigmask(void)
{
    struct g *gp = sched_self(); /* a G's; none on a thread that is no G */
    return gp ? __atomic_load_n(&gp->sigmask, __ATOMIC_RELAXED) : 0;
}

void sched_set_sigmask(uint64_t set)
{
    struct m *mp = acquirem(); /* stay on this M while its mask changes */
    __atomic_store_n(&mp->curg->sigmask, set, __ATOMIC_RELAXED);
    if (mp->sigmask != set)
        m_apply_sigmask(mp, set);
    releasem(mp);
}

uint64_t sched_gsigmask(struct g *gp)
{
    return __atomic_load_n(&gp->sigmask, __ATOMIC_RELAXED);
}

/* ---- routed signals and idle Ms ------------------------------------------------------ */

uint64_t sched_routed_signals;

/* What an idle M never blocks: the faults it may raise itself and glibc's SIGCANCEL and
 * SIGSETXID (32, 33). */
#define IDLE_OPEN                                                                                  \
    ((1ULL << (SIGSEGV - 1)) | (1ULL << (SIGBUS - 1)) | (1ULL << (SIGILL - 1)) |                   \
     (1ULL << (SIGFPE - 1)) | (1ULL << (SIGTRAP - 1)) | (1ULL << (SIGSYS - 1)) | (1ULL << 31) |    \
     (1ULL << 32))

/* The routed signals an idle M blocks: all but those it hands on itself. */
static uint64_t idle_blocks(void)
{
    uint64_t lets = sched_hooks.idle_lets ? sched_hooks.idle_lets() : 0;
    return __atomic_load_n(&sched_routed_signals, __ATOMIC_SEQ_CST) & ~lets & ~IDLE_OPEN;
}

void block_while_idle(struct m *mp)
{
    uint64_t lets = sched_hooks.idle_lets ? sched_hooks.idle_lets() : 0;
    uint64_t want = ((mp->sigmask & ~lets) | idle_blocks()) & ~IDLE_OPEN;
    if (mp->sigmask != want)
        m_apply_sigmask(mp, want);
}

/* The routed signals mp, idle, does not block yet (sched.lock held: see sched_idle_block). */
bool idle_unblocked(struct m *mp)
{
    return idle_blocks() & ~mp->sigmask;
}

int sched_route_asleep(int (*route)(int, const siginfo_t *), int sig, const siginfo_t *info,
                       int *where)
{
    struct m *mp = m_of_signal_thread();
    *where = M_ELSEWHERE;
    if (!mp)
        return -1;
    if (!__atomic_load_n(&mp->idle_sleep, __ATOMIC_ACQUIRE)) {
        if (__atomic_load_n(&mp->routes_soon, __ATOMIC_ACQUIRE))
            *where = M_ROUTES_SOON;
        return -1;
    }
    *where = M_ASLEEP;
    asleep_self = mp;
    int r = route(sig, info);
    asleep_self = NULL;
    return r;
}

/*
 * Routed signals (sched_routed_signals) gain set, and every idle M blocks it before this
 * returns. An idle M looks at the routed signals on each pass of stopm's loop, under
 * sched.lock before it goes on sched.midle: one that passed before set came is on the list
 * (or polling) when this takes sched.lock after adding set. Those are taken off the list
 * and woken (as timer_wakeup does; the polling M by netpoll_break), and block set on their
 * next pass. Then this waits for every M to block set or to run a thread (whose mask the
 * M's is then), at most about 100 ms: an M between two threads (spinning, or on its way to
 * stopm) gets there in microseconds.
 */
void sched_idle_block(uint64_t set)
{
    set &= ~IDLE_OPEN;
    __atomic_or_fetch(&sched_routed_signals, set, __ATOMIC_SEQ_CST);
    if (!set || !__atomic_load_n(&sched.started, __ATOMIC_ACQUIRE) || m_in_runtime())
        return; /* (a signal handler that interrupted the runtime: it may hold sched.lock) */
    bool polling;
    runtime_lock(&sched.lock);
    struct m *idle = midle_take_all(&polling);
    runtime_unlock(&sched.lock);
    while (idle) {
        struct m *next = idle->schedlink; /* before the wake-up: it goes back on the list */
        idle->schedlink = NULL;
        notewakeup(&idle->park);
        idle = next;
    }
    if (polling)
        netpoll_break();
    int64_t until = nanotime() + 100000000;
    for (int i = 0;; i++) {
        bool settled = true;
        runtime_lock(&sched.lock);
        for (struct m *mp = sched.allm; mp && settled; mp = mp->alllink)
            settled = (__atomic_load_n(&mp->sigmask, __ATOMIC_RELAXED) & set) == set ||
                      !__atomic_load_n(&mp->ong0, __ATOMIC_ACQUIRE) || mp->retired;
        runtime_unlock(&sched.lock);
        if (settled || nanotime() > until)
            return;
        if (i < 50)
            osyield();
        else
            osusleep(50);
    }
}
