/*
 * Signal masks are per thread, as natively: a G's mask is kept in the G
 * and installed on whichever M runs it (sched: a system call only when it
 * differs from the M's); a new thread starts with its creator's. The
 * alternate signal stack (sigaltstack) is the G's the same way. Signals
 * sent to a thread that blocks them wait in the thread's pending set
 * (shim/thread.c) for it to unblock or sigwait them.
 *
 * The preemption signal belongs to goshim (sched/preempt.c): the
 * application's sigaction and signal for it are recorded, not installed,
 * and goshim's handler passes every signal that is not its own on to that
 * recorded handler. A mask that would block it keeps it open, or one
 * task would make its OS thread unpreemptible for every later task.
 * dlopen and dlclose refresh preemption's table of application text.
 *
 * Not seen: glibc's sigset() and bsd_signal() install through libc's
 * internal sigaction.
 */
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

/* glibc reserves these two real-time signals for itself (nptl). */
#define SIGCANCEL_NO 32
#define SIGSETXID_NO 33

#include "sched/preempt.h"
#include "shim/shim.h"
#include "shim/thread.h"

GOSHIM_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    if (goshim_on && preempt_owns(sig)) {
        preempt_app_action(sig, act, old);
        return 0;
    }
    int r = REAL(sigaction)(sig, act, old);
    /* goshim's SIGQUIT dump stands in for the default action: reported as such. */
    if (r == 0 && old && sig == SIGQUIT && !(old->sa_flags & SA_SIGINFO) &&
        sched_quit_handler_is(old->sa_handler))
        old->sa_handler = SIG_DFL;
    return r;
}

GOSHIM_EXPORT sighandler_t signal(int sig, sighandler_t handler)
{
    if (goshim_on && preempt_owns(sig)) {
        struct sigaction act, old;
        memset(&act, 0, sizeof act);
        act.sa_handler = handler;
        act.sa_flags = SA_RESTART; /* glibc's signal() is BSD's */
        preempt_app_action(sig, &act, &old);
        return old.sa_handler; /* the union's other member if it was an SA_SIGINFO handler */
    }
    sighandler_t old = REAL(signal)(sig, handler);
    return sig == SIGQUIT && sched_quit_handler_is(old) ? SIG_DFL : old;
}

/* The mask without the preemption signal when it would block it. */
static const sigset_t *keep_open(int how, const sigset_t *set, sigset_t *copy)
{
    if (!goshim_on || !set || how == SIG_UNBLOCK)
        return set;
    for (int sig = 1; sig < 65; sig++) {
        if (preempt_owns(sig) && sigismember(set, sig) == 1) {
            *copy = *set;
            sigdelset(copy, sig);
            return copy;
        }
    }
    return set;
}

/* Signals no thread blocks: glibc's SIGCANCEL and SIGSETXID, and preemption's. */
static uint64_t never_blocked(void)
{
    uint64_t set = (1ULL << (SIGCANCEL_NO - 1)) | (1ULL << (SIGSETXID_NO - 1));
    for (int sig = 1; sig < 65; sig++)
        if (preempt_owns(sig))
            set |= 1ULL << (sig - 1);
    return set;
}

/* pthread_sigmask for the current G: 0 or an errno value. */
static int g_sigmask(int how, const sigset_t *set, sigset_t *old)
{
    if (set && how != SIG_BLOCK && how != SIG_UNBLOCK && how != SIG_SETMASK)
        return EINVAL;
    uint64_t cur = sched_sigmask(), want = 0;
    if (set)
        memcpy(&want, set, sizeof want); /* signals 1-64; set and old may be one object */
    if (old) {
        sigemptyset(old);
        memcpy(old, &cur, sizeof cur);
    }
    if (!set)
        return 0;
    uint64_t next = how == SIG_BLOCK ? cur | want : how == SIG_UNBLOCK ? cur & ~want : want;
    next &= ~never_blocked();
    sched_set_sigmask(next);
    if (cur & ~next)
        shim_deliver_signals(); /* sent while blocked: handled now */
    return 0;
}

GOSHIM_EXPORT int pthread_sigmask(int how, const sigset_t *set, sigset_t *old)
{
    if (goshim_active())
        return g_sigmask(how, set, old);
    sigset_t copy;
    return REAL(pthread_sigmask)(how, keep_open(how, set, &copy), old);
}

