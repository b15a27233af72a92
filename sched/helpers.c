/*
 * Helper threads: the runtime's own, which are no M (sysmon, the waker, the M maker, the
 * signal router), and their deferred start in a fork child that has one thread.
 */
#include <asm/prctl.h>
#include <pthread.h>
#include <sys/syscall.h>

#include "libc.h"
#include "preempt.h"
#include "sched.h"

/* A helper's first act: it is no M. A new thread inherits its creator's GS base, an M's
 * when an M starts it (a fork child restarting sysmon): setxid.c would take it for that M
 * and clear the M's set*id mark instead of its own (seteuid in a fork child would hang). */
static void *helper_start(void *fn)
{
    rt_syscall(SYS_arch_prctl, ARCH_SET_GS, 0, 0);
    return ((void *(*)(void *))fn)(NULL);
}

int sched_helper_thread(void *(*fn)(void *))
{
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    /* The new thread inherits the creator's mask: all blocked from its first
     * instruction, but for glibc's SIGCANCEL and SIGSETXID (32, 33): set*id
     * waits for every thread to take SIGSETXID (setxid.c). */
    uint64_t all = ~((1ULL << 31) | (1ULL << 32)), old = 0;
    rt_syscall6(SYS_rt_sigprocmask, SIG_SETMASK, (long)&all, (long)&old, sizeof all, 0, 0);
    int err = libc_pthread_create(&t, &attr, helper_start, (void *)fn);
    rt_syscall6(SYS_rt_sigprocmask, SIG_SETMASK, (long)&old, 0, sizeof old, 0, 0);
    pthread_attr_destroy(&attr);
    return err;
}

/*
 * A fork child of a threaded program is one thread again, and most such
 * children exec or exit at once: starting sysmon, the waker and the router
 * there (three clones, and an exit_group that must reap them) made a fork
 * with threads alive cost three times native's. While the child has one
 * thread, with nothing for them to do (sched_helpers_may_defer: no second
 * thread, no SCHEDTRACE, no chaos, no fixed slice, so no preemption either),
 * each helper is recorded here instead, and all start together from a
 * context that may make threads, at the first of:
 *   - a spawn (newproc, when the process stops being single-threaded);
 *   - the thread parking in the scheduler (stopm: sysmon's deadlock check,
 *     the waker's deferred wakes and the router's interrupted waits serve a
 *     parked thread);
 *   - a signal sent to the own process (kill, sigqueue: the router hands it on);
 *   - a signal a handler posted to the absent router (sched_helpers_want,
 *     async-signal-safe), acted on when the thread is next back from the
 *     scheduler (sched_helpers_check) or changes or reads its signal state.
 * A child that execs or exits before any of these makes no helper at all.
 */
enum { HELPERS = 8 }; /* waker, sysmon, maker, router, slice timer, and room */
static struct {
    int (*start[HELPERS])(void);
    uint32_t n;
    uint32_t deferred; /* atomic: helpers wait in start[] */
    uint32_t wanted;   /* atomic: a signal handler asked for them */
} lone_helpers FORK_WRITTEN;

bool sched_helpers_may_defer(void)
{
    return sched_lone() && sysmon_traces() == 0 && preempt_when_waiting();
}

bool sched_helper_defer(int (*start)(void))
{
    if (lone_helpers.n == HELPERS || !sched_helpers_may_defer())
        return false;
    lone_helpers.start[lone_helpers.n++] = start;
    __atomic_store_n(&lone_helpers.deferred, 1, __ATOMIC_SEQ_CST);
    return true;
}

bool sched_helpers_deferred(void)
{
    return __atomic_load_n(&lone_helpers.deferred, __ATOMIC_SEQ_CST) != 0;
}

void sched_helpers_want(void)
{
    if (sched_helpers_deferred())
        __atomic_store_n(&lone_helpers.wanted, 1, __ATOMIC_SEQ_CST);
}

/* Start what was deferred: from a G at a call of its own (not a signal handler, not a
 * preemption), or from an M's scheduler context holding no lock. The process has one
 * thread, so no two callers race; the exchange keeps a second call from starting twice. */
void sched_helpers_start(void)
{
    fork_settled(); /* its resets defer helpers of their own */
    if (!__atomic_exchange_n(&lone_helpers.deferred, 0, __ATOMIC_SEQ_CST))
        return;
    __atomic_store_n(&lone_helpers.wanted, 0, __ATOMIC_SEQ_CST);
    uint32_t n = lone_helpers.n;
    lone_helpers.n = 0;
    for (uint32_t i = 0; i < n; i++)
        lone_helpers.start[i]();
}

bool sched_helpers_check(void)
{
    if (__builtin_expect(__atomic_load_n(&lone_helpers.wanted, __ATOMIC_RELAXED) == 0, 1))
        return false;
    sched_helpers_start();
    return true;
}

/* Fork child: what the parent deferred is its own (its helpers are running or were). */
void sched_helpers_fork_child(void)
{
    FORK_SET(lone_helpers.n, 0);
    FORK_SET(lone_helpers.deferred, 0);
    FORK_SET(lone_helpers.wanted, 0);
}
