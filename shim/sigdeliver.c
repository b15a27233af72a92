/*
 * Signals to threads: pthread_kill, pthread_sigqueue and raise (tgkill and
 * tkill to a thread's tid too: shim/tid.c), the process-directed signals
 * the router (sigroute.c) hands to a thread, and their delivery on the
 * thread's OS thread of the moment. What it keeps of a thread (pending
 * sets, forwarded siginfo) lives in the thread's record (shim/thread.h).
 *
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
 * Rejected: a plain tgkill of the M seen running the thread. Between the
 * check and the kill the G may park and the M run a thread that blocks
 * the signal: the signal then sits pending on that OS thread, for
 * whatever thread it runs next with the signal open, or for ever (Open
 * POSIX pthread_kill/8-1 hangs so at one P).
 *
 * Process-directed signals (shim/sigroute.c) come here through
 * shim_route_signal, on the router thread: the main thread if it takes
 * the signal, else the first thread that does; the siginfo goes with the
 * signal (fwd_info) for the handler or sigwaitinfo to see. When none takes
 * it, the router gives it back to the kernel, pending for the process. A
 * thread that exits or blocks a routed signal before it is delivered gives
 * it back to the router, which picks again (the kernel keeps such a signal
 * pending for the process, for any thread).
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shim/shim.h"
#include "shim/sigdeliver.h"
#include "shim/sigroute.h"
#include "shim/thread.h"

static inline uint64_t sigbit(int sig)
{
    return 1ULL << (sig - 1);
}

static bool takes(struct sthread *st, struct g *gp, uint64_t bit);

/* Ring gp's M: sig, queued to that OS thread with the bell's siginfo. */
static int ring(struct g *gp, int tid, int sig, bool proc)
{
    siginfo_t si; /* goshim's own, never the program's to see: no getpid, no getuid */
    memset(&si, 0, sizeof si);
    si.si_signo = sig;
    si.si_code = SHIM_SI_BELL;
    si.si_pid = sig_self_pid;
    si.si_errno = proc; /* routed: the router's recheck knows it from the bell */
    si.si_value.sival_ptr = gp;
    bool injected = fault_inject(FAULT_SIGQUEUE);
    long rc = injected ? -EAGAIN
                       : rt_syscall6(SYS_rt_tgsigqueueinfo, si.si_pid, tid, sig, (long)&si, 0, 0);
    /* To this very thread (a mark it took to deliver at a call of its own): the plain signal
     * then, which the kernel takes without a queue entry for a standard one; the dispatcher
     * runs the handler with the siginfo kept for it. A bell handed to the router instead
     * found the mark taken and was dropped: the signal was lost. */
    if (rc == -EAGAIN && gp == sched_self() && tid == sched_mtid() &&
        rt_syscall(SYS_tgkill, si.si_pid, tid, sig) == 0)
        rc = 0;
    if (rc == -EAGAIN) { /* the queue is full (RLIMIT_SIGPENDING): the router rings again */
        if (fault_first(FAULT_SIGQUEUE))
            rt_print(2,
                     "goshim: cannot queue signal %d to an OS thread (error %ld; "
                     "RLIMIT_SIGPENDING?): goshim sends it again until the kernel takes it%s\n",
                     sig, -rc, fault_note(injected));
        if (sig_on_router) { /* its own retry: not a busy loop */
            struct timespec nap = {0, 1000000};
            rt_syscall(SYS_nanosleep, (long)&nap, 0, 0);
        }
        sig_post(sig, &si);
        return 0;
    }
    return rc < 0 ? (int)-rc : 0;
}

/*
 * Ring gp's M (another thread's) for sig, marked when sig_default_gen[sig] was gen: not if
 * the program has given a signal it handled back to the kernel's default since, when the
 * bell would act as that default, for a signal already taken or still marked (its thread
 * then delivers it itself, at its next call into goshim). install_default (signal.c) waits
 * for the bells under way here, then discards them with any left from before.
 */
static void ring_other(struct g *gp, int tid, int sig, bool proc, uint32_t gen)
{
    /* sig_ringing_here never counts more than this thread has in sig_ringing: a handler
     * between the two steps waits for its own (bounded), never misses another's. */
    __atomic_add_fetch(&sig_ringing, 1, __ATOMIC_SEQ_CST);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    sig_ringing_here++;
    if (__atomic_load_n(&sig_default_gen[sig], __ATOMIC_SEQ_CST) == gen)
        ring(gp, tid, sig, proc);
    sig_ringing_here--;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    __atomic_sub_fetch(&sig_ringing, 1, __ATOMIC_SEQ_CST);
}

