/*
 * The end of surplus Ms. An M that idles while more than m_idle_keep() Ms idle ends its
 * thread after M_RETIRE_NS (stopm, m_retire): a program that once had a thousand
 * threads blocked in the kernel (each on an M) would otherwise keep a thousand OS threads
 * for good, and copy them at every fork. Before a fork the surplus ends at once
 * (machines_fork_shed).
 *
 * An M ends by going back up its own stack: mstart saved its context above the g0 stack
 * (ctx_mcall into m_run), m_retire resumes it, and mstart returns once m_exit has given
 * back the slice timer and the alternate stack, so glibc ends the thread as any other.
 * The struct stays on sched.allm (nothing that still points to it - sysmon's look at a
 * P's M, a G's last M - reads freed memory) and waits on sched.mfree for the next newm.
 * Only an M that mstart began can end: not M0 (the process's main thread), nor a fork
 * child's (its main thread now), nor one whose scheduler runs on a low TCB of the ldt
 * method (m_can_end); nor any in a sanitizer build, whose runtimes are told of every
 * stack switch (context.c) but not of this jump up the stack.
 */
#include <asm/prctl.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>

#include "preempt.h"
#include "sched.h"
#include "stack.h"
#include "tls.h"

#define M_RETIRE_NS  1000000000 /* a surplus idle M ends its thread after this long */
#define SHED_WAIT_NS 200000000  /* a fork waits at most this long for the shed Ms to end */
enum { M_IDLE_KEEP_EXTRA = 2 }; /* idle Ms kept beyond one per P (m_idle_keep) */
enum { M_STACKS_KEPT = 32 };    /* stacks of ended Ms kept for the next (m_stack_surplus) */
enum { M_STACK_KEEP = 16384 };  /* an ending M's stack bytes kept below its frame */

int32_t m_idle_keep(void)
{
    return sched.gomaxprocs + M_IDLE_KEEP_EXTRA;
}

bool m_can_end(struct m *mp)
{
#ifdef GOSHIM_SAN
    (void)mp;
    return false; /* the sanitizers follow each stack switch (context.c): not this one */
#else
    return mp->exitctx.sp && mp->g0tcb == mp->real_tcb;
#endif
}

int64_t m_surplus_until(struct m *mp)
{
    if (!m_can_end(mp) || sched.nmidle <= m_idle_keep())
        return -1;
    return nanotime() + M_RETIRE_NS;
}

GOSHIM_NO_TSAN void m_retire(struct m *mp)
{
    sched.mcount--;
    sched.nmretired++;
    runtime_unlock(&sched.lock);
    restore_own_fs_altstack(mp);
    ctx_gogo(&mp->exitctx);
}

void m_end_if_shed(struct m *mp)
{
    if (!mp->shed)
        return;
    runtime_lock(&sched.lock);
    m_retire(mp);
}

/*
 * An M's thread runs on a stack of goshim's (pthread_attr_setstack), not one glibc makes:
 * glibc then lists its descriptor with the threads on stacks of their own, which a fork
 * child's reclaim_stacks only forgets, where it writes every descriptor on a stack of its
 * own making (tid 0, for its stack cache): a page copied per M in every fork child, and
 * the dearest of them (the shadow page tables of a guest build a region the child touches
 * nowhere else; docs/measured.md). The stack stays with the struct m, which is never
 * freed, for its next thread, once the thread last on it is gone: the kernel clears that
 * descriptor's tid as the thread ends (glibc's own stacks wait for the same); in a fork
 * child, the parent's threads are gone whatever their tid says. NULL (glibc makes the
 * stack): a sanitizer build, whose runtime wants glibc's, or no memory for a new one.
 */
#ifndef GOSHIM_SAN
static bool m_stack_thread_gone(void *tcb)
{
    uint32_t *word = tls_tcb_tid_word(tcb);
    for (;;) {
        uint32_t tid = __atomic_load_n(word, __ATOMIC_ACQUIRE);
        if (tid == 0)
            return true;
        long pid = rt_syscall(SYS_getpid, 0, 0, 0);
        if (rt_syscall(SYS_tgkill, pid, tid, 0) == -ESRCH)
            return true;                   /* a fork child's copy: the thread was the parent's */
        struct timespec ms = {0, 1000000}; /* it is ending: glibc's last steps, then exit */
        rt_syscall6(SYS_futex, (long)word, FUTEX_WAIT, tid, (long)&ms, 0, 0);
    }
}
#endif

