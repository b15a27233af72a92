/*
 * Thread lifecycle: pthread_create, join, detach and pthread_self on Gs,
 * and the life of the thread record (shim/thread.h) from creation to join.
 *
 * A pthread is a G plus a thread record (struct sthread). In full TLS mode
 * the pthread_t is the G's glibc TCB, exactly as glibc's pthread_t is its
 * struct pthread: pthread_self() and pthread_equal() need no interposer,
 * and glibc code that takes THREAD_SELF keeps working. pthread_create
 * therefore binds the TCB when it creates the G (spawn_attr.eager_tls). In
 * GOSHIM_TLS=errno mode Gs share their M's TCB, so the pthread_t is the
 * thread record and pthread_self is interposed.
 *
 * The record is reached from a pthread_t through goshim's own __thread
 * variable tls_thr, read inside that TCB; it outlives the G until the
 * thread is joined or, if detached, until it exits.
 *
 * Exit. thread_main, the entry of every pthread G, runs the thread
 * function and then the thread's last acts on its own stack
 * (sthread_finish: destructors, routed signals given back); pthread_exit
 * and cancellation first unwind the stack back to it (shim/unwind.c). A
 * joinable thread keeps its TCB (its pthread_t) until joined: the G is
 * marked G_KEEP_TCB, and the scheduler's exit hook, which runs only once
 * the TCB is installed on no M, hands it to the record and wakes the
 * joiner. The joiner frees it. Signalling the joiner any earlier would let
 * it free a TCB that is still the FS base of the exiting thread's M.
 *
 * The record lives in the thread's stack block, beside its TCB, when the
 * scheduler carved the TCB there (sched_g_record; sched/threadblock.c's
 * top comment): it then ends with the block (at join, or at exit for a
 * detached thread) and costs no malloc. Else it is calloc'ed.
 *
 * Also here: pthread_getattr_np and the thread names (kept in the record),
 * sched_yield, and the runtime hooks the thread layer gives the scheduler
 * (exit, resumption after a preemption, the dumps' descriptions). The
 * other thread concerns have their own files: key.c (thread-specific
 * data), once.c, unwind.c, cancel.c, sigdeliver.c (signals to threads) and
 * tid.c (thread ids and kernel settings).
 *
 * Rejected: keeping the thread record in struct g (Gs are recycled at
 * exit, a pthread_t must stay valid until join).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shim/cancel.h"
#include "shim/shim.h"
#include "shim/sigroute.h"
#include "shim/sigdeliver.h"
#include "shim/sync.h"
#include "shim/thread.h"

/* The current thread's record, per G (full mode: each G has its own TLS). */
static __thread struct sthread *tls_thr __attribute__((tls_model("initial-exec")));
static size_t tls_thr_off;
struct sthread sthread_main FORK_WRITTEN; /* its tid, when main forks */
/* Taken by whoever looks at other threads' records from outside them (the signal router)
 * and around a record's end, so a record is never freed under the router. */
struct runtime_lock sthread_lock FORK_WRITTEN; /* read by every fork child (thread_fork_child) */
/* Live pthreads, main included: the last one's exit ends the process. */
static int32_t nthreads FORK_WRITTEN = 1;

/* ---- records ------------------------------------------------------------------- */

struct sthread *sthread_self(void)
{
    if (!tls_full()) { /* errno mode: TLS is the M's, the record hangs off the G */
        struct g *gp = sched_self();
        return gp ? sched_g_thread(gp) : NULL;
    }
    struct sthread *st = tls_thr;
    __asm__ volatile("" ::: "memory");
    return st;
}

pthread_t sthread_id(struct sthread *st)
{
    return tls_full() ? (pthread_t)st->tcb : (pthread_t)st;
}

/* The record of pthread_t t, or NULL if t is not a goshim thread. */
struct sthread *sthread_lookup(pthread_t t)
{
    struct sthread *st;
    if (t == 0)
        return NULL;
    if (tls_full())
        st = *(struct sthread **)((char *)t + tls_thr_off);
    else
        st = (struct sthread *)t;
    return st && st->magic == STHREAD_MAGIC ? st : NULL;
}

