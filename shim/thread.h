/*
 * Thread lifecycle interposers (thread.c): start-up hooks for init.c.
 */
#ifndef GOSHIM_SHIM_THREAD_H
#define GOSHIM_SHIM_THREAD_H

/* Before sched_adopt_main: install the exit hook, find TLS offsets. */
int shim_thread_init(void);
/* The runtime hooks the thread layer provides (sched.h: struct sched_hooks). */
void shim_thread_hooks(struct sched_hooks *h);
/* After sched_adopt_main: give the main G its thread record. */
void shim_thread_adopted_main(void);

/*
 * Cancellation points (deferred cancellation). shim_testcancel acts on a
 * pending, enabled cancel request: it unwinds the thread and does not
 * return. shim_cancel_pending says whether it would. A blocking wait that
 * is a cancellation point calls shim_testcancel on entry and after every
 * wake-up (pthread_cancel interrupts its gfutex_wait with EINTR).
 */
#include <stdbool.h>
void shim_testcancel(void);
/* The process-shared cond the calling thread is about to wait on in glibc with mutex m
 * (NULL: it is back): pthread_cancel wakes it there (shim/thread.c). */
void shim_pshared_cond_wait(pthread_cond_t *c, pthread_mutex_t *m);
bool shim_cancel_pending(void);

/*
 * Raise the signals pthread_kill left pending for the calling thread, on
 * its current OS thread (handlers run before it returns). 0: none was
 * pending; 1: all had handlers with SA_RESTART (or none ran); 2: a
 * handler without SA_RESTART ran, so the interrupted call fails with EINTR.
 */
int shim_deliver_signals(void);
/* Take the lowest signal of want pending for the calling thread (0 if none); info (if not
 * NULL) gets its siginfo. */
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include <stdint.h>
struct g;
int shim_take_signal(uint64_t want, siginfo_t *info);
/* The signals left pending for the calling thread (bit sig-1). */
uint64_t shim_pending_signals(void);

/*
 * Process-directed signals (shim/sigroute.c routes them, thread.c picks the
 * thread). shim_route_signal delivers sig, with its siginfo, to the thread
 * the kernel would choose (false: none takes it now); run by the router
 * thread. shim_main_takes: the main thread, if it is not self,
 * takes sig now (lock-free, for a signal handler). shim_forwarded_info:
 * the siginfo a signal forwarded to the calling thread came with (taken
 * once). shim_sigwaiting: the signals the calling thread waits for or
 * lets through while it waits (sigwait, sigsuspend; 0 after).
 */
bool shim_route_signal(int sig, const siginfo_t *info);
/* The same on the sending thread itself, where it may be a signal handler: 1 taken, 0 no
 * thread takes it now, -1 a lock it needs was busy (or the first siginfo of the thread
 * would be allocated): nothing done, the router must do it. */
int shim_route_signal_now(int sig, const siginfo_t *info);
/*
 * The bell (thread.c): a signal sent to a thread that runs on an M is queued
 * to that OS thread with this si_code, the G in si_value (si_errno 1: it was
 * sent to the process). shim_bell_take, in the dispatcher or sigwaitinfo on cur, the G
 * that took the bell: out gets the siginfo to run cur's handler with (si_signo 0: nothing
 * for cur); false if the bell was for another G, which the router must look at again
 * (shim_recheck_signal signals its thread again if the signal is still pending there).
 */
#define SHIM_SI_BELL (-0x4753)
/* A signal the router left pending for the process (shim/sigroute.c). */
#define SHIM_SI_PARKED (-0x4754)
bool shim_bell_take(int sig, const siginfo_t *bell, struct g *cur, siginfo_t *out);
void shim_recheck_signal(int sig, const siginfo_t *bell);
/* Routed signals the calling thread has not taken and now blocks: back to the router. */
void shim_give_back_blocked(uint64_t blocked);
/* shim/sigroute.c: hand sig to the router as if it had just been sent to the process. */
void shim_signal_repost(int sig, const siginfo_t *info);
/* The siginfo of a signal the process sends itself: sig, code, our pid and uid. */
static inline void shim_own_info(siginfo_t *si, int sig, int code)
{
    memset(si, 0, sizeof *si);
    si->si_signo = sig;
    si->si_code = code;
    si->si_pid = getpid();
    si->si_uid = getuid();
}
void shim_pend_on_main(int sig, const siginfo_t *info);
bool shim_main_takes(int sig, struct g *self);
bool shim_forwarded_info(int sig, siginfo_t *out);
void shim_sigwaiting(uint64_t set);
/* Signals of the preemption kind the calling thread asked to block: reported, not installed. */
uint64_t shim_hidden_mask(void);
/* A handler of the program runs on the calling thread (the dispatcher); how many did. */
void shim_handler_ran(void);
uint32_t shim_handlers_ran(void);
void shim_set_hidden_mask(uint64_t set);
/* A wait with a signal mask of its own (ppoll, pselect, epoll_pwait, epoll_pwait2): begin
 * installs the call's mask as the thread's (handling what it lets through), interrupted
 * says whether a handler of the program ran on this thread since, end puts the old mask
 * back (shim/sigmask.c). */
