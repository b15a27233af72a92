/*
 * Thread lifecycle: pthread_create and friends, on Gs.
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
 * Exit. A joinable thread keeps its TCB (its pthread_t) until joined: the
 * G is marked G_KEEP_TCB, and the scheduler's exit hook, which runs only
 * once the TCB is installed on no M, hands it to the record and wakes the
 * joiner. The joiner frees it. Signalling the joiner any earlier would let
 * it free a TCB that is still the FS base of the exiting thread's M.
 *
 * pthread_exit and cancellation unwind the thread's stack like glibc:
 * _Unwind_ForcedUnwind runs C++ destructors, and our stop function jumps
 * into the buffers that C's pthread_cleanup_push registered (through the
 * interposed __pthread_register_cancel) so their handlers run, innermost
 * first, and finally back to the thread's entry frame. glibc's own
 * pthread_exit cannot be used: it ends with a longjmp to a buffer that only
 * its start_thread sets up.
 *
 * The record lives in the thread's stack block, beside its TCB, when the
 * scheduler carved the TCB there (sched_g_record; proc.c's top comment):
 * it then ends with the block (at join, or at exit for a detached thread)
 * and costs no malloc. Else it is calloc'ed.
 *
 * Rejected: keeping the thread record in struct g (Gs are recycled at
 * exit, a pthread_t must stay valid until join).
 */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <unwind.h>

#include "sched/gfutex.h"
#include "sched/preempt.h"
#include "sched/throw.h"
#include "sched/tls.h"
#include "shim/shim.h"
#include "shim/sync.h"
#include "shim/thread.h"

#define STHREAD_MAGIC 0x67746872u /* "gthr" */

enum { JS_JOINABLE, JS_DETACHED, JS_JOINING };

struct sthread {
    uint32_t magic;
    uint32_t exited; /* futex word: 1 once the exit hook ran */
    bool inblock;    /* lives in its thread's stack block (sched_g_record), not malloc'ed */
    struct runtime_lock lock;
    int joinstate; /* JS_*; lock */
    bool is_main;
    struct g *gp; /* its G while it runs; NULL after exit */
    void *tcb;    /* the pthread_t (full mode) */
    void *(*fn)(void *);
    void *arg;
    void *retval;
    jmp_buf exit_jb;                 /* in thread_main: where an unwind ends */
    uintptr_t exit_cfa;              /* thread_main's frame: unwinding past it ends the unwind */
    __pthread_unwind_buf_t *cleanup; /* C cleanup buffers, innermost first */
    struct _Unwind_Exception exc;
    int cancelstate;    /* PTHREAD_CANCEL_ENABLE/DISABLE */
    int canceltype;     /* PTHREAD_CANCEL_DEFERRED/ASYNCHRONOUS (stored only) */
    uint32_t cancelreq; /* pthread_cancel was called */
    /* The process-shared cond it waits on in glibc (shim_pshared_cond_wait), or NULL; lock. */
    pthread_cond_t *pshared_cond;
    pthread_mutex_t *pshared_mutex; /* the mutex of that wait; lock */
    /* Signals sent to it and not yet delivered (bit sig-1): whoever clears a bit delivers
     * it (see "pthread_kill" below); atomic. procpend: which of them were sent to the
     * process and routed here (they go back to the process if it exits or blocks them);
     * atomic. exiting: it takes no more (st->lock). */
    uint64_t sigpending;
    uint64_t procpend;
    bool exiting;
    /* Taken out of sigpending and rung on its own OS thread (shim_deliver_signals), not
     * yet handled: the first bell of the signal that arrives there runs the handler (the
     * kernel merges a bell into one of the same signal pending on that thread); atomic. */
    uint64_t owed;
    /* Process-directed signals forwarded to it (shim/signal.c): the set whose siginfo waits
     * in fwd_info (allocated by the first forward, under thr_lock), atomic; the signals it
     * waits for in sigwait and friends, atomic; and the ones of never_blocked() that the
     * program asked to block (reported back, never installed). */
    uint64_t fwd;
    siginfo_t *fwd_info;
    uint64_t sigwaiting;
    uint64_t hidden_mask;
    uint32_t handlers_ran; /* handlers of the program run on it (shim_handler_ran); owner */
    char name[16];
    /* Per-thread kernel settings a G cannot have (its tid is not the
     * kernel's): accepted, kept and reported back, not enforced. */
    void ***keyblk;      /* errno mode: key values, 32 blocks of 32; both levels lazily */
    cpu_set_t *affinity; /* lock; NULL until pthread_setaffinity_np (then freed with the record) */
    int policy;
    struct sched_param param;
};

/* The current thread's record, per G (full mode: each G has its own TLS). */
static __thread struct sthread *tls_thr __attribute__((tls_model("initial-exec")));
static size_t tls_thr_off;
static struct sthread main_thread;
/* Taken by whoever looks at other threads' records from outside them (the signal router)
 * and around a record's end, so a record is never freed under the router. */
static struct runtime_lock thr_lock;
static int32_t nthreads =
    1; /* live pthreads, main included: the last one's exit ends the process */

/* Key destructors, recorded by the pthread_key_create interposer. */
#define NKEYS 1024
static void (*key_dtor[NKEYS])(void *);
/* One past the highest key ever given a destructor: an exit looks at no
 * key above it, so a program without destructors pays nothing per exit. */
static uint32_t key_dtor_top;

static struct sthread *self_thread(void)
{
    if (!sched.tls_full) { /* errno mode: TLS is the M's, the record hangs off the G */
        struct g *gp = sched_self();
        return gp ? gp->thr : NULL;
    }
    struct sthread *st = tls_thr;
    __asm__ volatile("" ::: "memory");
    return st;
}

static pthread_t thread_id(struct sthread *st)
{
    return sched.tls_full ? (pthread_t)st->tcb : (pthread_t)st;
}

/* The record of pthread_t t, or NULL if t is not a goshim thread. */
static struct sthread *lookup(pthread_t t)
{
    struct sthread *st;
    if (t == 0)
        return NULL;
    if (sched.tls_full)
        st = *(struct sthread **)((char *)t + tls_thr_off);
    else
        st = (struct sthread *)t;
    return st && st->magic == STHREAD_MAGIC ? st : NULL;
}

/* glibc's own pthread_t for the main thread (differs from ours in errno mode). */
static pthread_t glibc_id(pthread_t t, struct sthread *st)
{
    return st && st->is_main ? (pthread_t)st->tcb : t;
}

/* ---- key values ------------------------------------------------------------ */

/*
 * In full TLS mode every G has its own TCB, so glibc's pthread_getspecific
 * and pthread_setspecific (which use THREAD_SELF) are per G already. In
 * errno mode Gs share their M's TCB: the values live in the thread record.
 */
static void **key_slot(struct sthread *st, pthread_key_t k, bool create)
{
    if (!st->keyblk && (!create || !(st->keyblk = calloc(32, sizeof *st->keyblk))))
        return NULL;
    void **blk = st->keyblk[k / 32];
    if (!blk) {
        if (!create || !(blk = calloc(32, sizeof *blk)))
            return NULL;
        st->keyblk[k / 32] = blk;
    }
    return &blk[k % 32];
}

