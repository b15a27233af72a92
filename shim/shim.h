/*
 * What every interposer needs: the export marker, the real functions, and
 * goshim_active(), the one test that decides between goshim and glibc.
 *
 * An interposer passes straight through to REAL(name) unless the runtime
 * is running and the caller is a G: before start-up, inside the loader or
 * libc start-up, with GOSHIM_DISABLE=1, and on threads goshim does not
 * manage (its own monitor thread, a foreign thread) glibc does the work.
 * Objects that must stay glibc's (process-shared, robust, PI) also go to
 * REAL, always — whoever calls.
 */
#ifndef GOSHIM_SHIM_H
#define GOSHIM_SHIM_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#include "shim/export.h"
#include "shim/real.h"
#include "sched/api.h"

/* glibc reserves these two real-time signals for itself (nptl). */
#define SIGCANCEL_NO 32
#define SIGSETXID_NO 33

/* Set by the constructor (preload/init.c) once the runtime runs and the main
 * thread is the main G; defined in shim.c. */
extern bool goshim_started;
/* Set in the TCB of a thread from its vfork() to the return in the parent: the
 * code that runs on that TCB meanwhile is the vfork child's, on the parent's
 * memory, and must leave the runtime alone (shim/vfork.c). Per G in full TLS
 * mode, per M otherwise; either way nothing else runs on it meanwhile. */
extern __thread bool goshim_vforked __attribute__((tls_model("initial-exec")));
/* The runtime is on for the caller: started, and not in a vfork child. */
#define goshim_on (__builtin_expect(goshim_started, 1) && !goshim_vforked)

/* True when the caller is a G of a running runtime; waits: the call counts as one that
 * may wait for another thread or the outside world (below). TLS read, no call. */
static inline bool goshim_active_as(bool waits)
{
    /* Not counted while the runtime is off: a process of one thread (most of those goshim
     * is preloaded into) would write its TLS page at every call, a page its fork copies
     * while the child lives. */
    if (!__builtin_expect(goshim_on, 1))
        return false;
    if (waits)
        sched_note_call(); /* it entered goshim: not a spinner (preempt.c) */
    if (sched_self() == NULL)
        return false;
    sched_gate();
    return true;
}

static inline bool goshim_active(void)
{
    return goshim_active_as(true);
}

/*
 * The gate of file work: opening, reading and writing files, which computes in the kernel
 * (the page cache, a path's walk) and waits for nobody: the call does not make its G a
 * call-maker. A G preempted while it computes and makes only such calls is a spinner, as
 * one that makes none: the Ms' slice timers rotate it at the kernel's tick, as EEVDF
 * rotates threads that compute, where sysmon cut a call-maker's slice at half the base one
 * for the next (rg -j4 at two Ps: 1.11x native's time with, 1.04x without; redis's I/O
 * threads and event loop, whose sockets' calls count, need the half slice).
 */
static inline bool goshim_active_file(void)
{
    return goshim_active_as(false);
}

/*
 * goshim_active's test for the shim's own helpers, which run inside a wrapper, past its entry
 * (signal delivery, cancellation): no gate. A yield taken there delivered the G's pending
 * signals in its resume hook, in the middle of the wrapper that was about to deliver them
 * itself to learn whether a handler ran: after a park cut short by SIGALRM, sem_wait saw no
 * handler run and parked again, its EINTR lost (prog_procsig sem at P=1, 1 run in 10; 19 in
 * 20 under GOSHIM_CHAOS).
 */
static inline bool shim_in_g(void)
{
    return __builtin_expect(goshim_on, 1) && sched_self() != NULL;
}

/*
 * A lock wrapper in two parts. While the runtime is off (a process of one thread, a vfork
 * child) the exported function hands the program's call to glibc at once, a tail call
 * with no frame built and nothing checked or counted first: node's start, one thread
 * until V8's, makes some 800,000 rwlock lock/unlock pairs through OpenSSL, each of which
 * cost 3-4 ns more than glibc's when it was tried first and then made (1.3 now).
 * Otherwise it tail-calls the
 * body that follows the macro, name##_on (same parameters), kept out of line for that.
 */
#define SYNC_WRAPPER(name, params, args)                                                           \
    static int name##_on params __attribute__((noinline));                                         \
    GOSHIM_EXPORT int name params                                                                  \
    {                                                                                              \
        if (!__builtin_expect(goshim_on, 1))                                                       \
            return REAL(name) args;                                                                \
        return name##_on args;                                                                     \
    }                                                                                              \
    static int name##_on params

/* The synchronisation wrappers' test (mutex, cond, rwlock): goshim runs,
 * whoever calls; their fast paths need no G. */
static inline bool sync_on(void)
{
    if (!__builtin_expect(goshim_on, 1))
        return false;
    sched_note_call();
    return true;
}

/* shim/sigdeliver.h */
int shim_deliver_signals(void);
/* shim/tid.c: syscall() of a call that gettid's ids are for (gettid, tgkill, tkill,
 * sched_{set,get}affinity, sched_{set,get}scheduler, sched_{set,get}param,
 * {set,get}priority): true, with the kernel's answer (a result or -errno) in *ret; false
 * for any other nr. */
bool shim_tid_syscall(long nr, long a, long b, long c, long *ret);
/* kill and sigqueue given a thread's tid signal its process, as the kernel's: the pid for
 * the tid of a live thread of the program, else pid (shim/tid.c). */
