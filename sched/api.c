/*
 * A G as the layer above the runtime sees it (api.h): a handle whose
 * fields the shim never reads. Each accessor says who may call it and
 * what its answer is worth, since most look at a G that another M may be
 * running: those answers are snapshots, good for a dump or for a decision
 * that the caller re-checks under its own lock.
 *
 * Two fields belong to the shim although they live in the G: thr, its
 * record of the thread the G runs (set once before the G first runs,
 * cleared by the exit hook), and the argument of a G spawned suspended.
 * The shim writes them here; the runtime only carries them.
 */
#include <asm/prctl.h>
#include <sys/syscall.h>

#include "sched.h"
#include "throw.h"

uint64_t sched_g_id(struct g *gp)
{
    return gp->goid;
}

void *sched_g_tcb(struct g *gp)
{
    return __atomic_load_n(&gp->tcb, __ATOMIC_ACQUIRE);
}

void *sched_g_thread(struct g *gp)
{
    return __atomic_load_n(&gp->thr, __ATOMIC_ACQUIRE);
}

void sched_g_set_thread(struct g *gp, void *thr)
{
    __atomic_store_n(&gp->thr, thr, __ATOMIC_RELEASE);
}

void sched_g_set_arg(struct g *gp, void *arg)
{
    GOSHIM_ASSERT(readgstatus(gp) == Gwaiting && !(gp->flags & G_STARTED));
    gp->arg = arg;
}

int sched_g_waiting(struct g *gp, void **obj)
{
    *obj = __atomic_load_n(&gp->waitobj, __ATOMIC_RELAXED);
    return __atomic_load_n(&gp->waitkind, __ATOMIC_RELAXED);
}

bool sched_g_stack(struct g *gp, void **lo, size_t *size, size_t *guard)
{
    if (!gp->stack.lo)
        return false;
    *lo = gp->stack.lo;
    *size = (size_t)(gp->stack.hi - gp->stack.lo);
    *guard = gp->stack.guard;
    return true;
}

void sched_keep_tcb(void)
{
    struct g *gp = sched_self();
    GOSHIM_ASSERT(gp != NULL);
    gp->flags |= G_KEEP_TCB;
}

void *sched_g_take_tcb(struct g *gp)
{
    if (!(gp->flags & G_KEEP_TCB))
        return NULL;
    void *tcb = gp->tcb;
    gp->tcb = NULL;
    return tcb;
}

struct g *sched_g_find_locked(bool (*match)(struct g *gp, void *arg), void *arg)
{
    for (struct g *gp = sched.allg; gp; gp = gp->alllink)
        if (g_status(gp) != Gdead && match(gp, arg))
            return gp;
    return NULL;
}

struct g *sched_g_find(bool (*match)(struct g *gp, void *arg), void *arg, bool try, bool *busy)
{
    *busy = false;
    if (!try)
        runtime_lock(&sched.allglock);
    else if (!runtime_trylock(&sched.allglock)) {
        *busy = true;
        return NULL;
    }
    struct g *gp = sched_g_find_locked(match, arg);
    runtime_unlock(&sched.allglock);
    return gp;
}

bool sched_g_dead(struct g *gp)
{
    return g_status(gp) == Gdead;
}

int sched_g_cpu_tid(struct g *gp)
{
    uint32_t s = g_status(gp);
    return s == Grunning || s == Gsyscall ? sched_gtid(gp) : 0;
}

struct m *m_of_thread(void)
{
    uintptr_t gs = 0;
    if (rt_syscall(SYS_arch_prctl, ARCH_GET_GS, &gs, 0) != 0 || gs == 0)
        return NULL;
    struct m *mp = (struct m *)gs;
    return mp->self == mp ? mp : NULL;
}

bool sched_g_resuming_here(struct g *gp)
{
    struct m *mp = m_by_tls();
    return mp && __atomic_load_n(&mp->ong0, __ATOMIC_ACQUIRE) &&
           __atomic_load_n(&gp->m, __ATOMIC_ACQUIRE) == mp && g_status(gp) == Grunning;
}

struct m *m_of_signal_thread(void)
{
    struct m *known = m_by_tls();
    return known ? known : m_of_thread();
}

bool sched_signal_context(struct g **gp, bool *on_g)
{
    struct m *mp = m_of_signal_thread();
    *gp = mp ? __atomic_load_n(&mp->curg, __ATOMIC_RELAXED) : NULL;
    *on_g = *gp && !__atomic_load_n(&mp->ong0, __ATOMIC_RELAXED);
    return mp != NULL;
}
