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
 */
#include <signal.h>
#include <stdint.h>
#include <sys/syscall.h>

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
    return __atomic_load_n(&sched_self()->sigmask, __ATOMIC_RELAXED);
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
