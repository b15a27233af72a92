/*
 * Signal masks are per thread, as natively: a G's mask is kept in the G
 * and installed on whichever M runs it (sched: a system call only when it
 * differs from the M's); a new thread starts with its creator's. The
 * alternate signal stack (sigaltstack) is the G's the same way. Signals
 * sent to a thread that blocks them wait in the thread's pending set
 * (shim/sigdeliver.c) for it to unblock or sigwait them: sigsuspend,
 * sigpending and the sigwait family look there first.
 *
 * A mask that would block the preemption signal keeps it open (or one
 * task would make its OS thread unpreemptible for every later task): the
 * program blocks it in its own view only (the hidden mask), and the
 * program's signals of its kind are held back for the thread meanwhile.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shim/shim.h"
#include "shim/sigdeliver.h"
#include "shim/sigroute.h"
#include "shim/thread.h"

static uint64_t set_bits(const sigset_t *set)
{
    uint64_t w;
    memcpy(&w, set, sizeof w);
    return w;
}

/* The mask without the preemption signal when it would block it. */
static const sigset_t *keep_open(int how, const sigset_t *set, sigset_t *copy)
{
    if (!goshim_on || !set || how == SIG_UNBLOCK || !(set_bits(set) & preempt_owned()))
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
    return (1ULL << (SIGCANCEL_NO - 1)) | (1ULL << (SIGSETXID_NO - 1)) | preempt_owned();
}

/* The preemption signals: the program may block them in its own view (its old sets
 * show them), never in fact. */
static uint64_t preempt_signals(void)
{
    return preempt_owned();
}

/* The current G's mask becomes next (real before): what it now blocks and was routed here
 * goes to another thread; what it now lets through is handled at once. */
static void install_mask(uint64_t real, uint64_t next)
{
    sig_router_settle();
    shim_route_defaults(next & ~real); /* before any M blocks them */
    sched_set_sigmask(next);
    if (next & ~real)
        shim_give_back_blocked(next & ~real); /* routed here, now blocked: for another thread */
    if (real & ~next) {
        /* Left in the kernel for the process: this M takes them now (its mask lets them
         * through); the router lets them through again, for the next ones. */
        if (__atomic_fetch_and(&sig_parked, ~(real & ~next), __ATOMIC_SEQ_CST) & real & ~next)
            sig_router_kick();
        shim_deliver_signals(); /* sent while blocked: handled now */
    }
}

/*
 * ppoll, pselect, epoll_pwait and epoll_pwait2 with a mask (shim/poll.c) wait on the
 * netpoller like their plain forms, with the given mask as the thread's for the call
 * (the kernel's sigprocmask-wait-restore, atomically): the router sees it, so a process
 * signal it lets through comes to this thread and interrupts the wait; a signal the mask
 * lets through that is pending already is handled at once. A handler that ran during the
 * call makes it fail with EINTR unless descriptors were ready (as the kernel's, whose
 * ready descriptors win). Afterwards the old mask is back, and what it blocks that was
 * routed here meanwhile goes to another thread (the kernel restores the mask before it
 * could deliver such a signal, which stays pending for the process).
 */
void shim_callmask_begin(struct shim_callmask *cm, const sigset_t *mask)
{
    cm->old = sched_sigmask();
    cm->ran = shim_handlers_ran();
    uint64_t want =
        set_bits(mask) & ~((1ULL << (SIGKILL - 1)) | (1ULL << (SIGSTOP - 1)) | never_blocked());
    cm->mask = want;
    cm->hidden = shim_hidden_mask();
    shim_set_hidden_mask(set_bits(mask) & preempt_signals());
    install_mask(cm->old, want);
    if (cm->hidden & ~set_bits(mask))
        shim_deliver_signals();
}

bool shim_callmask_interrupted(const struct shim_callmask *cm)
{
    return shim_handlers_ran() != cm->ran;
}

void shim_callmask_end(struct shim_callmask *cm)
{
    shim_set_hidden_mask(cm->hidden);
    install_mask(cm->mask, cm->old);
}

/* pthread_sigmask for the current G: 0 or an errno value. SIGKILL and SIGSTOP are never
 * added, glibc's own two never shown, as natively. */
