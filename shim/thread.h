/*
 * A thread's record (struct sthread): the shim's per-pthread state, and the
 * functions of the files that make, find and end records.
 *
 * A pthread is a G plus its record. The record lives in its thread's stack
 * block when the scheduler made room for it there (sched_g_record), else
 * it is calloc'ed; the main thread's is static (sthread_main). thread.c
 * makes records, finds them from a pthread_t and ends them; the other
 * concerns keep their own fields in it: unwind.c the exit buffers and the
 * C cleanup list, cancel.c the cancel state, sigdeliver.c and sigmask.c
 * the signals, key.c the key values of errno TLS mode, tid.c the id and
 * the kernel settings. st->lock guards the fields marked "lock";
 * sthread_lock is taken by whoever looks at other threads' records from
 * outside them (the signal router) and around a record's end, so a record
 * is never freed under the router.
 *
 * The other headers of the thread layer: shim/cancel.h (cancellation
 * points) and shim/sigdeliver.h (signals to threads).
 */
#ifndef GOSHIM_SHIM_THREAD_H
#define GOSHIM_SHIM_THREAD_H

#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <unwind.h>

#include "sched/api.h"

struct g;

/* Start-up (preload/init.c). Before sched_adopt_main: install the exit hook, find TLS
 * offsets. */
int shim_thread_init(void);
/* Its fork handler alone (shim_thread_init registers it, once): for a deferred start. */
int shim_thread_atfork(void);
/* The runtime hooks the thread layer provides (api.h: struct sched_hooks). */
void shim_thread_hooks(struct sched_hooks *h);
/* After sched_adopt_main: give the main G its thread record. */
void shim_thread_adopted_main(void);

#define STHREAD_MAGIC 0x67746872u /* "gthr" */

enum { JS_JOINABLE, JS_DETACHED, JS_JOINING };
/* st->ksleep: no sleep in the kernel; one under way; one cut short (pthread_cancel). */
enum { KSLEEP_NONE, KSLEEP_ASLEEP, KSLEEP_WOKEN };

/* What a thread keeps of the signals forwarded to it: each one's siginfo, and the
 * expirations of a POSIX timer folded into the one that waits (added to its si_overrun
 * when it is taken; atomic). */
/* Process-directed signals' siginfo kept for a thread (shim/sigdeliver.c: keep_info). Per
 * signal: the siginfo; its state, KEPT_WAITING while it waits to be read, and the timer's
 * expirations since, merged into it as overruns; and a count, odd while the siginfo is
 * being written, which a reader checks (it reads without the writers' lock). Atomic. */
struct sig_kept {
    siginfo_t info[64];
    uint32_t state[64];
    uint32_t seq[64];
};
#define KEPT_WAITING 0x80000000u