/* Signal st's thread now (st->lock held): 0; ESRCH when it is exiting (it takes no more). */
static int signal_thread_locked(struct sthread *st, int sig, bool proc)
{
    struct g *gp = st->gp;
    if (!gp || st->exiting)
        return ESRCH;
    uint32_t gen = __atomic_load_n(&sig_default_gen[sig], __ATOMIC_SEQ_CST);
    uint64_t bit = sigbit(sig);
    if (proc)
        __atomic_or_fetch(&st->procpend, bit, __ATOMIC_SEQ_CST);
    __atomic_or_fetch(&st->sigpending, bit, __ATOMIC_SEQ_CST); /* before the status is read */
    if (!takes(st, gp, bit) || gp == sched_self() || sched_g_resuming_here(gp))
        return 0; /* blocked: it waits for an unblock or a sigwait; or the caller's own,
                     which it delivers once it has let go of the locks (or resumes) */
    int tid = sched_g_cpu_tid(gp);
    if (tid > 0)
        ring_other(gp, tid, sig, proc, gen); /* an error (the M is gone): the interrupt below */
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

static bool keep_info(struct sthread *st, int sig, const siginfo_t *info);

/* sig, which the calling thread blocks, waits in its own pending set, with the siginfo
 * glibc's raise (SI_USER) or pthread_kill (SI_TKILL) would give it. */
static void pend_self(struct sthread *st, int sig, int code)
{
    siginfo_t si;
    shim_own_info(&si, sig, code);
    runtime_lock(&sthread_lock);
    keep_info(st, sig, &si);
    runtime_unlock(&sthread_lock);
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
    struct sthread *st = goshim_on ? sthread_lookup(t) : NULL;
    if (!st || !goshim_active())
        return REAL(pthread_kill)(sthread_glibc_id(t, st),
                                  sig); /* glibc signals itself by gettid */
    if (sig < 0 || sig >= 65)
        return EINVAL;
    if (st == sthread_self())
        return kept_for_self(st, sig, SI_TKILL) ? 0
                                                : REAL(pthread_kill)(sthread_glibc_id(t, st), sig);
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
    struct sthread *st = goshim_on ? sthread_lookup(t) : NULL;
    if (!st || !goshim_active())
        return REAL(pthread_sigqueue)(sthread_glibc_id(t, st), sig, value);
    if (sig < 0 || sig >= 65 || sig == SIGCANCEL_NO || sig == SIGSETXID_NO)
        return EINVAL;
    if (__atomic_load_n(&st->exited, __ATOMIC_ACQUIRE))
        return ESRCH;
    if (sig == 0)
        return 0;
    siginfo_t si;
    shim_own_info(&si, sig, SI_QUEUE);
    si.si_value = value;
    runtime_lock(&sthread_lock);
    keep_info(st, sig, &si);
    runtime_unlock(&sthread_lock);
    if (st == sthread_self()) {
        __atomic_or_fetch(&st->sigpending, sigbit(sig), __ATOMIC_SEQ_CST);
        shim_deliver_signals(); /* unless it blocks sig: then it waits, as natively */
        return 0;
    }
    runtime_lock(&st->lock);
    int err = signal_thread_locked(st, sig, false);
    runtime_unlock(&st->lock);
    return err;
}

int sthread_kill(struct sthread *st, int sig)
{
    if (sig < 0 || sig >= 65)
        return EINVAL;
    if (st == sthread_self()) { /* to its own OS thread, which runs it now, as pthread_kill */
        if (kept_for_self(st, sig, SI_TKILL))
            return 0;
        long rc = rt_syscall(SYS_tgkill, getpid(), sched_mtid(), sig);
        return rc < 0 ? (int)-rc : 0;
    }
    runtime_lock(&st->lock);
    int err = st->gp && !st->exiting ? 0 : ESRCH; /* it has taken its last signal */
    if (!err && sig != 0)
        err = signal_thread_locked(st, sig, false);
    runtime_unlock(&st->lock);
    return err;
}

/* A signal of goshim's own kind (the preemption signal's number) sent by the program that
 * no thread takes now: pending for the main thread (the kernel would keep it for the
 * process; goshim cannot leave it there, its OS threads never block it). */
void shim_pend_on_main(int sig, const siginfo_t *info)
{
    runtime_lock(&sthread_lock);
    if (sthread_main.gp && !sthread_main.exiting) {
        keep_info(&sthread_main, sig, info);
        runtime_lock(&sthread_main.lock);
        signal_thread_locked(&sthread_main, sig, true);
        runtime_unlock(&sthread_main.lock);
    }
    runtime_unlock(&sthread_lock);
}

GOSHIM_EXPORT int raise(int sig)
{
    struct sthread *st = goshim_active() ? sthread_self() : NULL;
    if (!st || sig <= 0 || sig >= 65)
        return REAL(raise)(sig);
    return kept_for_self(st, sig, SI_USER) ? 0 : REAL(raise)(sig);
}

/* A siginfo copied while another thread may write it: a reader checks the count around
 * it (sig_kept), and TSan is not told of the race it resolves. */
static __attribute__((no_sanitize("thread"))) void info_copy(siginfo_t *to, const siginfo_t *from)
{
    memcpy(to, from, sizeof *to);
}

/*
 * Keep info as what st's thread sees of sig (sthread_lock held, st alive). A POSIX timer's
 * signal that comes while the same timer's last one still waits for this thread (its
 * siginfo not read yet) is counted as the kernel counts an expiration while the timer's
 * signal is queued: as an overrun of the waiting one, not as a signal of its own, which
 * goshim's one pending instance per signal would lose (pbench_signals timer measures it).
 * True then: nothing more to send. Waiting means until the siginfo is read, not until the
 * pending mark is taken: between the two the thread rings itself. The merge and the read
 * (shim_forwarded_info) each change the state word at once, so that no expiration falls
 * between them: with a mark and a count apart, one merged after the reader took the count
 * and before it cleared the mark was lost (posix_timer_expirations_all_counted, under
 * load).
 */
static bool keep_info(struct sthread *st, int sig, const siginfo_t *info)
{
    if (!st->fwd_info)
        st->fwd_info = calloc(1, sizeof *st->fwd_info);
    if (!st->fwd_info)
        return false; /* the handler sees the forwarding tgkill's siginfo instead */
    siginfo_t *kept = &st->fwd_info->info[sig - 1];
    uint32_t *state = &st->fwd_info->state[sig - 1], *seq = &st->fwd_info->seq[sig - 1];
    uint32_t s = __atomic_load_n(state, __ATOMIC_SEQ_CST);
    if (info->si_code == SI_TIMER && kept->si_code == SI_TIMER &&
        kept->si_timerid == info->si_timerid) {
        uint32_t add = 1 + (uint32_t)info->si_overrun;
        while ((s & KEPT_WAITING) && (s & ~KEPT_WAITING) + add < KEPT_WAITING)
            if (__atomic_compare_exchange_n(state, &s, s + add, false, __ATOMIC_SEQ_CST,
                                            __ATOMIC_SEQ_CST))
                return true;
    }
    __atomic_add_fetch(seq, 1, __ATOMIC_SEQ_CST);
    info_copy(kept, info);
    __atomic_add_fetch(seq, 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(state, KEPT_WAITING, __ATOMIC_SEQ_CST);
    return false;
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
    struct g *mg = __atomic_load_n(&sthread_main.gp, __ATOMIC_ACQUIRE);
    return mg && mg != self && takes_routed(&sthread_main, mg, sigbit(sig));
}

struct sthread *sthread_of_g(struct g *gp)
{
    struct sthread *st = sched_g_thread(gp);
    if (st && !sched_g_dead(gp) && st->magic == STHREAD_MAGIC && st->gp == gp)
        return st;
    return NULL;
}

struct routed_pick {
    uint64_t bit;
    struct sthread *st;
};

/* sched_g_find's match: gp's thread takes the routed signal pick->bit. */
static bool picks_routed(struct g *gp, void *arg)
{
    struct routed_pick *pick = arg;
    struct sthread *st = sthread_of_g(gp);
    if (!st || !takes_routed(st, gp, pick->bit))
        return false;
    pick->st = st;
    return true;
}

/* Route sig (sthread_lock held). With try, every other lock is only tried: -1 if one was
 * busy (nothing done); else whether a thread took it. */
static int route_locked(int sig, const siginfo_t *info, bool try)
{
    uint64_t bit = sigbit(sig);
    /* A thread picked may start its exit before it is signalled: then the next one. */
    for (int round = 0; round < 4; round++) {
        struct sthread *target = NULL;
        struct g *mg = __atomic_load_n(&sthread_main.gp, __ATOMIC_ACQUIRE);
        if (mg && takes_routed(&sthread_main, mg, bit)) {
            target = &sthread_main;
        } else {
            struct routed_pick pick = {.bit = bit};
            bool busy;
            if (sched_g_find(picks_routed, &pick, try, &busy))
                target = pick.st;
            else if (busy)
                return -1;
        }
        if (!target)
            return 0;
        /* Taken by a thread that lets it through, with an action that ignores it: discarded
         * there, as the kernel discards it (a sigwait for it takes it). */
        if (!(__atomic_load_n(&target->sigwaiting, __ATOMIC_SEQ_CST) & bit) && sig_discarded(sig))
            return 1;
        if (try && !target->fwd_info)
            return -1; /* keep_info would allocate */
        if (try && !runtime_trylock(&target->lock))
            return -1;
        if (!try)
            runtime_lock(&target->lock);
        if (keep_info(target, sig, info)) {
            runtime_unlock(&target->lock);
            return 1; /* an overrun of the timer signal that waits there */
        }
        bool done = signal_thread_locked(target, sig, true) == 0;
        runtime_unlock(&target->lock);
        if (done)
            return 1;
    }
    return 0;
}

bool shim_route_signal(int sig, const siginfo_t *info)
{
    runtime_lock(&sthread_lock);
    int r = route_locked(sig, info, false);
    runtime_unlock(&sthread_lock);
    return r == 1;
}

int shim_route_signal_asleep(int sig, const siginfo_t *info)
{
    if (!runtime_trylock(&sthread_lock))
        return -1;
    int r = route_locked(sig, info, true);
    runtime_unlock(&sthread_lock);
    return r;
}

int shim_route_signal_now(int sig, const siginfo_t *info)
{
    return m_in_runtime() ? -1 : shim_route_signal_asleep(sig, info);
}

void shim_recheck_signal(int sig, const siginfo_t *bell)
{
    struct g *gp = bell->si_value.sival_ptr;
    if (!gp)
        return;
    runtime_lock(&sthread_lock);
    struct sthread *st = sthread_of_g(gp);
    if (st) {
        runtime_lock(&st->lock);
        /* Still marked: not delivered yet, nor given back (exit, block). */
        if (__atomic_load_n(&st->sigpending, __ATOMIC_SEQ_CST) & sigbit(sig))
            signal_thread_locked(st, sig, bell->si_errno != 0);
        runtime_unlock(&st->lock);
    }
    runtime_unlock(&sthread_lock);
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
    struct sthread *st = cur ? sched_g_thread(cur) : NULL;
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

void sthread_give_back_signals(struct sthread *st, bool exiting)
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
    struct sthread *st = shim_in_g() ? sthread_self() : NULL;
    if (st && (__atomic_load_n(&st->procpend, __ATOMIC_SEQ_CST) & blocked))
        give_back(st, blocked);
}

bool shim_forwarded_info(int sig, siginfo_t *out)
{
    struct sthread *st = goshim_on ? sthread_self() : NULL;
    if (!st || st->magic != STHREAD_MAGIC || !st->fwd_info)
        return false;
    uint32_t *state = &st->fwd_info->state[sig - 1], *seq = &st->fwd_info->seq[sig - 1];
    /* A writer replaces the siginfo (another sender's) on another thread, or on this one
     * that the handler interrupted: a bounded wait, then the tgkill's siginfo. */
    for (int tries = 0; tries < 100000; tries++) {
        uint32_t s = __atomic_load_n(state, __ATOMIC_SEQ_CST);
        if (!(s & KEPT_WAITING))
            return false;
        uint32_t q = __atomic_load_n(seq, __ATOMIC_SEQ_CST);
        if (q & 1)
            continue;
        info_copy(out, &st->fwd_info->info[sig - 1]);
        if (__atomic_load_n(seq, __ATOMIC_SEQ_CST) != q ||
            !__atomic_compare_exchange_n(state, &s, 0, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
            continue; /* replaced, or an expiration merged meanwhile: again */
        out->si_overrun += (int)(s & ~KEPT_WAITING);
        return true;
    }
    return false;
}

void shim_sigwaiting(uint64_t set)
{
    struct sthread *st = shim_in_g() ? sthread_self() : NULL;
    if (st)
        __atomic_store_n(&st->sigwaiting, set, __ATOMIC_SEQ_CST);
}

void shim_handler_ran(bool restarts)
{
    struct sthread *st = goshim_on ? sthread_self() : NULL;
    if (st && st->magic == STHREAD_MAGIC) {
        st->handlers_ran++;
        st->cutting_ran += !restarts;
    }
}

uint32_t shim_cutting_handlers_ran(void)
{
    struct sthread *st = shim_in_g() ? sthread_self() : NULL;
    return st ? st->cutting_ran : 0;
}

uint32_t shim_handlers_ran(void)
{
    struct sthread *st = shim_in_g() ? sthread_self() : NULL;
    return st ? st->handlers_ran : 0;
}

uint64_t shim_hidden_mask(void)
{
    struct sthread *st = shim_in_g() ? sthread_self() : NULL;
    return st ? st->hidden_mask : 0;
}

void shim_set_hidden_mask(uint64_t set)
{
    struct sthread *st = shim_in_g() ? sthread_self() : NULL;
    if (st)
        __atomic_store_n(&st->hidden_mask, set, __ATOMIC_RELAXED); /* the router reads it */
}

static int deliver_pending(struct sthread *st);

int shim_deliver_signals(void)
{
    struct sthread *st = shim_in_g() ? sthread_self() : NULL;
    if (!st || !__atomic_load_n(&st->sigpending, __ATOMIC_RELAXED))
        return 0; /* the common case, after every wait: one load, no frame */
    return deliver_pending(st);
}

__attribute__((noinline)) static int deliver_pending(struct sthread *st)
{
    uint64_t mask = sched_sigmask() | st->hidden_mask;
    uint64_t set = __atomic_load_n(&st->sigpending, __ATOMIC_RELAXED) & ~mask;
    if (!set)
        return 0; /* all blocked: they wait */
    set = take_marks(st, set);
    __atomic_or_fetch(&st->owed, set, __ATOMIC_SEQ_CST);
    int res = 0;
    for (int sig = 1; sig <= 64; sig++) {
        if (!(set & sigbit(sig)))
            continue;
        int r = sig_handler_restarts(sig);
        res = r > res ? r : res;
        /* The kernel runs the handler before this returns, on this G: a bell to itself
         * (see shim_bell_take; a plain tgkill merged into a bell pending here, and the
         * bell then found nothing to deliver). */
        ring(sched_self(), sched_mtid(), sig, false);
    }
    return res;
}

int shim_signalled_at_start(uint32_t ran, uint32_t cut)
{
    struct sthread *st = goshim_on ? sthread_self() : NULL;
    if (!st)
        return 0;
    uint64_t mask = sched_sigmask() | __atomic_load_n(&st->hidden_mask, __ATOMIC_RELAXED);
    if (__atomic_load_n(&st->sigpending, __ATOMIC_SEQ_CST) & ~mask)
        deliver_pending(st); /* the handlers run now, before the call */
    uint32_t now = *(volatile uint32_t *)&st->handlers_ran; /* a handler may run here too */
    /* shim_checked_call's: none since this decision. Written only when it moved: a forking
     * parent's first write to a page after each fork copies it. */
    if (st->call_seen != now)
        st->call_seen = now;
    if (now == ran)
        return 0;
    return st->cutting_ran != cut ? 2 : 1;
}

long shim_checked_call(long nr, long a, long b, long c, long d, long e)
{
    struct sthread *st = goshim_on ? sthread_self() : NULL;
    long r = st ? sched_checked_syscall(nr, a, b, c, d, e, &st->handlers_ran, st->call_seen)
                : rt_syscall6(nr, a, b, c, d, e, 0);
    if (r < 0 && r >= -4095) {
        errno = (int)-r;
        return -1;
    }
    return r; /* SCHED_SYSCALL_SIGNALLED too */
}

uint64_t shim_pending_signals(void)
{
    struct sthread *st = shim_in_g() ? sthread_self() : NULL;
    return st ? __atomic_load_n(&st->sigpending, __ATOMIC_RELAXED) : 0;
}

int shim_take_signal(uint64_t want, siginfo_t *info)
{
    struct sthread *st = shim_in_g() ? sthread_self() : NULL;
    if (!st)
        return 0;
    uint64_t pend = __atomic_load_n(&st->sigpending, __ATOMIC_RELAXED) & want;
    while (pend) {
        int sig = __builtin_ctzll(pend) + 1;
        uint64_t bit = sigbit(sig);
        if (take_marks(st, bit)) {
            siginfo_t unused;
            taken_info(sig, info ? info : &unused); /* read: a timer's next is a signal again */
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
    struct sthread *st = shim_in_g() ? sthread_self() : NULL;
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
    struct sthread *st = shim_in_g() ? sthread_self() : NULL;
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