static int g_sigmask(int how, const sigset_t *set, sigset_t *old)
{
    if (set && how != SIG_BLOCK && how != SIG_UNBLOCK && how != SIG_SETMASK)
        return EINVAL;
    uint64_t real = sched_sigmask(), want = 0;
    uint64_t cur = real | shim_hidden_mask();
    if (set)
        memcpy(&want, set, sizeof want); /* signals 1-64; set and old may be one object */
    if (old) {
        sigemptyset(old);
        memcpy(old, &cur, sizeof cur);
    }
    if (!set)
        return 0;
    uint64_t next = how == SIG_BLOCK ? cur | want : how == SIG_UNBLOCK ? cur & ~want : want;
    next &= ~((1ULL << (SIGKILL - 1)) | (1ULL << (SIGSTOP - 1)) | (1ULL << (SIGCANCEL_NO - 1)) |
              (1ULL << (SIGSETXID_NO - 1)));
    uint64_t hidden = shim_hidden_mask();
    shim_set_hidden_mask(next & preempt_signals());
    install_mask(real, next & ~never_blocked());
    if (hidden & ~next)
        shim_deliver_signals(); /* of preemption's kind, sent while blocked: handled now */
    return 0;
}

void shim_adopt_mask(void)
{
    sigset_t cur;
    g_sigmask(SIG_SETMASK, NULL, &cur);
    g_sigmask(SIG_SETMASK, &cur, NULL);
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

/* System V's sighold and sigrelse change the mask through libc's internal sigprocmask. */
GOSHIM_EXPORT int sighold(int sig)
{
    sigset_t set;
    sigemptyset(&set);
    if (sigaddset(&set, sig) != 0)
        return -1;
    return sigprocmask(SIG_BLOCK, &set, NULL);
}

GOSHIM_EXPORT int sigrelse(int sig)
{
    sigset_t set;
    sigemptyset(&set);
    if (sigaddset(&set, sig) != 0)
        return -1;
    return sigprocmask(SIG_UNBLOCK, &set, NULL);
}

/* sigsuspend's end: the thread's own mask again, through install_mask, after the router's
 * view of the wait is gone: a signal the router left in the kernel while the wait blocked
 * it (sig_parked) is let through again for this thread, which takes it before sigsuspend
 * returns, as natively. Restored with a bare sched_set_sigmask, such a signal stayed
 * parked when the router looked while the view of the wait was still up. */
static void suspend_end(uint64_t during, uint64_t old, uint64_t hidden)
{
    shim_sigwaiting(0);
    shim_set_hidden_mask(hidden);
    install_mask(during, old);
}

/* The mask is the G's for the wait (and the M's while it blocks, its P handed
 * off); a signal left pending for this thread that the mask lets through is
 * handled at once, as the kernel would do. */
GOSHIM_EXPORT int sigsuspend(const sigset_t *set)
{
    if (!goshim_active())
        return REAL(sigsuspend)(set);
    sig_router_settle();
    uint32_t start = shim_handlers_ran();
    uint64_t want, old = sched_sigmask(), hidden = shim_hidden_mask();
    memcpy(&want, set, sizeof want);
    shim_sigwaiting(~want); /* the router's view: it takes what the wait lets through */
    shim_set_hidden_mask(want & preempt_signals());
    uint64_t during = want & ~never_blocked();
    shim_route_defaults(during & ~old);
    sched_set_sigmask(during);
    int ran = shim_deliver_signals();
    if (ran) {
        suspend_end(during, old, hidden);
        errno = EINTR;
        return -1;
    }
    /* The kernel never blocks goshim's own signals for the wait (the program's of their
     * kind come as bells, when the wait lets them through), and goshim's handler ending
     * the wait is no handler of the program's: it waits again. */
    uint64_t kset = want & ~preempt_signals();
    sigset_t ks;
    sigemptyset(&ks);
    memcpy(&ks, &kset, sizeof kset);
    bool entered = entersyscallblock();
    /* From the check to the kernel's wait, everything the program may see is held back on
     * this OS thread, and the kernel's sigsuspend lets it through atomically: a signal
     * routed here (a bell, after entersyscallblock showed the thread waiting) whose handler
     * ran before the wait began would otherwise leave the thread asleep for ever
     * (prog_sigsuspend_order checks it). */
    uint64_t holdset = ~never_blocked();
    sigset_t hold, prev;
    sigemptyset(&hold);
    memcpy(&hold, &holdset, sizeof holdset);
    REAL(pthread_sigmask)(SIG_SETMASK, &hold, &prev);
    int r = -1, e = EINTR;
    while (shim_handlers_ran() == start) {
        r = REAL(sigsuspend)(&ks);
        e = errno;
        if (r >= 0 || e != EINTR)
            break;
    }
    REAL(pthread_sigmask)(SIG_SETMASK, &prev, NULL); /* the M's mask as sched knows it */
    if (entered)
        exitsyscall();
    /* Only now the thread's own mask again. With it set before the call, the kernel's
     * sigsuspend, woken for a signal that another thread (the router, lowest number first)
     * took, would restore that mask on its way to restarting the wait and run a signal the
     * wait blocked, before the one that ended it (Open POSIX sigsuspend/1-1 checks it). */
    suspend_end(during, old, hidden);
    errno = e;
    return r;
}

/* The kernel's pending set of the OS thread and the process, plus the
 * signals left pending for this thread while it blocked them. */
GOSHIM_EXPORT int sigpending(sigset_t *set)
{
    bool on = goshim_active();
    if (on)
        sig_router_settle();
    int r = REAL(sigpending)(set);
    if (r == 0 && on) {
        uint64_t mine = shim_pending_signals(), word;
        memcpy(&word, set, sizeof word);
        word &= ~preempt_signals(); /* goshim's own, on its way (the program's come as marks) */
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
    return shim_take_signal(want, info);
}

GOSHIM_EXPORT int sigwait(const sigset_t *set, int *sig)
{
    if (!goshim_active())
        return REAL(sigwait)(set, sig);
    siginfo_t info;
    int r;
    do /* never EINTR, as glibc's */
        r = sigtimedwait(set, &info, NULL);
    while (r < 0 && errno == EINTR);
    if (r < 0)
        return errno;
    *sig = r;
    return 0;
}

GOSHIM_EXPORT int sigwaitinfo(const sigset_t *set, siginfo_t *info)
{
    return sigtimedwait(set, info, NULL);
}

/* Waits in the kernel, its P handed off; the signals it waits for are announced to the
 * router first (a process signal for them comes here), and a forwarded one's siginfo is
 * the one it was sent with. */
GOSHIM_EXPORT int sigtimedwait(const sigset_t *set, siginfo_t *info, const struct timespec *ts)
{
    if (!goshim_active())
        return REAL(sigtimedwait)(set, info, ts);
    siginfo_t mine;
    if (!info)
        info = &mine;
    sig_router_settle();
    shim_sigwaiting(set_bits(set));
    /* Signals sent before the call and still with the router are pending already, as the
     * kernel would have them: let it hand them on first (the lowest is taken first). */
    for (int i = 0; i < 1000 && sig_router_busy(); i++)
        sched_goyield();
    int got = take_pending(set, info);
    if (got) {
        shim_sigwaiting(0);
        return got;
    }
    /* Waited again: what is left of the timeout (a valid one; an invalid one fails at once). */
    struct timespec left;
    const struct timespec *wait = ts;
    bool timed = ts && ts->tv_sec >= 0 && ts->tv_sec < 1000000000 && ts->tv_nsec >= 0 &&
                 ts->tv_nsec < 1000000000;
    int64_t deadline = timed ? nanotime() + ts->tv_sec * 1000000000LL + ts->tv_nsec : 0;
    struct sthread *st = sthread_self();
    uint32_t ran = st ? __atomic_load_n(&st->handlers_ran, __ATOMIC_RELAXED) : 0;
    bool entered = entersyscallblock();
    int r, e;
    for (;;) {
        if (timed && wait == &left) {
            int64_t ns = deadline - nanotime();
            if (ns < 0)
                ns = 0;
            left = (struct timespec){ns / 1000000000, ns % 1000000000};
        }
        r = REAL(sigtimedwait)(set, info, wait);
        e = errno;
        wait = timed ? &left : ts;
        /* Woken by a signal no handler of the program took: the kernel's EINTR, when a
         * signal the program ignores reached this thread (the kernel keeps an ignored signal
         * the process's first thread blocks: goshim's first OS thread may block it while
         * the program's main thread does not), or goshim's own. Only a handler ends the
         * wait (POSIX: "interrupted by an unblocked, caught signal"). */
        if (r < 0 && e == EINTR && st &&
            __atomic_load_n(&st->handlers_ran, __ATOMIC_RELAXED) == ran)
            continue;
        if (r > 0 && info->si_code == SHIM_SI_PARKED) {
            siginfo_t orig;
            *info = *sig_unparked(info, &orig);
        }
        if (r > 0 && preempt_owns(r) && info->si_pid == sig_self_pid &&
            (info->si_code == SI_QUEUE || info->si_code == SI_TIMER))
            continue; /* preemption's request or slice timer, not the program's */
        if (r <= 0 || info->si_code != SHIM_SI_BELL || info->si_pid != sig_self_pid)
            break;
        /* A bell: taken here like a handler would take it (the signal may have been
         * delivered already: wait again), or one for another thread (to the router). */
        siginfo_t taken;
        if (!shim_bell_take(r, info, sched_self(), &taken))
            sig_post(r, info);
        if (taken.si_signo) {
            *info = taken;
            break;
        }
    }
    if (entered)
        exitsyscall();
    shim_sigwaiting(0);
    siginfo_t fwd;
    if (r > 0 && info->si_code != SHIM_SI_BELL && shim_forwarded_info(r, &fwd))
        *info = fwd;
    errno = e;
    return r;
}