/* glibc's own pthread_t for the main thread (differs from ours in errno mode). */
pthread_t sthread_glibc_id(pthread_t t, struct sthread *st)
{
    return st && st->is_main ? (pthread_t)st->tcb : t;
}

/* ---- exit, and the end of a record --------------------------------------------- */

/*
 * pthread_ts whose thread is gone (joined, or detached and exited): a join
 * or detach of one returns ESRCH, as glibc's, instead of reading the freed
 * TCB. Direct-mapped, so an old entry may be overwritten (then the call
 * falls back to glibc); a new thread whose TCB lands at the same address
 * takes its entry out.
 */
enum { GONE_SLOTS = 4096 };
static uintptr_t gone[GONE_SLOTS] GOSHIM_LARGE;

static uintptr_t *gone_slot(pthread_t t)
{
    return &gone[((uintptr_t)t >> 6) % GONE_SLOTS];
}

static bool is_gone(pthread_t t)
{
    return t && __atomic_load_n(gone_slot(t), __ATOMIC_ACQUIRE) == (uintptr_t)t;
}

static void free_thread(struct sthread *st)
{
    if (st->is_main)
        return; /* glibc's own TCB, a static record */
    __atomic_store_n(gone_slot(sthread_id(st)), (uintptr_t)sthread_id(st), __ATOMIC_RELEASE);
    void *tcb = tls_full() ? st->tcb : NULL;
    bool inblock = st->inblock;
    sthread_free_key_values(st);
    if (st->affinity)
        free(st->affinity);
    runtime_lock(&sthread_lock);
    st->magic = 0;
    runtime_unlock(&sthread_lock);
    if (st->fwd_info)
        free(st->fwd_info);
    if (!inblock)
        free(st);
    /* Last: an in-block record ends with its block. */
    if (tcb)
        sched_tcb_free(tcb); /* to this P's cache for the next pthread_create */
}

/* The thread's last acts on its own stack: destructors, then its record
 * goes to the exit hook (via the G) and the G ends. */
void sthread_finish(struct sthread *st)
{
    if (tls_full())
        tls_thread_exit(); /* C++ thread_local destructors first, as glibc */
    sthread_run_key_destructors();
    tls_robust_exit();
    runtime_lock(&st->lock);
    if (st->joinstate != JS_DETACHED && !st->is_main)
        sched_keep_tcb();
    runtime_unlock(&st->lock);
    sthread_give_back_signals(st, true);
    if (__atomic_sub_fetch(&nthreads, 1, __ATOMIC_ACQ_REL) == 0)
        exit(0); /* the last thread of a process whose main called pthread_exit */
}

/* Runs on g0 once gp's TCB is installed nowhere (see the top comment). */
static void exit_hook(struct g *gp)
{
    struct sthread *st = sched_g_thread(gp);
    if (!st)
        return;
    sched_g_set_thread(gp, NULL);
    runtime_lock(&st->lock);
    if (!sched_g_stack(gp, &st->exit_stack, &st->exit_stacksize, &st->exit_guard))
        st->exit_stack = NULL;
    st->gp = NULL;
    bool detached = st->joinstate == JS_DETACHED;
    void *kept = detached ? NULL : sched_g_take_tcb(gp); /* detached: the G keeps it for reuse */
    if (kept)
        st->tcb = kept; /* the pthread_t stays valid until joined */
    if (!detached) {
        __atomic_store_n(&st->exited, 1, __ATOMIC_RELEASE);
        runtime_unlock(&st->lock);
        gfutex_wake(&st->exited, INT_MAX);
        return;
    }
    runtime_unlock(&st->lock);
    if (!st->is_main) {
        st->tcb = NULL; /* the G keeps it for reuse */
        free_thread(st);
    }
}