char *m_stack(struct m *mp)
{
#ifdef GOSHIM_SAN
    (void)mp;
    return NULL;
#else
    if (mp->stacks->own.map && (!mp->ownstack_tcb || m_stack_thread_gone(mp->ownstack_tcb))) {
        mp->ownstack_tcb = NULL;
        return mp->stacks->own.lo;
    }
    /* A slot of the scheduler stacks' class, M0's among them: side by side in the shared
     * region, two to a page-table page (stack_span.c). */
    struct gstack st;
    if (stack_alloc(NULL, M_STACK_SIZE, M_STACK_GUARD, &st) != 0)
        return NULL;
    stack_not_g(&st);
    mp->stacks->own = st;
    return st.lo;
#endif
}

/* mp onto sched.mfree, its stack counted (sched.lock held). */
static void mfree_put(struct m *mp)
{
    mp->schedlink = sched.mfree;
    sched.mfree = mp;
    sched.nmfreestacks += mp->stacks->own.map != NULL;
}

/*
 * The memory an ending M's scheduler stack used, given back as glibc does for a thread on
 * a stack of its own making (its frames and the descriptor, at the top, stay until the
 * thread is gone); the stack itself waits for the struct's next thread.
 */
static void m_stack_release(struct m *mp)
{
    if (!mp->stacks->own.map)
        return; /* glibc's stack: glibc gives its pages back as the thread ends */
    uintptr_t sp;
    __asm__ volatile("mov %%rsp, %0" : "=r"(sp));
    char *lo = mp->stacks->own.lo;
    char *hi = (char *)((sp - M_STACK_KEEP) & ~(uintptr_t)4095);
    if (hi > lo)
        rt_syscall(SYS_madvise, (long)lo, hi - lo, MADV_DONTNEED);
}

/*
 * At most M_STACKS_KEPT ended Ms keep their stacks, as glibc keeps at most 40 MiB of
 * ended threads' stacks for the next ones: a program that once had a thousand threads
 * blocked in the kernel would otherwise keep a GiB of address space for good (RLIMIT_AS).
 * The stacks beyond, up to max, of the Ms on sched.mfree whose threads are gone, taken
 * off those Ms into out for the caller to free; how many. sched.lock held. A stack whose
 * thread is still ending waits for the next look (the next M to end or to idle): an
 * ending M that waited for the threads ended before it made the ends of a thousand shed
 * Ms one chain, a thread at a time (docs/measured.md, session 32).
 */
static int m_stack_surplus(struct gstack *out, int max)
{
    int n = 0;
    for (struct m *mp = sched.mfree; mp && n < max && sched.nmfreestacks > M_STACKS_KEPT;
         mp = mp->schedlink)
        if (mp->stacks->own.map &&
            (!mp->ownstack_tcb ||
             __atomic_load_n(tls_tcb_tid_word(mp->ownstack_tcb), __ATOMIC_ACQUIRE) == 0)) {
            out[n++] = mp->stacks->own;
            mp->stacks->own = (struct gstack){0};
            mp->ownstack_tcb = NULL;
            sched.nmfreestacks--;
        }
    return n;
}

/* A racy look first (an idle M's every sleep asks, machines.c). */
static GOSHIM_NO_TSAN bool m_stacks_over(void)
{
    return *(volatile int32_t *)&sched.nmfreestacks > M_STACKS_KEPT;
}

void m_stacks_trim(void)
{
    if (!m_stacks_over())
        return;
    struct gstack out[16];
    runtime_lock(&sched.lock);
    int n = m_stack_surplus(out, 16);
    runtime_unlock(&sched.lock);
    while (n-- > 0)
        stack_free_now(&out[n]);
}