pid_t shim_kill_pid(pid_t pid);
/* shim/sigroute.c: start the router of process-directed signals (after adoption); and
 * register its fork handler alone (shim_signal_init does, once), for a start deferred past
 * the constructor (sched_atfork_init says why early). */
int shim_signal_init(void);
int shim_signal_atfork(void);
/* shim/signal.c: take over the handlers installed before the runtime started (a deferred
 * start: the program ran natively until then), as if the program installed them now. */
void shim_signal_adopt_handlers(void);
/* shim/sigmask.c: the main thread's mask as it was before the runtime started, set again
 * through goshim: the preemption signals it blocks become blocked in its view only (a main
 * thread that blocked SIGURG, or inherited it blocked across exec, kept M0 from ever being
 * preempted). */
void shim_adopt_mask(void);
/* A start of the runtime deferred to the program's first thread (preload/init.c sets it
 * while it waits): it returns true once the runtime runs on the calling main thread, and
 * stays set if called on another. shim_start_deferred, in the pthread_create wrapper, calls
 * it when the runtime is not on. */
extern bool (*goshim_start_deferred)(void);
bool shim_start_deferred(void);
/* shim/signal.c: a thread is about to block these signals: the ones at their default action
 * that no thread blocked before are routed from now on (before the mask is installed). */
void shim_route_defaults(uint64_t blocked);
/* shim/signal.c: whether a handler of the program's may still wake a parked thread (the
 * deadlock detector's hook). */
bool shim_signal_may_wake(void);
void shim_async_cancel(void);

/*
 * A park of the calling G and what comes with it (shim/wait.c): what it
 * waits for (kind, obj) is noted for deadlock reports and dumps; park(arg)
 * parks it, returning gfutex_wait's codes (0 woken, EAGAIN the word had
 * moved, ETIMEDOUT, EINTR a signal or cancellation for the thread, EBADF
 * a netpoll descriptor closed); interrupted, a pending cancellation is acted
 * on if flags has SHIM_WAIT_CANCEL (a cancellation point); then the handlers
 * of the signals sent to the thread run here, on the thread, as natively
 * (also those sent as it woke). The result says how the park ended and,
 * when interrupted, which handlers ran; the caller re-checks what it waits
 * for, retries, or fails with EINTR as its call does natively.
 */
enum shim_wait {
    SHIM_WAIT_READY,       /* woken: check again */
    SHIM_WAIT_CHANGED,     /* the word had moved on before it parked */
    SHIM_WAIT_TIMEDOUT,    /* the deadline passed */
    SHIM_WAIT_CLOSED,      /* the fd waited on was closed meanwhile */
    SHIM_WAIT_SPURIOUS,    /* interrupted, and no handler ran: check again */
    SHIM_WAIT_RESTARTED,   /* interrupted, and every handler that ran has SA_RESTART */
    SHIM_WAIT_INTERRUPTED, /* interrupted, and a handler without SA_RESTART ran */
};
enum { SHIM_WAIT_CANCEL = 1 };
enum shim_wait shim_wait(int kind, const void *obj, int (*park)(void *), void *arg, unsigned flags);
/* shim_wait parked on a gfutex word: while *addr == val, until deadline
 * (monotonic ns, < 0 none). */
enum shim_wait shim_wait_word(int kind, const void *obj, uint32_t *addr, uint32_t val,
                              int64_t deadline, unsigned flags);

/* The hand-off: call made as a system call that may block, the P left for
 * sysmon to retake (entry: entersyscall), or handed off at once
 * (entersyscallblock, for calls that block as a rule); when entry declines
 * (no G, the P already handed off) the call is simply made. */
#define HANDOFF(call) HANDOFF_WITH(entersyscall, call)
/* A wait of glibc's own (a process-shared, robust or priority mutex, cond, rwlock, barrier
 * or semaphore): it blocks its M in the kernel, so on a G it is made between entersyscall
 * and exitsyscall (entry: entersyscallblock for a wait that blocks as a rule), and the P
 * goes on without it rather than when sysmon finds the thread asleep. */
#define GLIBC_WAIT_WITH(entry, call) (goshim_active() ? HANDOFF_WITH(entry, call) : (call))
#define GLIBC_WAIT(call)             GLIBC_WAIT_WITH(entersyscall, call)
/* A lock of glibc's own kinds: tried first, then waited for (GLIBC_WAIT): the hand-off's
 * bookkeeping would make an uncontended lock cost several times glibc's. Not for the timed
 * kinds: glibc checks their arguments (the time, the clock) before it takes a free lock. */
#define GLIBC_LOCK(try, lock)                                                                      \
    ({                                                                                             \
        int lr_ = (try);                                                                           \
        lr_ == EBUSY ? GLIBC_WAIT(lock) : lr_;                                                     \
    })
#define HANDOFF_WITH(entry, call)                                                                  \
    ({                                                                                             \
        __typeof__(call) r_;                                                                       \
        if (entry()) {                                                                             \
            r_ = (call);                                                                           \
            exitsyscall();                                                                         \
        } else {                                                                                   \
            r_ = (call);                                                                           \
        }                                                                                          \
        r_;                                                                                        \
    })

/* A blocking call of the only thread (sched_lone): the kernel's, as glibc makes it, one
 * system call with nothing to park for; a cancellation point first, and the signals held
 * for the thread handled, as before any wait. Needs shim/cancel.h. */
#define LONE_CALL(call)                                                                            \
    ({                                                                                             \
        shim_testcancel();                                                                         \
        shim_deliver_signals();                                                                    \
        HANDOFF(call);                                                                             \
    })

#endif