/* Entry of every pthread G. */
GOSHIM_G_ENTRY static void thread_main(void *arg)
{
    struct sthread *volatile st = arg;
    tls_thr = st;
    shim_deliver_signals(); /* sent to the process and routed here before it first ran */
    if (_setjmp(st->exit_jb) == 0) {
        st->exit_cfa = (uintptr_t)__builtin_frame_address(0);
        st->retval = st->fn(st->arg);
    }
    sthread_finish(st);
}

/* ---- create, join, detach, self ------------------------------------------------ */

GOSHIM_EXPORT int pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*fn)(void *),
                                 void *arg)
{
    if (!goshim_active() && !shim_start_deferred())
        return REAL(pthread_create)(thread, attr, fn, arg);
    chaos_point();
    struct spawn_attr sa = {
        .stacksize = 0, .guardsize = (size_t)-1, .eager_tls = true, .suspended = true};
    int detach = PTHREAD_CREATE_JOINABLE;
    int inherit = PTHREAD_INHERIT_SCHED, policy = SCHED_OTHER;
    struct sched_param param = {0};
    if (attr) {
        pthread_attr_getinheritsched(attr, &inherit);
        pthread_attr_getschedpolicy(attr, &policy);
        pthread_attr_getschedparam(attr, &param);
        void *base = NULL;
        size_t size = 0, ssize = 0, guard = 0;
        pthread_attr_getdetachstate(attr, &detach);
        pthread_attr_getstacksize(attr, &size);
        pthread_attr_getguardsize(attr, &guard);
        /* glibc keeps the stack's top, NULL unless pthread_attr_setstack set it,
         * so the base it reports is (void *)-size when none was set. */
        pthread_attr_getstack(attr, &base, &ssize);
        sa.stacksize = size;
        sa.guardsize = guard;
        if ((uintptr_t)base + ssize != 0)
            sa.stackaddr = base;
    }
    int err = 0;
    struct g *gp = sched_spawn(thread_main, NULL, &sa, &err);
    if (!gp)
        return err ? err : EAGAIN;
    bool zeroed = false;
    struct sthread *st = sched_g_record(gp, &zeroed);
    /* Cleared even when the block says its pages are fresh: a G in its next life keeps its
     * stack block, which still says so, with the last record in it (whose freed fwd_info
     * would be freed again, and whose exiting flag would keep process signals away). The
     * record's page is written next anyway. */
    if (st)
        memset(st, 0, sizeof *st);
    else if (!(st = calloc(1, sizeof *st))) {
        sched_spawn_abandon(gp);
        return EAGAIN;
    }
    st->inblock = sched_g_record(gp, &zeroed) == st;
    sched_g_set_arg(gp, st);
    st->magic = STHREAD_MAGIC;
    st->fn = fn;
    st->arg = arg;
    st->joinstate = detach == PTHREAD_CREATE_DETACHED ? JS_DETACHED : JS_JOINABLE;
    st->cancelstate = PTHREAD_CANCEL_ENABLE;
    st->canceltype = PTHREAD_CANCEL_DEFERRED;
    struct sthread *creator = sthread_self();
    sthread_inherit_settings(st, creator, inherit == PTHREAD_EXPLICIT_SCHED ? &param : NULL,
                             policy);
    if (!tls_full())
        st->tid = (pid_t)tls_fake_tid();                  /* full mode: its TCB's */
    st->hidden_mask = creator ? creator->hidden_mask : 0; /* its mask is its creator's */
    sched_g_set_thread(gp, st);
    st->gp = gp;
    st->tcb = sched_g_tcb(gp);
    if (tls_full())
        *(struct sthread **)((char *)st->tcb + tls_thr_off) = st;
    __atomic_add_fetch(&nthreads, 1, __ATOMIC_RELAXED);
    *thread = sthread_id(st); /* before the thread runs, as glibc */
    uintptr_t was = (uintptr_t)*thread;
    __atomic_compare_exchange_n(gone_slot(*thread), &was, 0, false, __ATOMIC_ACQ_REL,
                                __ATOMIC_RELAXED);
    goready(gp);
    return 0;
}

