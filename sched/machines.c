/*
 * Ms: OS threads that carry Gs.
 *
 * An M is created (with the real pthread_create) only when there is a P to
 * run and no idle M to run it: startm takes an idle M from sched.midle or
 * makes a new one, hands it the P through m->nextp and wakes it. An M with
 * nothing to do releases its P and sleeps on its note in stopm; it never
 * exits. The count is capped by GOSHIM_MAXTHREADS (default 10000, as Go).
 *
 * Each M records itself in its GS base (arch_prctl(ARCH_SET_GS), once), so
 * getm() is one load and works whatever the FS base is: the FS base belongs
 * to the G running on the M (every G has its own glibc TCB), so per-M state
 * must never live in __thread. glibc does not use GS on x86-64.
 *
 * The M's own stack is its scheduler stack (g0): mcall resets to the same
 * spot (m->g0_sp) each time, so g0 never accumulates frames.
 */
#include <asm/prctl.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>

#include "sched.h"
#include "throw.h"
#include "tls.h"

int (*sched_thread_create)(pthread_t *, const pthread_attr_t *, void *(*)(void *),
                           void *) = pthread_create;

enum { M_STACK_SIZE = 1 << 20 };

struct m *allocm(void)
{
    struct m *mp = calloc(1, sizeof *mp);
    if (!mp)
        return NULL;
    mp->self = mp;
    mp->id = -1;
    mp->fastrand = (uint64_t)nanotime() * 0x9E3779B97F4A7C15ULL | 1;
    return mp;
}

/* Thread body of every M but none: bind GS, then schedule forever. */
GOSHIM_NO_TSAN static void *mstart(void *arg)
{
    struct m *mp = arg;
    long rc = rt_syscall(SYS_arch_prctl, ARCH_SET_GS, mp, 0);
    if (rc != 0)
        goshim_throw("mstart: arch_prctl(ARCH_SET_GS) failed");
    mp->tid = (int)rt_syscall(SYS_gettid, 0, 0, 0);
    mp->g0tcb = tls_self();
    mp->curfs = mp->g0tcb;
    stack_thread_init();
    /* Everything below this point of the thread stack is the g0 stack. */
    mp->g0_sp = ((uintptr_t)__builtin_frame_address(0) - 1024) & ~(uintptr_t)15;
    mp->g0_lo = (char *)mp->g0_sp - M_STACK_SIZE / 2;
    mp->g0_fiber = san_fiber_current();
    struct p *pp = mp->nextp;
    mp->nextp = NULL;
    acquirep(pp);
    schedule();
}

/* Create an M that starts by running pp. */
static void newm(struct p *pp, bool spinning)
{
    static bool warned;
    runtime_lock(&sched.lock);
    if (sched.mcount >= sched.maxmcount) {
        bool first = !warned;
        warned = true;
        runtime_unlock(&sched.lock);
        if (first)
            rt_print(2,
                     "goshim: thread limit reached (%d OS threads, GOSHIM_MAXTHREADS): "
                     "runnable tasks wait for a running thread\n",
                     sched.maxmcount);
        goto fail;
    }
    sched.mcount++;
    runtime_unlock(&sched.lock);

    struct m *mp = allocm();
    if (!mp)
        goto undo;
    mp->nextp = pp;
    mp->spinning = spinning;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, M_STACK_SIZE);
    runtime_lock(&sched.lock);
    mp->id = sched.mcount - 1;
    mp->alllink = sched.allm;
    sched.allm = mp;
    runtime_unlock(&sched.lock);
    int err = sched_thread_create(&mp->thread, &attr, mstart, mp);
    pthread_attr_destroy(&attr);
    if (err == 0)
        return;
    rt_print(2, "goshim: cannot create an OS thread (error %d): runnable tasks wait\n", err);
    /* The M stays on allm, never started: harmless, and allm stays simple. */
undo:
    runtime_lock(&sched.lock);
    sched.mcount--;
    runtime_unlock(&sched.lock);
fail:
    __atomic_fetch_add(&sched.nmthreadfail, 1, __ATOMIC_RELAXED);
    runtime_lock(&sched.lock);
    pidleput(pp);
    runtime_unlock(&sched.lock);
    if (spinning)
        __atomic_fetch_sub(&sched.nmspinning, 1, __ATOMIC_RELAXED);
}

/*
 * Schedule some M to run pp (or any idle P if pp is NULL). With spinning,
 * the caller already counted the new M in sched.nmspinning; if no P is
 * idle the count is undone.
 */
void startm(struct p *pp, bool spinning)
{
    runtime_lock(&sched.lock);
    if (pp == NULL) {
        pp = pidleget();
        if (pp == NULL) {
            runtime_unlock(&sched.lock);
            if (spinning)
                __atomic_fetch_sub(&sched.nmspinning, 1, __ATOMIC_RELAXED);
            return;
        }
    }
    struct m *nmp = mget();
    runtime_unlock(&sched.lock);
    if (nmp == NULL) {
        newm(pp, spinning);
        return;
    }
    if (nmp->spinning)
        goshim_throw("startm: m is spinning");
    if (nmp->nextp)
        goshim_throw("startm: m has p");
    nmp->spinning = spinning;
    nmp->nextp = pp;
    __atomic_fetch_add(&nmp->nwoken, 1, __ATOMIC_RELAXED);
    notewakeup(&nmp->park);
}

/* Stop the current M until startm gives it a P. Called without a P. */
void stopm(void)
{
    struct m *mp = getm();
    if (mp->p)
        goshim_throw("stopm: holding p");
    if (mp->spinning)
        goshim_throw("stopm: spinning");
    runtime_lock(&sched.lock);
    mput(mp);
    runtime_unlock(&sched.lock);
    __atomic_fetch_add(&mp->nstopm, 1, __ATOMIC_RELAXED);
    notesleep(&mp->park);
    noteclear(&mp->park);
    struct p *pp = mp->nextp;
    mp->nextp = NULL;
    acquirep(pp);
}

/* Put mp on the idle list. sched.lock must be held. */
void mput(struct m *mp)
{
    mp->schedlink = sched.midle;
    sched.midle = mp;
    sched.nmidle++;
}

/* Take an M from the idle list, or NULL. sched.lock must be held. */
struct m *mget(void)
{
    struct m *mp = sched.midle;
    if (mp) {
        sched.midle = mp->schedlink;
        mp->schedlink = NULL;
        sched.nmidle--;
    }
    return mp;
}