static void *key_get(pthread_key_t k)
{
    struct sthread *st;
    if (!goshim_on || sched.tls_full || !(st = self_thread()))
        return REAL(pthread_getspecific)(k);
    if (k >= NKEYS)
        return NULL;
    void **slot = key_slot(st, k, false);
    return slot ? *slot : NULL;
}

__attribute__((noinline)) static int key_set(pthread_key_t k, const void *v)
{
    struct sthread *st;
    if (!goshim_on || sched.tls_full || !(st = self_thread()))
        return REAL(pthread_setspecific)(k, v);
    if (k >= NKEYS)
        return EINVAL;
    void **slot = key_slot(st, k, v != NULL);
    if (slot)
        *slot = (void *)v;
    else if (v)
        return ENOMEM;
    return 0;
}

GOSHIM_EXPORT void *pthread_getspecific(pthread_key_t k)
{
    return key_get(k);
}

/* glibc declares v access(none): it is stored, never read; say so to gcc. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
GOSHIM_EXPORT int pthread_setspecific(pthread_key_t k, const void *v)
{
    return key_set(k, v);
}
#pragma GCC diagnostic pop

/* ---- exit ---------------------------------------------------------------- */

static void run_key_destructors(void)
{
    for (int round = 0; round < PTHREAD_DESTRUCTOR_ITERATIONS; round++) {
        bool again = false;
        pthread_key_t top = __atomic_load_n(&key_dtor_top, __ATOMIC_ACQUIRE);
        for (pthread_key_t k = 0; k < top; k++) {
            void (*dtor)(void *) = __atomic_load_n(&key_dtor[k], __ATOMIC_ACQUIRE);
            if (!dtor)
                continue;
            void *v = key_get(k);
            if (!v)
                continue;
            key_set(k, NULL);
            dtor(v);
            again = true;
        }
        if (!again)
            break;
    }
}

/*
 * pthread_ts whose thread is gone (joined, or detached and exited): a join
 * or detach of one returns ESRCH, as glibc's, instead of reading the freed
 * TCB. Direct-mapped, so an old entry may be overwritten (then the call
 * falls back to glibc); a new thread whose TCB lands at the same address
 * takes its entry out.
 */
enum { GONE_SLOTS = 4096 };
static uintptr_t gone[GONE_SLOTS];

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
    __atomic_store_n(gone_slot(thread_id(st)), (uintptr_t)thread_id(st), __ATOMIC_RELEASE);
    void *tcb = sched.tls_full ? st->tcb : NULL;
    bool inblock = st->inblock;
    if (st->keyblk)
        for (int i = 0; i < 32; i++)
            free(st->keyblk[i]);
    free(st->keyblk);
    free(st->affinity);
    runtime_lock(&thr_lock);
    st->magic = 0;
    runtime_unlock(&thr_lock);
    free(st->fwd_info);
    if (!inblock)
        free(st);
    /* Last: an in-block record ends with its block. */
    if (tcb)
        sched_tcb_free(tcb); /* to this P's cache for the next pthread_create */
}

static void give_back_process_signals(struct sthread *st, bool exiting);

/* The thread's last acts on its own stack: destructors, then its record
 * goes to the exit hook (via the G) and the G ends. */
static void thread_finish(struct sthread *st)
{
    if (sched.tls_full)
        tls_thread_exit(); /* C++ thread_local destructors first, as glibc */
    run_key_destructors();
    struct g *gp = sched_self();
    runtime_lock(&st->lock);
    if (st->joinstate != JS_DETACHED && !st->is_main)
        gp->flags |= G_KEEP_TCB;
    runtime_unlock(&st->lock);
    give_back_process_signals(st, true);
    if (__atomic_sub_fetch(&nthreads, 1, __ATOMIC_ACQ_REL) == 0)
        exit(0); /* the last thread of a process whose main called pthread_exit */
}