static int join(pthread_t t, void **ret, int64_t deadline, bool try)
{
    struct sthread *st = sthread_lookup(t);
    struct sthread *self = sthread_self();
    if (st == self)
        return EDEADLK;
    runtime_lock(&st->lock);
    if (st->joinstate != JS_JOINABLE) {
        runtime_unlock(&st->lock);
        return EINVAL;
    }
    if (try && !__atomic_load_n(&st->exited, __ATOMIC_ACQUIRE)) {
        runtime_unlock(&st->lock);
        return EBUSY;
    }
    st->joinstate = JS_JOINING;
    runtime_unlock(&st->lock);
    while (!__atomic_load_n(&st->exited, __ATOMIC_ACQUIRE)) {
        if (!try && shim_cancel_pending()) {
            runtime_lock(&st->lock);
            st->joinstate = JS_JOINABLE; /* as glibc: the target stays joinable */
            runtime_unlock(&st->lock);
            shim_testcancel();
        }
        if (shim_wait_word(WAIT_JOIN, st, &st->exited, 0, deadline, 0) == SHIM_WAIT_TIMEDOUT &&
            !__atomic_load_n(&st->exited, __ATOMIC_ACQUIRE)) {
            runtime_lock(&st->lock);
            st->joinstate = JS_JOINABLE;
            runtime_unlock(&st->lock);
            return ETIMEDOUT;
        }
    }
    if (ret)
        *ret = st->retval;
    free_thread(st);
    return 0;
}

GOSHIM_EXPORT int pthread_join(pthread_t t, void **ret)
{
    if (goshim_on && is_gone(t))
        return ESRCH;
    if (!goshim_active() || !sthread_lookup(t))
        return REAL(pthread_join)(t, ret);
    chaos_point();
    return join(t, ret, -1, false);
}

GOSHIM_EXPORT int pthread_tryjoin_np(pthread_t t, void **ret)
{
    if (goshim_on && is_gone(t))
        return ESRCH;
    if (!goshim_active() || !sthread_lookup(t))
        return REAL(pthread_tryjoin_np)(t, ret);
    return join(t, ret, -1, true);
}

GOSHIM_EXPORT int pthread_clockjoin_np(pthread_t t, void **ret, clockid_t clock,
                                       const struct timespec *abstime)
{
    if (goshim_on && is_gone(t))
        return ESRCH;
    if (!goshim_active() || !sthread_lookup(t))
        return REAL(pthread_clockjoin_np)(t, ret, clock, abstime);
    int64_t deadline = -1;
    if (abstime) {
        if (clock != CLOCK_REALTIME && clock != CLOCK_MONOTONIC)
            return EINVAL;
        int err = gfutex_deadline(clock, abstime, &deadline);
        if (err)
            return err;
    }
    return join(t, ret, deadline, false);
}

GOSHIM_EXPORT int pthread_timedjoin_np(pthread_t t, void **ret, const struct timespec *abstime)
{
    if (goshim_on && is_gone(t))
        return ESRCH;
    if (!goshim_active() || !sthread_lookup(t))
        return REAL(pthread_timedjoin_np)(t, ret, abstime);
    return pthread_clockjoin_np(t, ret, CLOCK_REALTIME, abstime);
}

GOSHIM_EXPORT int pthread_detach(pthread_t t)
{
    struct sthread *st;
    if (goshim_on && is_gone(t))
        return ESRCH;
    if (!goshim_active() || !(st = sthread_lookup(t)))
        return REAL(pthread_detach)(t);
    runtime_lock(&st->lock);
    if (st->joinstate != JS_JOINABLE) {
        runtime_unlock(&st->lock);
        return EINVAL;
    }
    st->joinstate = JS_DETACHED;
    bool exited = __atomic_load_n(&st->exited, __ATOMIC_ACQUIRE);
    runtime_unlock(&st->lock);
    if (exited && !st->is_main)
        free_thread(st); /* nobody will join it */
    return 0;
}