GOSHIM_EXPORT int sigprocmask(int how, const sigset_t *set, sigset_t *old)
{
    if (goshim_active()) {
        int err = g_sigmask(how, set, old);
        if (err)
            errno = err;
        return err ? -1 : 0;
    }
    sigset_t copy;
    return REAL(sigprocmask)(how, keep_open(how, set, &copy), old);
}

/* The mask is the G's for the wait (and the M's while it blocks, its P handed
 * off); a signal left pending for this thread that the mask lets through is
 * handled at once, as the kernel would do. */
GOSHIM_EXPORT int sigsuspend(const sigset_t *set)
{
    if (!goshim_active())
        return REAL(sigsuspend)(set);
    uint64_t want, old = sched_sigmask();
    memcpy(&want, set, sizeof want);
    sched_set_sigmask(want & ~never_blocked());
    int ran = shim_deliver_signals();
    sched_set_sigmask(old);
    if (ran) {
        errno = EINTR;
        return -1;
    }
    if (!entersyscallblock())
        return REAL(sigsuspend)(set);
    int r = REAL(sigsuspend)(set);
    int e = errno;
    exitsyscall();
    errno = e;
    return r;
}

/* The kernel's pending set of the OS thread and the process, plus the
 * signals left pending for this thread while it blocked them. */
GOSHIM_EXPORT int sigpending(sigset_t *set)
{
    int r = REAL(sigpending)(set);
    if (r == 0 && goshim_active()) {
        uint64_t mine = shim_pending_signals(), word;
        memcpy(&word, set, sizeof word);
        word |= mine;
        memcpy(set, &word, sizeof word);
    }
    return r;
}

/* The G's own alternate signal stack, installed on whichever M runs it. */
GOSHIM_EXPORT int sigaltstack(const stack_t *ss, stack_t *old)
{
    if (!goshim_active())
        return REAL(sigaltstack)(ss, old);
    int err = sched_sigaltstack(ss, old);
    if (err)
        errno = err;
    return err ? -1 : 0;
}

/*
 * sigwait and friends: a signal sent to this thread while it blocked it
 * may wait in its pending set (not the kernel's): taken from there first.
 * Otherwise the M waits in the kernel with the G's mask installed, its P
 * handed off.
 */
static int take_pending(const sigset_t *set, siginfo_t *info)
{
    uint64_t want;
    memcpy(&want, set, sizeof want);
    int sig = shim_take_signal(want);
    if (sig && info) {
        memset(info, 0, sizeof *info);
        info->si_signo = sig;
        info->si_code = SI_TKILL;
        info->si_pid = getpid();
        info->si_uid = getuid();
    }
    return sig;
}

GOSHIM_EXPORT int sigwait(const sigset_t *set, int *sig)
{
    if (!goshim_active())
        return REAL(sigwait)(set, sig);
    int got = take_pending(set, NULL);
    if (got) {
        *sig = got;
        return 0;
    }
    if (!entersyscallblock())
        return REAL(sigwait)(set, sig);
    int r = REAL(sigwait)(set, sig);
    exitsyscall();
    return r;
}

GOSHIM_EXPORT int sigwaitinfo(const sigset_t *set, siginfo_t *info)
{
    return sigtimedwait(set, info, NULL);
}

GOSHIM_EXPORT int sigtimedwait(const sigset_t *set, siginfo_t *info, const struct timespec *ts)
{
    if (!goshim_active())
        return REAL(sigtimedwait)(set, info, ts);
    siginfo_t mine;
    int got = take_pending(set, info ? info : &mine);
    if (got)
        return got;
    if (!entersyscallblock())
        return REAL(sigtimedwait)(set, info, ts);
    int r = REAL(sigtimedwait)(set, info, ts);
    int e = errno;
    exitsyscall();
    errno = e;
    return r;
}

GOSHIM_EXPORT void *dlopen(const char *file, int mode)
{
    void *h = REAL(dlopen)(file, mode);
    if (h && goshim_on)
        preempt_refresh();
    return h;
}

GOSHIM_EXPORT int dlclose(void *h)
{
    int r = REAL(dlclose)(h);
    if (r == 0 && goshim_on)
        preempt_refresh();
    return r;
}
