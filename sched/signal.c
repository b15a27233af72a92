/*
 * The signal state each G carries, and its installation on the M that runs
 * it: the blocked set (a G's own, which execute installs in the kernel when
 * it differs from the M's) and the alternate signal stack (the G's own if
 * it set one, else the M's, where goshim's stack-overflow report runs).
 * The shim keeps what the kernel cannot (pending per-thread signals, the
 * routing of process signals); this is the part that must follow the G
 * from M to M at every switch.
 *
 * A G's alternate stack is installed on its M only while the G runs there:
 * the G puts it on when it resumes and takes it off before it switches out
 * (switch_out_to, goexit). The scheduler context runs with the M's own. A
 * signal that comes to an M between Gs (to an idle M, which the kernel
 * prefers for the process's signals when it is the process's first thread
 * and does not block them) has its frame written on whatever stack is
 * installed: when that was the last G's, and the G ran on another M inside
 * a handler on that very stack, the frame overwrote the handler's (issue
 * 27: python3 -m test test_asyncio, faulthandler's stack and asyncio's
 * SIGCHLD handler, crashed). Taking it off costs a system call per switch
 * of a G that has one, as putting it on already did. A G that switches out
 * while it runs on its alternate stack (a handler that parks) cannot take
 * it off (the kernel refuses, EPERM): the scheduler context does, first.
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

/* What gp runs with: its own alternate stack, else its M's (overflow reports). */
static const stack_t *altstack_for(struct m *mp, struct g *gp)
{
    return gp->altstack.ss_sp ? &gp->altstack : &mp->own_alt;
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

void m_restore_altstack(struct m *mp)
{
    if (mp->altstack == mp->own_alt.ss_sp)
        return;
    stack_t none = {.ss_flags = SS_DISABLE};
    if (rt_syscall(SYS_sigaltstack, mp->own_alt.ss_sp ? &mp->own_alt : &none, NULL, 0) == 0)
        mp->altstack = mp->own_alt.ss_sp;
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