GOSHIM_EXPORT pthread_t pthread_self(void)
{
    if (goshim_on && !tls_full()) {
        struct sthread *st = sthread_self();
        if (st && sched_self())
            return (pthread_t)st;
    }
    return REAL(pthread_self)();
}

/* ---- yield, runtime hooks, attributes, names ----------------------------------- */

GOSHIM_EXPORT int sched_yield(void)
{
    if (!goshim_active())
        return REAL(sched_yield)();
    /* At once when no thread of ours waits; but every 256th such call is the kernel's,
     * which gives the CPU to another process that waits for it (a real-time one would
     * otherwise never run). */
    static __thread uint32_t idle_yields __attribute__((tls_model("initial-exec")));
    if (!sched_yield_explicit() && (++idle_yields & 255) == 0)
        REAL(sched_yield)();
    shim_deliver_signals(); /* sent while it waited for a P */
    shim_async_cancel();
    return 0;
}

/* For dumps (sched/dump.c): the thread's name, and what it waits for when the object is
 * better named than by its address. */
static void describe(struct g *gp, char *name, size_t nlen, char *obj, size_t olen)
{
    struct sthread *st = sched_g_thread(gp);
    if (st && st->magic == STHREAD_MAGIC && st->name[0])
        snprintf(name, nlen, " \"%.15s\"", st->name);
    else if (st && st->is_main)
        snprintf(name, nlen, " (main)");
    void *waitobj;
    int kind = sched_g_waiting(gp, &waitobj);
    struct sthread *target = waitobj;
    if (kind == WAIT_JOIN && target && target->magic == STHREAD_MAGIC && target->gp)
        snprintf(obj, olen, "of thread %lu", (unsigned long)sched_g_id(target->gp));
    else if (kind == WAIT_IO && waitobj)
        snprintf(obj, olen, "on fd %d", (int)(intptr_t)waitobj);
}

/* For dumps and leak reports (sched/dump.c): the G that gp's join or mutex wait needs. */
static struct g *blocker(struct g *gp, int *gone_id)
{
    void *waitobj;
    int kind = sched_g_waiting(gp, &waitobj);
    struct sthread *target = waitobj;
    *gone_id = 0;
    if (kind == WAIT_JOIN && target && target->magic == STHREAD_MAGIC)
        return target->gp;
    if (kind == WAIT_MUTEX && waitobj)
        return gmutex_holder(waitobj, gone_id);
    return NULL;
}

static void deliver_after_preemption(void)
{
    shim_deliver_signals();
    shim_async_cancel();
}

GOSHIM_EXPORT int pthread_getattr_np(pthread_t t, pthread_attr_t *attr)
{
    STHREAD_OR_GLIBC(st, t, pthread_getattr_np, attr);
    int err = pthread_attr_init(attr);
    if (err)
        return err;
    void *lo = NULL;
    size_t size = 0, guard = 0;
    runtime_lock(&st->lock);
    struct g *gp = st->gp;
    if (!gp && st->exit_stack) { /* ended, not joined: its stack is kept */
        lo = st->exit_stack;
        size = st->exit_stacksize;
        guard = st->exit_guard;
    }
    runtime_unlock(&st->lock);
    if (lo || (gp && sched_g_stack(gp, &lo, &size, &guard))) {
        pthread_attr_setstack(attr, lo, size);
        pthread_attr_setguardsize(attr, guard);
    }
    runtime_lock(&st->lock);
    pthread_attr_setdetachstate(attr, st->joinstate == JS_DETACHED ? PTHREAD_CREATE_DETACHED
                                                                   : PTHREAD_CREATE_JOINABLE);
    runtime_unlock(&st->lock);
    return 0;
}

GOSHIM_EXPORT int pthread_setname_np(pthread_t t, const char *name)
{
    STHREAD_OR_GLIBC(st, t, pthread_setname_np, name);
    size_t n = strlen(name);
    if (n >= sizeof st->name)
        return ERANGE;
    memcpy(st->name, name, n + 1);
    return 0;
}

