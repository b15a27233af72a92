/*
 * Helper threads: the runtime's own, which are no M (sysmon, the waker, the M maker, the
 * signal router), and their deferred start in a fork child that has one thread.
 */
#include <asm/prctl.h>
#include <errno.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>

#include "libc.h"
#include "lock.h"
#include "preempt.h"
#include "sched.h"
#include "tls.h"

/* A helper's first act: it is no M. A new thread inherits its creator's GS base, an M's
 * when an M starts it (a fork child restarting sysmon): setxid.c would take it for that M
 * and clear the M's set*id mark instead of its own (seteuid in a fork child would hang). */
static void *helper_start(void *fn)
{
    rt_syscall(SYS_arch_prctl, ARCH_SET_GS, 0, 0);
    if (tls_full())
        tls_malloc_seed(tls_self()); /* helpers never end */
    return ((void *(*)(void *))fn)(NULL);
}

/*
 * The helpers' stacks: slots of one mapping of goshim's, each a guard page and the stack,
 * given to glibc as the thread's own (pthread_attr_setstack). glibc then keeps the thread
 * on its list of threads with a stack of their own, which a fork child's reclaim_stacks
 * only empties; a stack glibc made is on the list whose every other thread's descriptor
 * the child writes (tid = 0): a page copied per helper in every fork child. A fork child
 * takes the slots again (their threads are the parent's). Helpers never end. With no slot
 * left, or no mapping, glibc makes the stack, as before.
 */
/* Four helpers (sysmon, the router, the waker, the maker): a slot unused is address space a
 * program under RLIMIT_AS cannot have. */
enum { HELPER_STACK = 256 * 1024, HELPER_GUARD = 4096, HELPER_SLOTS = 4 };
static char *helper_stacks;
static uint32_t helper_slots_used FORK_WRITTEN; /* atomic; a fork child takes them again */
static uint32_t helpers_made FORK_WRITTEN;      /* atomic: helper threads of this process */