/* Runs on g0 once gp's TCB is installed nowhere (see the top comment). */
static void exit_hook(struct g *gp)
{
    struct sthread *st = gp->thr;
    if (!st)
        return;
    gp->thr = NULL;
    runtime_lock(&st->lock);
    st->gp = NULL;
    bool detached = st->joinstate == JS_DETACHED;
    if (!detached && (gp->flags & G_KEEP_TCB)) {
        st->tcb = gp->tcb; /* the pthread_t stays valid until joined */
        gp->tcb = NULL;
    }
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

static _Unwind_Reason_Code exit_stop(int version, _Unwind_Action actions,
                                     _Unwind_Exception_Class cls, struct _Unwind_Exception *exc,
                                     struct _Unwind_Context *ctx, void *param);

static uintptr_t jmpbuf_sp(const __pthread_unwind_buf_t *buf)
{
    /* glibc mangles the saved SP (x86-64 PTR_MANGLE: xor the pointer guard, rotate left 17). */
    uintptr_t v = (uintptr_t)buf->__cancel_jmp_buf[0].__cancel_jmp_buf[6];
    uintptr_t guard;
    __asm__("mov %%fs:0x30, %0" : "=r"(guard));
    v = (v >> 17) | (v << 47);
    return v ^ guard;
}

__attribute__((noreturn)) static void unwind_thread(struct sthread *st)
{
    memset(&st->exc, 0, sizeof st->exc);
    st->exc.exception_class = 0x474f5348494d0000ULL; /* "GOSHIM\0\0" */
    _Unwind_ForcedUnwind(&st->exc, exit_stop, st);
    /* No unwind information at all: skip the cleanups rather than crash. */
    rt_print(2, "goshim: pthread_exit: cannot unwind the thread's stack; cleanup handlers "
                "and destructors are skipped\n");
    if (st->is_main) {
        thread_finish(st);
        goexit();
    }
    _longjmp(st->exit_jb, 1);
}

static _Unwind_Reason_Code exit_stop(int version, _Unwind_Action actions,
                                     _Unwind_Exception_Class cls, struct _Unwind_Exception *exc,
                                     struct _Unwind_Context *ctx, void *param)
{
    (void)version;
    (void)cls;
    (void)exc;
    struct sthread *st = param;
    bool end = (actions & _UA_END_OF_STACK) != 0;
    uintptr_t cfa = end ? UINTPTR_MAX : (uintptr_t)_Unwind_GetCFA(ctx);
    __pthread_unwind_buf_t *buf = st->cleanup;
    if (buf && cfa > jmpbuf_sp(buf)) { /* about to leave the frame that pushed it */
                                       /* The buffer is a jmp_buf without the signal mask (glibc's
         * __sigsetjmp(buf, 0)); longjmp reads the mask only when saved. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-overflow"
        longjmp((struct __jmp_buf_tag *)(void *)buf->__cancel_jmp_buf, 1);
#pragma GCC diagnostic pop
    }
    if (st->is_main) {
        if (end) {
            thread_finish(st);
            goexit();
        }
    } else if (end || cfa > st->exit_cfa) {
        _longjmp(st->exit_jb, 1);
    }
    return _URC_NO_REASON;
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
    thread_finish(st);
}

/* ---- create, join, detach, exit ------------------------------------------- */

GOSHIM_EXPORT int pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*fn)(void *),
                                 void *arg)
{
    if (!goshim_active())
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
     * stack block, which still says so, with the last record in it (its freed fwd_info
     * was freed again: pthread_detach/4-3 aborted; its exiting flag kept process signals
     * away). The record's page is written next anyway. */
    if (st)
        memset(st, 0, sizeof *st);
    else if (!(st = calloc(1, sizeof *st))) {
        sched_spawn_abandon(gp);
        return EAGAIN;
    }
    st->inblock = sched_g_record(gp, &zeroed) == st;
    gp->arg = st;
    st->magic = STHREAD_MAGIC;
    st->fn = fn;
    st->arg = arg;
    st->joinstate = detach == PTHREAD_CREATE_DETACHED ? JS_DETACHED : JS_JOINABLE;
    st->cancelstate = PTHREAD_CANCEL_ENABLE;
    st->canceltype = PTHREAD_CANCEL_DEFERRED;
    if (inherit == PTHREAD_EXPLICIT_SCHED) { /* kept and reported, not enforced */
        st->policy = policy;
        st->param = param;
    } else {
        struct sthread *self = self_thread();
        if (self && !self->is_main) {
            st->policy = self->policy;
            st->param = self->param;
        }
    }
    struct sthread *creator = self_thread();
    st->hidden_mask = creator ? creator->hidden_mask : 0; /* its mask is its creator's */
    gp->thr = st;
    st->gp = gp;
    st->tcb = gp->tcb;
    if (sched.tls_full)
        *(struct sthread **)((char *)gp->tcb + tls_thr_off) = st;
    __atomic_add_fetch(&nthreads, 1, __ATOMIC_RELAXED);
    *thread = thread_id(st); /* before the thread runs, as glibc */
    uintptr_t was = (uintptr_t)*thread;
    __atomic_compare_exchange_n(gone_slot(*thread), &was, 0, false, __ATOMIC_ACQ_REL,
                                __ATOMIC_RELAXED);
    goready(gp);
    return 0;
}

static int join(pthread_t t, void **ret, int64_t deadline, bool try)
{
    struct sthread *st = lookup(t);
    struct sthread *self = self_thread();
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
        if (sync_wait(WAIT_JOIN, st, &st->exited, 0, deadline) == ETIMEDOUT &&
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
    if (!goshim_active() || !lookup(t))
        return REAL(pthread_join)(t, ret);
    chaos_point();
    return join(t, ret, -1, false);
}

GOSHIM_EXPORT int pthread_tryjoin_np(pthread_t t, void **ret)
{
    if (goshim_on && is_gone(t))
        return ESRCH;
    if (!goshim_active() || !lookup(t))
        return REAL(pthread_tryjoin_np)(t, ret);
    return join(t, ret, -1, true);
}

GOSHIM_EXPORT int pthread_clockjoin_np(pthread_t t, void **ret, clockid_t clock,
                                       const struct timespec *abstime)
{
    if (goshim_on && is_gone(t))
        return ESRCH;
    if (!goshim_active() || !lookup(t))
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
    if (!goshim_active() || !lookup(t))
        return REAL(pthread_timedjoin_np)(t, ret, abstime);
    return pthread_clockjoin_np(t, ret, CLOCK_REALTIME, abstime);
}

GOSHIM_EXPORT int pthread_detach(pthread_t t)
{
    struct sthread *st;
    if (goshim_on && is_gone(t))
        return ESRCH;
    if (!goshim_active() || !(st = lookup(t)))
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

GOSHIM_EXPORT void pthread_exit(void *retval)
{
    struct sthread *st;
    if (!goshim_active() || !(st = self_thread()))
        REAL(pthread_exit)(retval);
    st->retval = retval;
    unwind_thread(st);
}

GOSHIM_EXPORT pthread_t pthread_self(void)
{
    if (goshim_on && !sched.tls_full) {
        struct sthread *st = self_thread();
        if (st && sched_self())
            return (pthread_t)st;
    }
    return REAL(pthread_self)();
}

/* ---- C cleanup handlers: the buffers pthread_cleanup_push registers ------- */

GOSHIM_EXPORT void __pthread_register_cancel(__pthread_unwind_buf_t *buf)
{
    struct sthread *st = goshim_on ? self_thread() : NULL;
    if (!st || !sched_self()) {
        REAL(__pthread_register_cancel)(buf);
        return;
    }
    buf->__pad[0] = st->cleanup; /* priv.data.prev */
    st->cleanup = buf;
}

GOSHIM_EXPORT void __pthread_unregister_cancel(__pthread_unwind_buf_t *buf)
{
    struct sthread *st = goshim_on ? self_thread() : NULL;
    if (!st || !sched_self()) {
        REAL(__pthread_unregister_cancel)(buf);
        return;
    }
    st->cleanup = buf->__pad[0];
}

GOSHIM_EXPORT void __pthread_unwind_next(__pthread_unwind_buf_t *buf)
{
    struct sthread *st = goshim_on ? self_thread() : NULL;
    if (!st || !sched_self())
        REAL(__pthread_unwind_next)(buf);
    st->cleanup = buf->__pad[0];
    unwind_thread(st);
}

/* ---- cancellation (deferred) ------------------------------------------------ */

GOSHIM_EXPORT int pthread_setcancelstate(int state, int *old)
{
    struct sthread *st;
    if (!goshim_active() || !(st = self_thread()))
        return REAL(pthread_setcancelstate)(state, old);
    if (state != PTHREAD_CANCEL_ENABLE && state != PTHREAD_CANCEL_DISABLE)
        return EINVAL;
    if (old)
        *old = st->cancelstate;
    st->cancelstate = state;
    return 0; /* a request made while disabled is acted on at the next cancellation point */
}

GOSHIM_EXPORT int pthread_setcanceltype(int type, int *old)
{
    struct sthread *st;
    if (!goshim_active() || !(st = self_thread()))
        return REAL(pthread_setcanceltype)(type, old);
    if (type != PTHREAD_CANCEL_DEFERRED && type != PTHREAD_CANCEL_ASYNCHRONOUS)
        return EINVAL;
    if (old)
        *old = st->canceltype;
    st->canceltype = type;
    return 0;
}

bool shim_cancel_pending(void)
{
    struct sthread *st = goshim_active() ? self_thread() : NULL;
    return st && st->cancelstate == PTHREAD_CANCEL_ENABLE &&
           __atomic_load_n(&st->cancelreq, __ATOMIC_ACQUIRE);
}

void shim_testcancel(void)
{
    if (shim_cancel_pending()) {
        struct sthread *st = self_thread();
        st->cancelstate = PTHREAD_CANCEL_DISABLE; /* as glibc: no second cancel while unwinding */
        st->retval = PTHREAD_CANCELED;
        unwind_thread(st);
    }
}

/* With PTHREAD_CANCEL_ASYNCHRONOUS, a pending cancellation acts at any point where the
 * thread's state is whole: back from a mutex or join wait, a yield, a preemption. */
void shim_async_cancel(void)
{
    struct sthread *st = goshim_active() ? self_thread() : NULL;
    if (st && st->canceltype == PTHREAD_CANCEL_ASYNCHRONOUS)
        shim_testcancel();
}

GOSHIM_EXPORT void pthread_testcancel(void)
{
    if (!goshim_active() || !self_thread()) {
        REAL(pthread_testcancel)();
        return;
    }
    shim_testcancel();
}

/*
 * A process-shared cond is glibc's (shim/cond.c): a thread waiting on one sleeps in glibc's
 * futex wait, on its M, where goshim's wake-ups do not reach, and glibc's own cancellation
 * signals a kernel tid the thread does not have. So pthread_cancel wakes every waiter of
 * that cond with a broadcast (a spurious wake-up for the others, which POSIX allows and
 * they wait again after); the target comes back from glibc with the mutex re-acquired and
 * acts on the cancellation there, as a cancellation point does. Unless the canceller holds
 * the wait's mutex, the target may be between announcing the wait and glibc's registering
 * it as a waiter (it holds the mutex all that time): then the broadcast is repeated until
 * it has left the wait, a few times at once, then every millisecond, for a second at most.
 * Under st->lock, so the cond is never touched after its waiter left it (the program may
 * destroy it then). Rejected: a signal to its M that runs glibc's own
 * cancellation there, which would unwind through glibc's internal cleanup (its cond
 * wait's, which re-takes the mutex) that goshim's unwinder does not run; waits in slices,
 * which wake every waiter of every process-shared cond all the time.
 */
static void wake_pshared_waiter(struct sthread *st)
{
    unsigned me = sched.tls_full ? tls_tcb_tid(tls_self()) : 0;
    for (int i = 0; i < 1000; i++) {
        runtime_lock(&st->lock);
        pthread_cond_t *c = st->pshared_cond;
        bool held = c && me && (unsigned)st->pshared_mutex->__data.__owner == me;
        if (c)
            REAL(pthread_cond_broadcast)(c);
        runtime_unlock(&st->lock);
        if (!c || held) /* held: the target waits in glibc already, and has been woken */
            return;
        if (i < 8) {
            sched_goyield();
        } else {
            struct timespec ms = {0, 1000000};
            nanosleep(&ms, NULL);
        }
    }
}

void shim_pshared_cond_wait(pthread_cond_t *c, pthread_mutex_t *m)
{
    struct sthread *st = goshim_active() ? self_thread() : NULL;
    if (!st)
        return;
    runtime_lock(&st->lock);
    st->pshared_cond = c;
    st->pshared_mutex = m;
    runtime_unlock(&st->lock);
}

GOSHIM_EXPORT int pthread_cancel(pthread_t t)
{
    struct sthread *st;
    if (!goshim_active() || !(st = lookup(t)))
        return REAL(pthread_cancel)(t);
    if (__atomic_load_n(&st->exited, __ATOMIC_ACQUIRE))
        return 0; /* glibc: cancelling a terminated, unjoined thread succeeds */
    __atomic_store_n(&st->cancelreq, 1, __ATOMIC_SEQ_CST);
    if (st == self_thread()) {
        pthread_testcancel();
        return 0;
    }
    /* Wake it if it waits at a cancellation point (any other wait of it
     * just sees a spurious wake-up and waits again). */
    runtime_lock(&st->lock);
    bool pshared = false;
    if (st->gp && st->cancelstate == PTHREAD_CANCEL_ENABLE) {
        gfutex_interrupt(st->gp);
        if (st->canceltype == PTHREAD_CANCEL_ASYNCHRONOUS)
            sched_preempt_g(st->gp); /* running: cancelled where it is preempted */
        pshared = st->pshared_cond != NULL;
    }
    runtime_unlock(&st->lock);
    if (pshared)
        wake_pshared_waiter(st);
    return 0;
}

/* ---- keys, once, yield, attributes, names ------------------------------------ */

GOSHIM_EXPORT int pthread_key_create(pthread_key_t *key, void (*dtor)(void *))
{
    int err = REAL(pthread_key_create)(key, dtor);
    if (err == 0 && *key < NKEYS && dtor) {
        __atomic_store_n(&key_dtor[*key], dtor, __ATOMIC_RELEASE);
        uint32_t top = __atomic_load_n(&key_dtor_top, __ATOMIC_RELAXED);
        while (top < *key + 1 && !__atomic_compare_exchange_n(&key_dtor_top, &top, *key + 1, 0,
                                                              __ATOMIC_RELEASE, __ATOMIC_RELAXED))
            ;
    } else if (err == 0 && *key < NKEYS) {
        __atomic_store_n(&key_dtor[*key], NULL, __ATOMIC_RELEASE);
    }
    return err;
}

GOSHIM_EXPORT int pthread_key_delete(pthread_key_t key)
{
    int err = REAL(pthread_key_delete)(key);
    if (err == 0 && key < NKEYS)
        __atomic_store_n(&key_dtor[key], NULL, __ATOMIC_RELEASE);
    return err;
}

/* glibc's once word: 0 never run, bit 0 running, bit 1 done (upper bits: fork generation). */
enum { ONCE_RUNNING = 1, ONCE_DONE = 2 };

/* The init routine was cancelled or called pthread_exit: let another call run it (glibc too). */
static void once_reset(void *arg)
{
    uint32_t *w = arg;
    __atomic_store_n(w, 0, __ATOMIC_RELEASE);
    gfutex_wake(w, INT_MAX);
}

GOSHIM_EXPORT int pthread_once(pthread_once_t *once, void (*init)(void))
{
    uint32_t *w = (uint32_t *)once;
    if (__atomic_load_n(w, __ATOMIC_ACQUIRE) & ONCE_DONE)
        return 0;
    if (!goshim_active())
        return REAL(pthread_once)(once, init);
    for (;;) {
        uint32_t v = __atomic_load_n(w, __ATOMIC_ACQUIRE);
        if (v & ONCE_DONE)
            return 0;
        if (v == 0) {
            if (!__atomic_compare_exchange_n(w, &v, ONCE_RUNNING, 0, __ATOMIC_ACQUIRE,
                                             __ATOMIC_RELAXED))
                continue;
            pthread_cleanup_push(once_reset, w);
            init();
            pthread_cleanup_pop(0);
            __atomic_store_n(w, ONCE_DONE, __ATOMIC_RELEASE);
            gfutex_wake(w, INT_MAX);
            return 0;
        }
        sync_wait(WAIT_ONCE, w, w, v, -1);
    }
}

GOSHIM_EXPORT int sched_yield(void)
{
    if (!goshim_active())
        return REAL(sched_yield)();
    /* At once when no thread of ours waits; but every 256th such call is the kernel's,
     * which gives the CPU to another process that waits for it (a real-time one,
     * sched_yield/1-1, never ran). */
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
    struct sthread *st = gp->thr;
    if (st && st->magic == STHREAD_MAGIC && st->name[0])
        snprintf(name, nlen, " \"%.15s\"", st->name);
    else if (st && st->is_main)
        snprintf(name, nlen, " (main)");
    struct sthread *target = gp->waitobj;
    if (gp->waitkind == WAIT_JOIN && target && target->magic == STHREAD_MAGIC && target->gp)
        snprintf(obj, olen, "of thread %lu", (unsigned long)target->gp->goid);
    else if (gp->waitkind == WAIT_IO && gp->waitobj)
        snprintf(obj, olen, "on fd %d", (int)(intptr_t)gp->waitobj);
}

/* For dumps and leak reports (sched/dump.c): the G that gp's join or mutex wait needs. */
static struct g *blocker(struct g *gp, int *gone_id)
{
    struct sthread *target = gp->waitobj;
    *gone_id = 0;
    if (gp->waitkind == WAIT_JOIN && target && target->magic == STHREAD_MAGIC)
        return target->gp;
    if (gp->waitkind == WAIT_MUTEX && gp->waitobj)
        return gmutex_holder(gp->waitobj, gone_id);
    return NULL;
}

static void deliver_after_preemption(void)
{
    shim_deliver_signals();
    shim_async_cancel();
}

GOSHIM_EXPORT int pthread_getattr_np(pthread_t t, pthread_attr_t *attr)
{
    struct sthread *st = goshim_on ? lookup(t) : NULL;
    if (!st || st->is_main)
        return REAL(pthread_getattr_np)(glibc_id(t, st), attr);
    int err = pthread_attr_init(attr);
    if (err)
        return err;
    runtime_lock(&st->lock);
    struct g *gp = st->gp;
    runtime_unlock(&st->lock);
    if (gp && gp->stack.lo) {
        pthread_attr_setstack(attr, gp->stack.lo, (size_t)(gp->stack.hi - gp->stack.lo));
        pthread_attr_setguardsize(attr, gp->stack.guard);
    }
    runtime_lock(&st->lock);
    pthread_attr_setdetachstate(attr, st->joinstate == JS_DETACHED ? PTHREAD_CREATE_DETACHED
                                                                   : PTHREAD_CREATE_JOINABLE);
    runtime_unlock(&st->lock);
    return 0;
}

GOSHIM_EXPORT int pthread_setname_np(pthread_t t, const char *name)
{
    struct sthread *st = goshim_on ? lookup(t) : NULL;
    if (!st || st->is_main)
        return REAL(pthread_setname_np)(glibc_id(t, st), name);
    size_t n = strlen(name);
    if (n >= sizeof st->name)
        return ERANGE;
    memcpy(st->name, name, n + 1);
    return 0;
}

GOSHIM_EXPORT int pthread_getname_np(pthread_t t, char *buf, size_t len)
{
    struct sthread *st = goshim_on ? lookup(t) : NULL;
    if (!st || st->is_main)
        return REAL(pthread_getname_np)(glibc_id(t, st), buf, len);
    size_t n = strlen(st->name);
    if (len < n + 1)
        return ERANGE;
    memcpy(buf, st->name, n + 1);
    return 0;
}

/* ---- start-up ------------------------------------------------------------------ */

/* A fork child has one thread, the one that forked: its exit is the last. */
static void thread_fork_child(void)
{
    nthreads = 1;
}

int shim_thread_init(void)
{
    tls_thr_off = (size_t)((char *)&tls_thr - (char *)tls_self());
    sched_tcb_layout_init(sizeof(struct sthread));
    return pthread_atfork(NULL, NULL, thread_fork_child);
}

void shim_thread_hooks(struct sched_hooks *h)
{
    h->exited = exit_hook;
    h->resumed = deliver_after_preemption;
    h->describe = describe;
    h->blocker = blocker;
}

void shim_thread_adopted_main(void)
{
    struct sthread *st = &main_thread;
    st->magic = STHREAD_MAGIC;
    st->is_main = true;
    st->joinstate = JS_JOINABLE;
    st->tcb = tls_self();
    st->cancelstate = PTHREAD_CANCEL_ENABLE;
    st->canceltype = PTHREAD_CANCEL_DEFERRED;
    tls_thr = st;
    st->gp = sched_self();
    st->gp->thr = st;
}

/* ---- calls that would hand the G's (fake) tid to the kernel ------------------- */

/*
 * pthread_kill to another thread, and process-directed signals routed to a
 * thread (below): the signal is marked in the thread's pending set first,
 * and whoever clears the mark delivers it, exactly once. A thread that
 * runs, or sits in a system call, on an M is rung: the signal itself is
 * queued to that M with rt_tgsigqueueinfo and a siginfo of goshim's own
 * (si_code SHIM_SI_BELL, the G in si_value), so a system call it blocks in
 * is interrupted by the kernel as natively. The dispatcher (shim/signal.c)
 * runs the handler if the bell finds that G on that M and the mark still
 * set; a bell that finds another G or the scheduler context there (the G
 * parked, yielded or migrated between the check and the kill, or the M
 * blocked the signal for the next G and only later let it through) is
 * handed to the router, which looks at the thread again
 * (shim_recheck_signal). Its wait is interrupted too, in case it parked
 * meanwhile (to a G that did not park, a spurious wake-up of its next
 * wait). A thread parked, or waiting for a P, has its wait interrupted: it
 * raises the signal on its own OS thread as soon as it runs
 * (shim_deliver_signals: back from a wait, a preemption, a yield, a
 * hand-off), and the interrupted call returns EINTR or restarts as
 * SA_RESTART says. A thread that blocks the signal keeps it marked
 * (delivered when it unblocks it, or taken by sigwait). To itself, a
 * standard signal it blocks waits in its own pending set, not its M's (the
 * M runs other threads next, which must not see it); a real-time one stays
 * the kernel's, which queues it. Real-time signals sent to another thread
 * coalesce while they wait (one mark each).
 *
 * Rejected: a plain tgkill of the M seen running the thread (what this did
 * first). Between the check and the kill the G may park and the M run a
 * thread that blocks the signal: the signal then sat pending on that OS
 * thread, for whatever thread it ran next with the signal open, or for
 * ever (pthread_kill/8-1 hung at one P, 1 run in 3).
 *
 * Process-directed signals (shim/signal.c) come here through
 * shim_route_signal, on the router thread: the main thread if it takes
 * the signal, else the first thread that does; the siginfo goes with the
 * signal (fwd_info) for the handler or sigwaitinfo to see. When none takes
 * it, the router gives it back to the kernel, pending for the process. A
 * thread that exits or blocks a routed signal before it is delivered gives
 * it back to the router, which picks again (the kernel keeps such a signal
 * pending for the process, for any thread).
 */
/* glibc's own two real-time signals (nptl). */
#define SIGCANCEL_NO 32
#define SIGSETXID_NO 33

static inline uint64_t sigbit(int sig)
{
    return 1ULL << (sig - 1);
}

static bool takes(struct sthread *st, struct g *gp, uint64_t bit);

/* Ring gp's M: sig, queued to that OS thread with the bell's siginfo. */
static int ring(struct g *gp, int tid, int sig, bool proc)
{
    siginfo_t si;
    shim_own_info(&si, sig, SHIM_SI_BELL);
    si.si_errno = proc; /* routed: the router's recheck knows it from the bell */
    si.si_value.sival_ptr = gp;
    long rc = rt_syscall6(SYS_rt_tgsigqueueinfo, si.si_pid, tid, sig, (long)&si, 0, 0);
    return rc < 0 ? (int)-rc : 0;
}

/* Signal st's thread now (st->lock held): 0; ESRCH when it is exiting (it takes no more). */
static int signal_thread_locked(struct sthread *st, int sig, bool proc)
{
    struct g *gp = st->gp;
    if (!gp || st->exiting)
        return ESRCH;
    uint64_t bit = sigbit(sig);
    if (proc)
        __atomic_or_fetch(&st->procpend, bit, __ATOMIC_SEQ_CST);
    __atomic_or_fetch(&st->sigpending, bit, __ATOMIC_SEQ_CST); /* before the status is read */
    if (!takes(st, gp, bit) || gp == sched_self())
        return 0; /* blocked: it waits for an unblock or a sigwait; or the caller's own,
                     which it delivers once it has let go of the locks */
    uint32_t status = sched_gstatus(gp);
    int tid = sched_gtid(gp);
    if (tid > 0 && (status == Gsyscall || status == Grunning))
        ring(gp, tid, sig, proc); /* an error (the M is gone): the interrupt below */
    gfutex_interrupt(gp);
    return 0;
}

/* Take bits out of st's pending set: the ones this call cleared (they are its to deliver). */
static uint64_t take_marks(struct sthread *st, uint64_t bits)
{
    uint64_t got = __atomic_fetch_and(&st->sigpending, ~bits, __ATOMIC_SEQ_CST) & bits;
    if (got)
        __atomic_and_fetch(&st->procpend, ~got, __ATOMIC_SEQ_CST);
    return got;
}

static void keep_info(struct sthread *st, int sig, const siginfo_t *info);

/* sig, which the calling thread blocks, waits in its own pending set, with the siginfo
 * glibc's raise (SI_USER) or pthread_kill (SI_TKILL) would give it. */
static void pend_self(struct sthread *st, int sig, int code)
{
    siginfo_t si;
    shim_own_info(&si, sig, code);
    runtime_lock(&thr_lock);
    keep_info(st, sig, &si);
    runtime_unlock(&thr_lock);
    __atomic_or_fetch(&st->sigpending, sigbit(sig), __ATOMIC_SEQ_CST);
}

/* Kept in the calling thread's own pending set (true) if it blocks sig, a standard signal
 * (real-time ones queue: those stay the kernel's, on this M). */
static bool kept_for_self(struct sthread *st, int sig, int code)
{
    if (sig <= 0 || sig >= SIGRTMIN || !((sched_sigmask() | st->hidden_mask) & sigbit(sig)))
        return false;
    pend_self(st, sig, code);
    return true;
}

GOSHIM_EXPORT int pthread_kill(pthread_t t, int sig)
{
    struct sthread *st = goshim_on ? lookup(t) : NULL;
    if (!st || !goshim_active())
        return REAL(pthread_kill)(glibc_id(t, st), sig); /* glibc signals itself by gettid */
    if (sig < 0 || sig >= 65)
        return EINVAL;
    if (st == self_thread())
        return kept_for_self(st, sig, SI_TKILL) ? 0 : REAL(pthread_kill)(glibc_id(t, st), sig);
    /* A thread that has exited but is not joined yet: glibc >= 2.34 returns
     * 0 and sends nothing (bug 19193; ESRCH only for binaries linked
     * against the GLIBC_2.0 version, which goshim cannot tell apart). */
    if (__atomic_load_n(&st->exited, __ATOMIC_ACQUIRE) || sig == 0)
        return 0;
    runtime_lock(&st->lock);
    signal_thread_locked(st, sig, false); /* ESRCH: exiting, as one that has exited */
    runtime_unlock(&st->lock);
    return 0;
}

/* pthread_sigqueue: as pthread_kill, with the siginfo (SI_QUEUE, the value) kept for the
 * target's handler or sigwaitinfo (glibc's would hand the fake tid to the kernel: ESRCH). */
GOSHIM_EXPORT int pthread_sigqueue(pthread_t t, int sig, const union sigval value)
{
    struct sthread *st = goshim_on ? lookup(t) : NULL;
    if (!st || !goshim_active())
        return REAL(pthread_sigqueue)(glibc_id(t, st), sig, value);
    if (sig < 0 || sig >= 65 || sig == SIGCANCEL_NO || sig == SIGSETXID_NO)
        return EINVAL;
    if (__atomic_load_n(&st->exited, __ATOMIC_ACQUIRE))
        return ESRCH;
    if (sig == 0)
        return 0;
    siginfo_t si;
    shim_own_info(&si, sig, SI_QUEUE);
    si.si_value = value;
    runtime_lock(&thr_lock);
    keep_info(st, sig, &si);
    runtime_unlock(&thr_lock);
    if (st == self_thread()) {
        __atomic_or_fetch(&st->sigpending, sigbit(sig), __ATOMIC_SEQ_CST);
        shim_deliver_signals(); /* unless it blocks sig: then it waits, as natively */
        return 0;
    }
    runtime_lock(&st->lock);
    int err = signal_thread_locked(st, sig, false);
    runtime_unlock(&st->lock);
    return err;
}

/* A signal of goshim's own kind (the preemption signal's number) sent by the program that
 * no thread takes now: pending for the main thread (the kernel would keep it for the
 * process; goshim cannot leave it there, its OS threads never block it). */
void shim_pend_on_main(int sig, const siginfo_t *info)
{
    runtime_lock(&thr_lock);
    if (main_thread.gp && !main_thread.exiting) {
        keep_info(&main_thread, sig, info);
        runtime_lock(&main_thread.lock);
        signal_thread_locked(&main_thread, sig, true);
        runtime_unlock(&main_thread.lock);
    }
    runtime_unlock(&thr_lock);
}

GOSHIM_EXPORT int raise(int sig)
{
    struct sthread *st = goshim_active() ? self_thread() : NULL;
    if (!st || sig <= 0 || sig >= 65)
        return REAL(raise)(sig);
    return kept_for_self(st, sig, SI_USER) ? 0 : REAL(raise)(sig);
}

/* Keep info as what st's thread sees of sig (thr_lock held, st alive). */
static void keep_info(struct sthread *st, int sig, const siginfo_t *info)
{
    if (!st->fwd_info)
        st->fwd_info = calloc(64, sizeof *st->fwd_info);
    if (!st->fwd_info)
        return; /* the handler sees the forwarding tgkill's siginfo instead */
    st->fwd_info[sig - 1] = *info;
    __atomic_or_fetch(&st->fwd, sigbit(sig), __ATOMIC_SEQ_CST);
}

/* Does gp (st's thread) take sig now: it does not block it or waits for it. */
static bool takes(struct sthread *st, struct g *gp, uint64_t bit)
{
    return !((sched_gsigmask(gp) | __atomic_load_n(&st->hidden_mask, __ATOMIC_RELAXED)) & bit) ||
           (__atomic_load_n(&st->sigwaiting, __ATOMIC_SEQ_CST) & bit);
}

/* ... and is not on its way out. */
static bool takes_routed(struct sthread *st, struct g *gp, uint64_t bit)
{
    return !__atomic_load_n(&st->exiting, __ATOMIC_SEQ_CST) && takes(st, gp, bit);
}

bool shim_main_takes(int sig, struct g *self)
{
    struct g *mg = __atomic_load_n(&main_thread.gp, __ATOMIC_ACQUIRE);
    return mg && mg != self && takes_routed(&main_thread, mg, sigbit(sig));
}

/* gp's live thread record (thr_lock held), or NULL. */
static struct sthread *record_of(struct g *gp)
{
    struct sthread *st = __atomic_load_n((struct sthread **)&gp->thr, __ATOMIC_ACQUIRE);
    if (st && sched_gstatus(gp) != Gdead && st->magic == STHREAD_MAGIC && st->gp == gp)
        return st;
    return NULL;
}

/* Route sig (thr_lock held). With try, every other lock is only tried: -1 if one was
 * busy (nothing done); else whether a thread took it. */
static int route_locked(int sig, const siginfo_t *info, bool try)
{
    uint64_t bit = sigbit(sig);
    /* A thread picked may start its exit before it is signalled: then the next one. */
    for (int round = 0; round < 4; round++) {
        struct sthread *target = NULL;
        struct g *mg = __atomic_load_n(&main_thread.gp, __ATOMIC_ACQUIRE);
        if (mg && takes_routed(&main_thread, mg, bit)) {
            target = &main_thread;
        } else {
            if (try && !runtime_trylock(&sched.allglock))
                return -1;
            if (!try)
                runtime_lock(&sched.allglock);
            for (struct g *gp = sched.allg; gp && !target; gp = gp->alllink) {
                struct sthread *st = record_of(gp);
                if (st && takes_routed(st, gp, bit))
                    target = st;
            }
            runtime_unlock(&sched.allglock);
        }
        if (!target)
            return 0;
        if (try && !target->fwd_info)
            return -1; /* keep_info would allocate */
        if (try && !runtime_trylock(&target->lock))
            return -1;
        keep_info(target, sig, info);
        if (!try)
            runtime_lock(&target->lock);
        bool done = signal_thread_locked(target, sig, true) == 0;
        runtime_unlock(&target->lock);
        if (done)
            return 1;
    }
    return 0;
}

bool shim_route_signal(int sig, const siginfo_t *info)
{
    runtime_lock(&thr_lock);
    int r = route_locked(sig, info, false);
    runtime_unlock(&thr_lock);
    return r == 1;
}

int shim_route_signal_now(int sig, const siginfo_t *info)
{
    if (m_in_runtime() || !runtime_trylock(&thr_lock))
        return -1;
    int r = route_locked(sig, info, true);
    runtime_unlock(&thr_lock);
    return r;
}

void shim_recheck_signal(int sig, const siginfo_t *bell)
{
    struct g *gp = bell->si_value.sival_ptr;
    if (!gp)
        return;
    runtime_lock(&thr_lock);
    struct sthread *st = record_of(gp);
    if (st) {
        runtime_lock(&st->lock);
        /* Still marked: not delivered yet, nor given back (exit, block). */
        if (__atomic_load_n(&st->sigpending, __ATOMIC_SEQ_CST) & sigbit(sig))
            signal_thread_locked(st, sig, bell->si_errno != 0);
        runtime_unlock(&st->lock);
    }
    runtime_unlock(&thr_lock);
}

/* The siginfo st's thread sees for sig, which it has taken out of its pending set: the one
 * it was routed with, else pthread_kill's. */
static void taken_info(int sig, siginfo_t *out)
{
    if (shim_forwarded_info(sig, out))
        return;
    memset(out, 0, sizeof *out);
    out->si_signo = sig;
    out->si_code = SI_TKILL;
    out->si_pid = getpid();
    out->si_uid = getuid();
}

bool shim_bell_take(int sig, const siginfo_t *bell, struct g *cur, siginfo_t *out)
{
    out->si_signo = 0;
    struct sthread *st = cur ? cur->thr : NULL;
    if (!st || st->magic != STHREAD_MAGIC)
        return bell->si_value.sival_ptr == cur;
    /* Whoever it was for: the kernel merges a signal sent to an OS thread into one of the
     * same number pending there, so this may also be cur's own bell or raise. */
    if (take_marks(st, sigbit(sig)) ||
        (__atomic_fetch_and(&st->owed, ~sigbit(sig), __ATOMIC_SEQ_CST) & sigbit(sig)))
        taken_info(sig, out);
    return bell->si_value.sival_ptr == cur;
}

/*
 * Routed signals st's thread has not taken yet, among bits, go back to the
 * router (its exit: all of them; a mask it installs: the ones it blocks).
 * On the thread itself.
 */
static void give_back(struct sthread *st, uint64_t bits)
{
    runtime_lock(&st->lock);
    uint64_t back = take_marks(st, bits & __atomic_load_n(&st->procpend, __ATOMIC_SEQ_CST));
    runtime_unlock(&st->lock);
    for (int sig = 1; back && sig <= 64; sig++) {
        if (!(back & sigbit(sig)))
            continue;
        back &= ~sigbit(sig);
        siginfo_t si;
        if (!shim_forwarded_info(sig, &si)) {
            shim_own_info(&si, sig, SI_USER);
        }
        shim_signal_repost(sig, &si);
    }
}

static void give_back_process_signals(struct sthread *st, bool exiting)
{
    if (exiting) {
        runtime_lock(&st->lock);
        __atomic_store_n(&st->exiting, true, __ATOMIC_SEQ_CST);
        runtime_unlock(&st->lock);
    }
    give_back(st, ~0ULL);
}

void shim_give_back_blocked(uint64_t blocked)
{
    struct sthread *st = goshim_active() ? self_thread() : NULL;
    if (st && (__atomic_load_n(&st->procpend, __ATOMIC_SEQ_CST) & blocked))
        give_back(st, blocked);
}

bool shim_forwarded_info(int sig, siginfo_t *out)
{
    struct sthread *st = goshim_on ? self_thread() : NULL;
    if (!st || st->magic != STHREAD_MAGIC || !st->fwd_info)
        return false;
    if (!(__atomic_fetch_and(&st->fwd, ~sigbit(sig), __ATOMIC_SEQ_CST) & sigbit(sig)))
        return false;
    *out = st->fwd_info[sig - 1];
    return true;
}

void shim_sigwaiting(uint64_t set)
{
    struct sthread *st = goshim_active() ? self_thread() : NULL;
    if (st)
        __atomic_store_n(&st->sigwaiting, set, __ATOMIC_SEQ_CST);
}

void shim_handler_ran(void)
{
    struct sthread *st = goshim_on ? self_thread() : NULL;
    if (st && st->magic == STHREAD_MAGIC)
        st->handlers_ran++;
}

uint32_t shim_handlers_ran(void)
{
    struct sthread *st = goshim_active() ? self_thread() : NULL;
    return st ? st->handlers_ran : 0;
}

uint64_t shim_hidden_mask(void)
{
    struct sthread *st = goshim_active() ? self_thread() : NULL;
    return st ? st->hidden_mask : 0;
}

void shim_set_hidden_mask(uint64_t set)
{
    struct sthread *st = goshim_active() ? self_thread() : NULL;
    if (st)
        __atomic_store_n(&st->hidden_mask, set, __ATOMIC_RELAXED); /* the router reads it */
}

int shim_deliver_signals(void)
{
    struct sthread *st = goshim_active() ? self_thread() : NULL;
    if (!st)
        return 0;
    uint64_t mask = sched_sigmask() | st->hidden_mask;
    if (!__atomic_load_n(&st->sigpending, __ATOMIC_RELAXED))
        return 0;
    uint64_t set = __atomic_load_n(&st->sigpending, __ATOMIC_RELAXED) & ~mask;
    if (!set)
        return 0; /* all blocked: they wait */
    set = take_marks(st, set);
    __atomic_or_fetch(&st->owed, set, __ATOMIC_SEQ_CST);
    int res = 0;
    for (int sig = 1; sig <= 64; sig++) {
        if (!(set & sigbit(sig)))
            continue;
        struct sigaction sa;
        if (sigaction(sig, NULL, &sa) == 0 && sa.sa_handler != SIG_IGN && sa.sa_handler != SIG_DFL)
            res = !(sa.sa_flags & SA_RESTART) ? 2 : res > 1 ? res : 1;
        /* The kernel runs the handler before this returns, on this G: a bell to itself
         * (see shim_bell_take; a plain tgkill merged into a bell pending here, and the
         * bell then found nothing to deliver). */
        ring(sched_self(), sched_mtid(), sig, false);
    }
    return res;
}

uint64_t shim_pending_signals(void)
{
    struct sthread *st = goshim_active() ? self_thread() : NULL;
    return st ? __atomic_load_n(&st->sigpending, __ATOMIC_RELAXED) : 0;
}

int shim_take_signal(uint64_t want, siginfo_t *info)
{
    struct sthread *st = goshim_active() ? self_thread() : NULL;
    if (!st)
        return 0;
    uint64_t pend = __atomic_load_n(&st->sigpending, __ATOMIC_RELAXED) & want;
    while (pend) {
        int sig = __builtin_ctzll(pend) + 1;
        uint64_t bit = sigbit(sig);
        if (take_marks(st, bit)) {
            if (info)
                taken_info(sig, info);
            return sig;
        }
        pend &= ~bit; /* taken meanwhile by its own delivery */
    }
    return 0;
}

/*
 * exec keeps the signals pending for the calling thread, and its mask: the
 * ones goshim keeps for it (its own pending set) are raised
 * on its OS thread, blocked, and the mask it asked for is installed whole
 * (the preemption signal too). If exec fails they are taken back.
 */
uint64_t shim_exec_prepare(void)
{
    struct sthread *st = goshim_active() ? self_thread() : NULL;
    if (!st)
        return 0;
    uint64_t mask = sched_sigmask() | st->hidden_mask;
    uint64_t raised = __atomic_exchange_n(&st->sigpending, 0, __ATOMIC_SEQ_CST);
    uint64_t unblocked = raised & ~mask; /* delivered now, before the exec, as natively */
    rt_syscall6(SYS_rt_sigprocmask, SIG_SETMASK, (long)&mask, 0, 8, 0, 0);
    for (int sig = 1; sig <= 64; sig++)
        if (raised & sigbit(sig))
            rt_syscall(SYS_tgkill, getpid(), sched_mtid(), sig);
    return raised & ~unblocked;
}

void shim_exec_failed(uint64_t raised)
{
    struct sthread *st = goshim_active() ? self_thread() : NULL;
    if (!st)
        return;
    struct timespec zero = {0, 0};
    for (int sig = 1; sig <= 64; sig++) {
        if (!(raised & sigbit(sig)))
            continue;
        uint64_t one = sigbit(sig);
        if (rt_syscall6(SYS_rt_sigtimedwait, (long)&one, 0, (long)&zero, 8, 0, 0) == sig)
            __atomic_or_fetch(&st->sigpending, one, __ATOMIC_SEQ_CST);
    }
    uint64_t mask = sched_sigmask();
    rt_syscall6(SYS_rt_sigprocmask, SIG_SETMASK, (long)&mask, 0, 8, 0, 0);
}

GOSHIM_EXPORT int pthread_getaffinity_np(pthread_t t, size_t size, cpu_set_t *set)
{
    struct sthread *st = goshim_on ? lookup(t) : NULL;
    if (!st || st->is_main)
        return REAL(pthread_getaffinity_np)(glibc_id(t, st), size, set);
    runtime_lock(&st->lock);
    bool have = st->affinity != NULL;
    cpu_set_t mine;
    if (have)
        mine = *st->affinity;
    runtime_unlock(&st->lock);
    if (!have)
        return sched_getaffinity(0, size, set) == 0 ? 0 : errno;
    if (size < sizeof(cpu_set_t)) {
        memset(set, 0, size);
        memcpy(set, &mine, size);
        return 0;
    }
    memset(set, 0, size);
    memcpy(set, &mine, sizeof mine);
    return 0;
}

GOSHIM_EXPORT int pthread_setaffinity_np(pthread_t t, size_t size, const cpu_set_t *set)
{
    struct sthread *st = goshim_on ? lookup(t) : NULL;
    if (!st || st->is_main)
        return REAL(pthread_setaffinity_np)(glibc_id(t, st), size, set);
    cpu_set_t allowed, want;
    CPU_ZERO(&want);
    memcpy(&want, set, size < sizeof want ? size : sizeof want);
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
        return errno;
    CPU_AND(&allowed, &allowed, &want);
    if (CPU_COUNT(&allowed) == 0)
        return EINVAL; /* as the kernel: no usable CPU in the mask */
    cpu_set_t *fresh = malloc(sizeof *fresh);
    runtime_lock(&st->lock);
    if (!st->affinity) {
        st->affinity = fresh;
        fresh = NULL;
    }
    if (st->affinity)
        *st->affinity = want;
    runtime_unlock(&st->lock);
    if (fresh || !st->affinity) {
        free(fresh);
        if (!st->affinity)
            return ENOMEM;
    }
    return 0;
}

GOSHIM_EXPORT int pthread_getschedparam(pthread_t t, int *policy, struct sched_param *param)
{
    struct sthread *st = goshim_on ? lookup(t) : NULL;
    if (!st || st->is_main)
        return REAL(pthread_getschedparam)(glibc_id(t, st), policy, param);
    runtime_lock(&st->lock);
    *policy = st->policy;
    *param = st->param;
    runtime_unlock(&st->lock);
    return 0;
}

static int check_sched(int policy, int prio)
{
    int lo = sched_get_priority_min(policy), hi = sched_get_priority_max(policy);
    if (lo < 0 || hi < 0 || prio < lo || prio > hi)
        return EINVAL;
    return 0;
}

GOSHIM_EXPORT int pthread_setschedparam(pthread_t t, int policy, const struct sched_param *param)
{
    struct sthread *st = goshim_on ? lookup(t) : NULL;
    if (!st || st->is_main)
        return REAL(pthread_setschedparam)(glibc_id(t, st), policy, param);
    int err = check_sched(policy, param->sched_priority);
    if (err)
        return err;
    runtime_lock(&st->lock);
    st->policy = policy;
    st->param = *param;
    runtime_unlock(&st->lock);
    return 0;
}

GOSHIM_EXPORT int pthread_setschedprio(pthread_t t, int prio)
{
    struct sthread *st = goshim_on ? lookup(t) : NULL;
    if (!st || st->is_main)
        return REAL(pthread_setschedprio)(glibc_id(t, st), prio);
    runtime_lock(&st->lock);
    int err = check_sched(st->policy, prio);
    if (!err)
        st->param.sched_priority = prio;
    runtime_unlock(&st->lock);
    return err;
}