GOSHIM_EXPORT int pthread_getname_np(pthread_t t, char *buf, size_t len)
{
    STHREAD_OR_GLIBC(st, t, pthread_getname_np, buf, len);
    size_t n = strlen(st->name);
    if (len < n + 1)
        return ERANGE;
    memcpy(buf, st->name, n + 1);
    return 0;
}

/* ---- start-up ------------------------------------------------------------------ */

/* A fork child has one thread, the one that forked: its exit is the last. */
FORK_TEXT static void thread_fork_child(void)
{
    FORK_SET(nthreads, 1);
    FORK_SET(sthread_lock.key, 0); /* threads the child does not have may have held these */
    struct sthread *self = goshim_on ? sthread_self() : NULL;
    if (self) { /* the pid, as the main thread's (full mode: the runtime set its TCB's) */
        FORK_SET(self->lock.key, 0);
        pid_t pid = sched_fork_pid();
        self->tid = pid ? pid : (pid_t)rt_syscall(SYS_getpid, 0, 0, 0);
    }
    /* Forked by another thread, the child has no main thread: a signal for the process
     * posted to the parent's would wait for ever for a thread the child does not have. */
    if (self && self != &sthread_main)
        __atomic_store_n(&sthread_main.gp, NULL, __ATOMIC_RELEASE);
}

int shim_thread_atfork(void)
{
    static bool done;
    return sched_atfork_once(&done, NULL, NULL, thread_fork_child);
}

int shim_thread_init(void)
{
    tls_thr_off = (size_t)((char *)&tls_thr - (char *)tls_self());
    sched_tcb_layout_init(sizeof(struct sthread));
    return shim_thread_atfork();
}

void shim_thread_hooks(struct sched_hooks *h)
{
    h->exited = exit_hook;
    h->resumed = deliver_after_preemption;
    h->describe = describe;
    h->blocker = blocker;
    h->signal_may_wake = shim_signal_may_wake;
    h->route_posted = sig_route_posted;
    h->idle_lets = shim_idle_lets;
    h->in_handler = shim_in_handler;
}

/* Signals pending for the main OS thread itself when it became the main G (raised while
 * blocked before a deferred start, or kept across exec) are the main thread's, not M0's: a
 * G that ran on M0 later would see them as its own (prog_thread_facts pending). They move
 * to its own set, one instance each, as goshim keeps a thread's (the kernel's SigPnd is the
 * thread's; ShdPnd, the process's, stays). */
static void adopt_thread_pending(struct sthread *st)
{
    uint64_t any = 0; /* the thread's and the process's, blocked (a process has none, mostly) */
    if (rt_syscall(SYS_rt_sigpending, (long)&any, sizeof any, 0) == 0 && any == 0)
        return; /* no /proc read (60 us of the start here) */
    char buf[2048];
    const char *p = rt_read_text("/proc/thread-self/status", buf, sizeof buf) > 0
                        ? strstr(buf, "\nSigPnd:\t")
                        : NULL;
    if (!p)
        return;
    uint64_t pend = strtoull(p + 9, NULL, 16);
    struct timespec zero = {0, 0};
    for (int sig = 1; sig <= 64 && pend; sig++) {
        uint64_t one = 1ULL << (sig - 1);
        if ((pend & one) && !preempt_owns(sig) &&
            rt_syscall6(SYS_rt_sigtimedwait, (long)&one, 0, (long)&zero, 8, 0, 0) == sig)
            __atomic_or_fetch(&st->sigpending, one, __ATOMIC_SEQ_CST);
    }
}

void shim_thread_adopted_main(void)
{
    struct sthread *st = &sthread_main;
    st->magic = STHREAD_MAGIC;
    st->is_main = true;
    st->joinstate = JS_JOINABLE;
    st->tcb = tls_self();
    st->tid = getpid();
    st->cancelstate = PTHREAD_CANCEL_ENABLE;
    st->canceltype = PTHREAD_CANCEL_DEFERRED;
    tls_thr = st;
    st->gp = sched_self();
    sched_g_set_thread(st->gp, st);
    adopt_thread_pending(st);
}