struct sthread {
    uint32_t magic;
    uint32_t exited; /* futex word: 1 once the exit hook ran */
    bool inblock;    /* lives in its thread's stack block (sched_g_record), not malloc'ed */
    struct runtime_lock lock;
    int joinstate; /* JS_*; lock */
    bool is_main;
    struct g *gp; /* its G while it runs; NULL after exit */
    void *tcb;    /* the pthread_t (full mode) */
    /* Its stack as it ended (lock), which a joinable thread keeps until joined:
     * pthread_getattr_np reports it then, as glibc does. */
    void *exit_stack;
    size_t exit_stacksize, exit_guard;
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
    uint32_t ksleep;    /* futex word of a sleep in the kernel (shim/sleep.c): KSLEEP_* */
    /* The process-shared cond it waits on in glibc (shim_pshared_cond_wait), or NULL; lock. */
    pthread_cond_t *pshared_cond;
    pthread_mutex_t *pshared_mutex; /* the mutex of that wait; lock */
    /* Signals sent to it and not yet delivered (bit sig-1): whoever clears a bit delivers
     * it (see "pthread_kill" in sigdeliver.c); atomic. procpend: which of them were sent to the
     * process and routed here (they go back to the process if it exits or blocks them);
     * atomic. exiting: it takes no more (st->lock). */
    uint64_t sigpending;
    uint64_t procpend;
    bool exiting;
    /* Taken out of sigpending and rung on its own OS thread (shim_deliver_signals), not
     * yet handled: the first bell of the signal that arrives there runs the handler (the
     * kernel merges a bell into one of the same signal pending on that thread); atomic. */
    uint64_t owed;
    /* Process-directed signals forwarded to it (shim/sigroute.c): their siginfo, waiting in
     * fwd_info (allocated by the first forward, under sthread_lock); the signals it waits
     * for in sigwait and friends, atomic; and the ones of never_blocked() that the program
     * asked to block (reported back, never installed). */
    struct sig_kept *fwd_info;
    uint64_t sigwaiting;
    uint64_t hidden_mask;
    uint32_t handlers_ran; /* handlers of the program run on it (shim_handler_ran); owner */
    uint32_t cutting_ran;  /* ... of which without SA_RESTART; owner */
    uint32_t call_seen;    /* handlers_ran as a blocking call decided to wait (sigdeliver.c) */
    char name[16];
    void ***keyblk; /* errno mode: key values, 32 blocks of 32; both levels lazily (key.c) */
    pid_t tid;      /* errno mode: its tid (full mode: its TCB's), shim/tid.c */
    /* Per-thread kernel settings a G cannot have (its tid is not the
     * kernel's): accepted, kept and reported back, not enforced (shim/tid.c).
     * All under lock. affinity: NULL until set (then freed with the record);
     * policy: with SCHED_RESET_ON_FORK if asked; nice: valid if nice_set,
     * else the kernel's for the asking OS thread. */
    cpu_set_t *affinity;
    int policy;
    struct sched_param param;
    int nice;
    bool nice_set;
};

extern struct runtime_lock sthread_lock;
extern struct sthread sthread_main; /* the main thread's record */

/* sleep.c: end st's sleep in the kernel, if it sleeps there, for a cancel to act on. */
void shim_sleep_wake(struct sthread *st);

/* thread.c: the calling thread's record (NULL: not a goshim thread). */
struct sthread *sthread_self(void);
/* st's pthread_t: its TCB in full TLS mode, the record itself in errno mode. */
pthread_t sthread_id(struct sthread *st);
/* The record of pthread_t t, or NULL if t is not a goshim thread. */
struct sthread *sthread_lookup(pthread_t t);
/* glibc's own pthread_t for the main thread (differs from ours in errno mode). */
pthread_t sthread_glibc_id(pthread_t t, struct sthread *st);
/* The calling thread st's last acts before its G ends: C++ thread_local and key
 * destructors, its TCB kept for a joiner, its routed signals given back; the last thread's
 * exit ends the process. */
void sthread_finish(struct sthread *st);

/* unwind.c: unwind the calling thread st to its start (cancellation, pthread_exit). */
__attribute__((noreturn)) void sthread_unwind(struct sthread *st);

/* key.c: run the calling thread's key destructors (at its exit); free st's key values
 * (errno mode), as its record ends. */
void sthread_run_key_destructors(void);
void sthread_free_key_values(struct sthread *st);

/* tid.c: st's tid, what gettid() says on it. */
pid_t sthread_tid(struct sthread *st);
/* A new thread st's policy, priority (explicit: its attributes', else NULL) and nice
 * value, from its creator (NULL: not a goshim thread). */
void sthread_inherit_settings(struct sthread *st, struct sthread *creator,
                              const struct sched_param *explicit, int policy);

/* The opening of an interposer that acts on thread t: st is goshim's record
 * of it; a thread goshim does not manage, and the main thread (whose kernel
 * thread is its own), go to glibc's name with glibc's pthread_t. */
#define STHREAD_OR_GLIBC(st, t, name, ...)                                                         \
    struct sthread *st = goshim_on ? sthread_lookup(t) : NULL;                                     \
    if (!st || st->is_main)                                                                        \
    return REAL(name)(sthread_glibc_id(t, st), __VA_ARGS__)

#endif