static void *helper_stack(void)
{
#ifdef __SANITIZE_THREAD__
    return NULL; /* TSan's pthread_create wants a given stack of 900 KB at least, and says so */
#endif
    if (!helper_stacks) {
        size_t len = (size_t)HELPER_SLOTS * (HELPER_GUARD + HELPER_STACK);
        void *m = (void *)rt_syscall6(SYS_mmap, 0, (long)len, PROT_READ | PROT_WRITE,
                                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if ((uintptr_t)m >= (uintptr_t)-4095)
            return NULL;
        char *expect = NULL;
        if (!__atomic_compare_exchange_n(&helper_stacks, &expect, (char *)m, 0, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE))
            rt_syscall(SYS_munmap, (long)m, (long)len, 0);
    }
    uint32_t i = __atomic_fetch_add(&helper_slots_used, 1, __ATOMIC_RELAXED);
    if (i >= HELPER_SLOTS)
        return NULL;
    char *guard = helper_stacks + (size_t)i * (HELPER_GUARD + HELPER_STACK);
    if (stack_guard_range(guard, HELPER_GUARD) < 0)
        return NULL;
    return guard + HELPER_GUARD;
}

/* A detached helper running fn, on stack (HELPER_STACK bytes) or, if NULL, on one glibc
 * makes. */
static int helper_create(void *(*fn)(void *), void *stack)
{
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (stack)
        pthread_attr_setstack(&attr, stack, HELPER_STACK);
    else
        pthread_attr_setstacksize(&attr, HELPER_STACK);
    int err = libc_pthread_create(&t, &attr, helper_start, (void *)fn);
    pthread_attr_destroy(&attr);
    return err;
}

uint32_t sched_helpers_made(void)
{
    return __atomic_load_n(&helpers_made, __ATOMIC_RELAXED);
}

/*
 * The spare: the TLS probe's thread (tls_init's then), which once its probe passed waits
 * to become the first helper the start asks for (sysmon) rather than ending: a thread's
 * end (glibc returns its stack with madvise) and another's making fewer in the program's
 * first pthread_create, where the threads' work at the start adds up as on one CPU (the
 * start took as long under taskset -c 0 here). Main expects it when the probe passed
 * (sched_spare_expect), gives it the first helper's function, or lets it go
 * (sched_spare_dismiss: it ends) when the start asked for none or failed. Either side may
 * come first (a note).
 */
static struct {
    struct note given;
    bool expected;       /* the probe thread will come (main's, during sched_init) */
    void *(*fn)(void *); /* NULL: dismissed */
} spare FORK_WRITTEN;

void sched_spare_arrive(void)
{
    notesleep(&spare.given);
    if (spare.fn)
        helper_start((void *)spare.fn);
}

void sched_spare_expect(void)
{
    spare.expected = true;
}

/* Main's: the spare's end, as helper fn or (NULL) none. False: no spare expected. */
static bool spare_end(void *(*fn)(void *))
{
    if (!spare.expected)
        return false;
    spare.expected = false;
    spare.fn = fn;
    notewakeup(&spare.given);
    return true;
}

void sched_spare_dismiss(void)
{
    spare_end(NULL);
}

int sched_helper_thread(void *(*fn)(void *))
{
    if (spare_end(fn)) {
        __atomic_add_fetch(&helpers_made, 1, __ATOMIC_RELAXED);
        return 0;
    }
    /* The new thread inherits the creator's mask: all blocked from its first
     * instruction, but for glibc's SIGCANCEL and SIGSETXID (32, 33): set*id
     * waits for every thread to take SIGSETXID (setxid.c). */
    uint64_t old = rt_mask_swap(RT_MASK_OWN_THREAD);
    void *stack = helper_stack();
    int err = helper_create(fn, stack);
    if (err && stack) /* refused on our stack (a sanitizer's pthread_create wants more) */
        err = helper_create(fn, NULL);
    /* EAGAIN passes: a helper made late (the router, the waker) failed so 16 times in 912
     * beside a process of a million goshim threads, which the next try got past. */
    for (long ms = 1; err == EAGAIN && ms <= 16; ms *= 2) {
        struct timespec nap = {0, ms * 1000000};
        rt_syscall(SYS_nanosleep, (long)&nap, 0, 0);
        err = helper_create(fn, stack);
    }
    if (!err)
        __atomic_add_fetch(&helpers_made, 1, __ATOMIC_RELAXED);
    rt_mask_swap(old);
    return err;
}

/*
 * A fork child of a threaded program is one thread again, and most such
 * children exec or exit at once: starting sysmon, the waker and the router
 * there (three clones, and an exit_group that must reap them) made a fork
 * with threads alive cost three times native's. While the child has one
 * thread, with nothing for them to do (sched_helpers_may_defer: no second
 * thread, no SCHEDTRACE, no chaos, no fixed slice, so no preemption either;
 * with preemption off, a fork at GOSHIM_PREEMPT=0 cost three times native's),
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
    uint32_t deferred;   /* atomic: helpers wait in start[] */
    uint32_t wanted;     /* atomic: a signal handler asked for them */
    uint32_t sig_wanted; /* atomic: a handler asked for the signal helpers (below) */
} lone_helpers FORK_WRITTEN;

/*
 * The helpers only signal handlers need: the router, which hands a signal sent to the
 * process to a thread that takes it, and the waker, which does a handler's sem_post.
 * Neither has work until a signal is routed (sig_dispatched: a handler of the program's,
 * or a signal at its default action that a thread blocks), and most programs never route
 * one (compilers, rg, the compressors): each is recorded here at the runtime's start
 * instead (sched_helper_for_signals), and both start when the first signal is routed
 * (sched_signal_helpers_start: two threads and about 0.3 ms less at every other threaded
 * start on the hosts measured). A fork child inherits the state: started, its own are
 * made as before (or deferred while it has one thread); not, they stay recorded.
 */