/*
 * Signals are blocked first but glibc's two: no slice tick recreates the timer deleted
 * here. With GS 0 the thread is no M: a signal it takes meanwhile passes goshim's
 * handlers by, and mp, once on sched.mfree, is the next newm's.
 */
void m_exit(struct m *mp)
{
    rt_mask_swap(RT_MASK_OWN_THREAD);
    preempt_m_fini(mp);
    stack_thread_fini(&mp->stacks->alt);
    rt_syscall(SYS_arch_prctl, ARCH_SET_GS, 0, 0);
    m_stack_release(mp);
    runtime_lock(&sched.lock);
    mp->retired = true;
    mfree_put(mp);
    runtime_unlock(&sched.lock);
    m_stacks_trim();
}

struct m *m_reuse(void)
{
    struct m *mp = sched.mfree;
    if (!mp)
        return NULL;
    sched.mfree = mp->schedlink;
    sched.nmfreestacks -= mp->stacks->own.map != NULL;
    struct m keep = *mp;
    memset(mp, 0, sizeof *mp);
    mp->self = mp;
    mp->id = keep.id;
    mp->alllink = keep.alllink;
    mp->fastrand = keep.fastrand;
    mp->nstopm = keep.nstopm;
    mp->nwoken = keep.nwoken;
    mp->nsyscall = keep.nsyscall;
    mp->nticks = keep.nticks;
    mp->stacks = keep.stacks;
    mp->ownstack_tcb = keep.ownstack_tcb;
    return mp;
}

struct m *m_alloc_listed(void)
{
    struct m *mp = allocm();
    if (!mp)
        return NULL;
    runtime_lock(&sched.lock);
    mp->id = sched.mids++;
    mp->alllink = sched.allm;
    sched.allm = mp;
    runtime_unlock(&sched.lock);
    return mp;
}

void m_unstarted(struct m *mp)
{
    mp->retired = true;
    mfree_put(mp);
}

/* The process's OS threads (/proc/self/stat), or -1. */
static long os_threads(void)
{
    char buf[512];
    if (rt_read_text("/proc/self/stat", buf, sizeof buf) < 0)
        return -1;
    const char *p = strrchr(buf, ')'); /* then the state; num_threads is the 18th field on */
    for (int field = 0; p && field < 18; field++)
        p = strchr(p + 1, ' ');
    return p ? strtol(p + 1, NULL, 10) : -1;
}

/* A look without sched.lock first: every fork leaves the lock's page write-protected, and
 * a fork in a loop would fault on it each time for nothing. A racy hint: a surplus M it
 * misses is copied by this fork, ended by the next. */
static GOSHIM_NO_TSAN bool surplus_hint(void)
{
    return *(volatile int32_t *)&sched.nmidle > m_idle_keep();
}

/*
 * A fork copies every thread's stacks, and glibc walks every thread's descriptor in the
 * child: a program whose thousand blocked threads have ended has one thread to copy
 * natively, and should have here too, not the thousand Ms they left idle. Nor can those
 * Ms end while the program forks in a loop: each fork holds the address space, an ending
 * thread's munmap waits for it under glibc's stack lock, and the other ending threads
 * wait for that lock - about one thread ends a fork. So the surplus ends now, and the
 * fork waits until those threads are gone, at most SHED_WAIT_NS: an ending thread frees
 * memory, and a program's allocator that the program's own prepare handler locked stays
 * locked until the fork is done.
 */
void machines_fork_shed(void)
{
    struct m *shed = NULL;
    long n = 0;
    if (!surplus_hint())
        return;
    runtime_lock(&sched.lock);
    for (struct m *mp; (mp = mget_surplus()); n++) {
        mp->schedlink = shed;
        shed = mp;
    }
    runtime_unlock(&sched.lock);
    if (n == 0)
        return;
    long before = os_threads();
    while (shed) {
        struct m *mp = shed;
        shed = mp->schedlink;
        mp->schedlink = NULL;
        mp->shed = true;
        notewakeup(&mp->park);
    }
    int64_t until = nanotime() + SHED_WAIT_NS;
    while (before > 0 && os_threads() > before - n && nanotime() < until)
        osusleep(100);
}