struct shim_callmask {
    uint64_t old, mask, hidden;
    uint32_t ran;
};
void shim_callmask_begin(struct shim_callmask *cm, const sigset_t *mask);
bool shim_callmask_interrupted(const struct shim_callmask *cm);
void shim_callmask_end(struct shim_callmask *cm);
/* Before an exec: what goshim keeps pending for the thread goes to the kernel (returned);
 * after a failed exec, back. */
uint64_t shim_exec_prepare(void);
void shim_exec_failed(uint64_t raised);

/*
 * A thread's record (the shim's per-pthread state): in its thread's stack
 * block (sched_g_record) or, for user stacks and the main thread, malloc'ed
 * or static. thread.c makes and ends them; sigdeliver.c and tid.c read and
 * mark them. sthread_lock is taken by whoever looks at other threads'
 * records from outside them (the signal router) and around a record's end,
 * so a record is never freed under the router.
 */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <unwind.h>

#include "sched/api.h"

struct g;

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
    /* Process-directed signals forwarded to it (shim/sigroute.c): the set whose siginfo waits
     * in fwd_info (allocated by the first forward, under sthread_lock), atomic; the signals it
     * waits for in sigwait and friends, atomic; and the ones of never_blocked() that the
     * program asked to block (reported back, never installed). */
    uint64_t fwd;
    siginfo_t *fwd_info;
    uint64_t sigwaiting;
    uint64_t hidden_mask;
    uint32_t handlers_ran; /* handlers of the program run on it (shim_handler_ran); owner */
    char name[16];
    void ***keyblk; /* errno mode: key values, 32 blocks of 32; both levels lazily */
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
/* The process signals routed to st that it has not taken go back to the process
 * (it exits, or blocks them): sigdeliver.c. */
void sthread_give_back_signals(struct sthread *st, bool exiting);
/* shim/key.c: run the calling thread's key destructors (at its exit); free st's key
 * values (errno mode), as its record ends. */
void sthread_run_key_destructors(void);
void sthread_free_key_values(struct sthread *st);
/* The calling thread st's last acts before its G ends (thread.c): C++ thread_local and key
 * destructors, its TCB kept for a joiner, its routed signals given back; the last thread's
 * exit ends the process. */
void sthread_finish(struct sthread *st);
/* Unwind the calling thread st to its start (cancellation, pthread_exit): unwind.c. */
__attribute__((noreturn)) void sthread_unwind(struct sthread *st);
/* The calling thread's record (NULL: not a goshim thread). */
struct sthread *sthread_self(void);
/* st's pthread_t: its TCB in full TLS mode, the record itself in errno mode. */
pthread_t sthread_id(struct sthread *st);
/* The record of pthread_t t, or NULL if t is not a goshim thread. */
struct sthread *sthread_lookup(pthread_t t);
/* glibc's own pthread_t for the main thread (differs from ours in errno mode). */
pthread_t sthread_glibc_id(pthread_t t, struct sthread *st);
/* gp's live thread record (sthread_lock held), or NULL: sigdeliver.c. */
struct sthread *sthread_of_g(struct g *gp);
/* st's tid, what gettid() says on it: shim/tid.c. */
pid_t sthread_tid(struct sthread *st);
/* tgkill or tkill to st's thread, the calling one or another (then sthread_lock held):
 * delivered as pthread_kill delivers; 0 or an error number (sigdeliver.c). */
int sthread_kill(struct sthread *st, int sig);
/* A new thread st's policy, priority (explicit: its attributes', else NULL) and nice
 * value, from its creator (NULL: not a goshim thread): tid.c. */
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