enum { SIG_HELPERS_LAZY, SIG_HELPERS_STARTED };
static struct {
    int (*start[2])(void);
    uint32_t n;
    uint32_t state; /* atomic: SIG_HELPERS_* */
} sig_helpers;

bool sched_helper_for_signals(int (*start)(void))
{
    if (__atomic_load_n(&sig_helpers.state, __ATOMIC_ACQUIRE) == SIG_HELPERS_STARTED ||
        sig_helpers.n == 2)
        return false;
    sig_helpers.start[sig_helpers.n++] = start;
    return true;
}

bool sched_signal_helpers_lazy(void)
{
    return __atomic_load_n(&sig_helpers.state, __ATOMIC_ACQUIRE) != SIG_HELPERS_STARTED;
}

/* From a context that may make threads (not a signal handler, no lock held); a fork child
 * of one thread records them with its other helpers. True if it made them now. */
bool sched_signal_helpers_start(void)
{
    __atomic_store_n(&lone_helpers.sig_wanted, 0, __ATOMIC_SEQ_CST);
    if (__atomic_exchange_n(&sig_helpers.state, SIG_HELPERS_STARTED, __ATOMIC_ACQ_REL) ==
        SIG_HELPERS_STARTED)
        return false;
    bool made = false;
    for (uint32_t i = 0; i < sig_helpers.n; i++)
        if (!sched_helper_defer(sig_helpers.start[i]))
            made |= sig_helpers.start[i]() == 0;
    sig_helpers.n = 0;
    return made;
}

void sched_signal_helpers_want(void)
{
    if (sched_signal_helpers_lazy())
        __atomic_store_n(&lone_helpers.sig_wanted, 1, __ATOMIC_SEQ_CST);
}

/* Not with a fixed slice (Go's rule: sysmon preempts whether or not anyone waits); with
 * preemption off (GOSHIM_PREEMPT=0) there is nothing to preempt either. */
FORK_TEXT bool sched_helpers_may_defer(void)
{
    return sched_lone() && sysmon_traces() == 0 && (preempt_when_waiting() || preempt_slice() <= 0);
}

FORK_TEXT bool sched_helper_defer(int (*start)(void))
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
    sched_signal_helpers_want(); /* a signal posted: the router may be needed */
}

/* Start what was deferred: from a G at a call of its own (not a signal handler, not a
 * preemption), or from an M's scheduler context holding no lock. The process has one
 * thread, so no two callers race; the exchange keeps a second call from starting twice. */
void sched_helpers_start(void)
{
    fork_settled(); /* its resets defer helpers of their own */
    if (__atomic_load_n(&lone_helpers.sig_wanted, __ATOMIC_SEQ_CST))
        sched_signal_helpers_start();
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
    uint32_t lone = __atomic_load_n(&lone_helpers.wanted, __ATOMIC_RELAXED);
    if (__builtin_expect((lone | __atomic_load_n(&lone_helpers.sig_wanted, __ATOMIC_RELAXED)) == 0,
                         1))
        return false;
    if (!lone) /* the signal helpers alone: a fork child's others stay deferred */
        return sched_signal_helpers_start();
    sched_helpers_start();
    return true;
}

/* Fork child: what the parent deferred is its own (its helpers are running or were). */
FORK_TEXT void sched_helpers_fork_child(void)
{
    FORK_SET(helper_slots_used, 0); /* their threads were the parent's */
    FORK_SET(spare.expected, false);
    FORK_SET(helpers_made, 0);
    FORK_SET(lone_helpers.n, 0);
    FORK_SET(lone_helpers.deferred, 0);
    FORK_SET(lone_helpers.wanted, 0);
    FORK_SET(lone_helpers.sig_wanted, 0); /* a parent's handler that asked: its state says */
}
