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
 * Signals sent to the process (kill, the tty, itimers and alarm, POSIX
 * timers, SIGCHLD) go where the kernel would send them among the
 * program's threads (signal(7), the kernel's complete_signal): to the
 * main thread if it does not block the signal, else to any thread that
 * does not (or waits for it in sigwait or sigsuspend), else they stay
 * pending for the process. The kernel itself picks among goshim's OS
 * threads, which run other threads or none, so every handler the program
 * installs is installed as goshim's dispatcher (the program's action is
 * kept in app_act and reported back by sigaction). On a signal not meant
 * for a thread (si_code not SI_TKILL, not a fault) the dispatcher runs
 * the program's handler at once if the thread it interrupted is the one
 * the kernel would have chosen; otherwise, and whenever it interrupted
 * goshim's own scheduler context, it posts the signal and its siginfo to
 * the router, a thread of goshim's own that lets through every signal
 * with a handler (so one always takes it) and picks the thread in
 * ordinary thread context, with locks (shim_route_signal): a thread
 * running on another M or blocked in a system call gets it by tgkill of
 * that M, a parked one has its wait interrupted and runs the handler on
 * its own stack (EINTR or restart per SA_RESTART). A handler never runs
 * on a scheduler stack. SA_RESETHAND is applied when the program's
 * handler actually runs (the kernel's reset would catch the forward).
 * Signals left at SIG_DFL or SIG_IGN are the kernel's alone: default
 * actions (terminate, core, stop) act as natively.
 *
 * Rejected: making every M block every signal but the router, which
 * would then get all of them; a thread-directed signal (pthread_kill,
 * raise, a fault) must reach the M that runs its thread.
 *
 * Not seen: glibc's sigset() and bsd_signal() install through libc's
 * internal sigaction.
 */
#include <asm/prctl.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* glibc reserves these two real-time signals for itself (nptl). */
#define SIGCANCEL_NO 32
#define SIGSETXID_NO 33

#include "shim/shim.h"
#include "shim/thread.h"

/* ---- the program's handlers, and the dispatcher installed in their place ---------- */

static struct sigaction app_act[65];
static uint64_t dispatched; /* signals whose kernel handler is dispatch (bit sig-1); atomic */
/* Dispatched signals that no thread took when they came: given back to the kernel, pending
 * for the process (queued, in order), and blocked in the router until a thread unblocks
 * them (the kernel then delivers them to that thread's M); atomic. */
static uint64_t parked;
static pid_t self_pid;

/* The router's state: the signals posted to it, in the order they came, with their
 * siginfo (a bounded queue that signal handlers on any thread fill: a slot is free for
 * position pos when its seq is pos, filled when it is pos + 1); a signal posted when the
 * queue is full waits in overflow (one of each, the last siginfo); and the router's
 * wake-up word, bumped by every post and every change of dispatched. */
enum { POSTQ = 256 };
static struct {
    uint64_t head, tail; /* head: producers (CAS); tail: the router */
    struct {
        uint64_t seq;
        int sig;
        siginfo_t info;
    } slot[POSTQ];
    uint64_t overflow;
    siginfo_t overflow_info[65];
    uint32_t word;
    uint32_t routing; /* the router is handing one on */
    /* Queue positions below handed are handed on (low 32 bits: a futex word for kill()
     * and sigqueue(), which wait for theirs); handed_waiters: how many wait. */
    uint32_t handed;
    uint32_t handed_waiters;
} rt;
static __thread bool on_router __attribute__((tls_model("initial-exec")));

static void dispatch(int sig, siginfo_t *info, void *uc);
static const siginfo_t *unparked(const siginfo_t *info, siginfo_t *copy);
static bool router_busy(void);
static uint64_t set_bits(const sigset_t *set);

static void router_kick(void)
{
    __atomic_add_fetch(&rt.word, 1, __ATOMIC_SEQ_CST);
    futexwakeup(&rt.word, 1);
}

static void postq_init(void)
{
    rt.head = rt.tail = 0;
    rt.overflow = 0;
    for (uint64_t i = 0; i < POSTQ; i++)
        rt.slot[i].seq = i;
}

/* Signal-safe: queue sig for the router. Its position in the queue, or UINT64_MAX when it
 * went to the overflow set. */
static uint64_t post(int sig, const siginfo_t *info)
{
    uint64_t pos = __atomic_load_n(&rt.head, __ATOMIC_RELAXED);
    for (;;) {
        uint64_t seq = __atomic_load_n(&rt.slot[pos % POSTQ].seq, __ATOMIC_ACQUIRE);
        if (seq == pos) {
            if (__atomic_compare_exchange_n(&rt.head, &pos, pos + 1, true, __ATOMIC_RELAXED,
                                            __ATOMIC_RELAXED))
                break;
        } else if (seq < pos) { /* full */
            rt.overflow_info[sig] = *info;
            __atomic_or_fetch(&rt.overflow, 1ULL << (sig - 1), __ATOMIC_SEQ_CST);
            router_kick();
            return UINT64_MAX;
        } else {
            pos = __atomic_load_n(&rt.head, __ATOMIC_RELAXED);
        }
    }
    rt.slot[pos % POSTQ].sig = sig;
    rt.slot[pos % POSTQ].info = *info;
    __atomic_store_n(&rt.slot[pos % POSTQ].seq, pos + 1, __ATOMIC_RELEASE);
    router_kick();
    return pos;
}

/* The router: the signal at queue position at is handed on (to a thread, or the kernel). */
static void handed_on(uint64_t at)
{
    __atomic_store_n(&rt.handed, (uint32_t)(at + 1), __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&rt.handed_waiters, __ATOMIC_SEQ_CST))
        futexwakeup(&rt.handed, INT32_MAX);
}

/*
 * Wait until the router has handed on the signal posted at position at: a kill() of the
 * own process returns once the thread that takes the signal is marked (as the kernel's
 * kill returns with the signal queued and a thread chosen, which then cannot leave
 * without taking it). Bounded (the router may wait for a lock this thread holds, if it
 * is a signal handler): at most 100 ms (the router, a thread of its own, may wait a few
 * ms for a CPU on a loaded machine).
 */
static void wait_handed(uint64_t at)
{
    if (at == UINT64_MAX)
        return;
    int64_t until = nanotime() + 100000000;
    __atomic_add_fetch(&rt.handed_waiters, 1, __ATOMIC_SEQ_CST);
    for (;;) {
        uint32_t h = __atomic_load_n(&rt.handed, __ATOMIC_SEQ_CST);
        if ((int32_t)(h - (uint32_t)(at + 1)) >= 0)
            break;
        int64_t left = until - nanotime();
        if (left <= 0)
            break;
        futexsleep(&rt.handed, h, left);
    }
    __atomic_sub_fetch(&rt.handed_waiters, 1, __ATOMIC_SEQ_CST);
}

/* The router: the next posted signal, in order; 0 if none. */
static int take_posted(siginfo_t *info, uint64_t *at)
{
    uint64_t pos = rt.tail;
    *at = pos;
    if (__atomic_load_n(&rt.slot[pos % POSTQ].seq, __ATOMIC_ACQUIRE) == pos + 1) {
        int sig = rt.slot[pos % POSTQ].sig;
        *info = rt.slot[pos % POSTQ].info;
        __atomic_store_n(&rt.slot[pos % POSTQ].seq, pos + POSTQ, __ATOMIC_RELEASE);
        __atomic_store_n(&rt.tail, pos + 1, __ATOMIC_SEQ_CST);
        return sig;
    }
    uint64_t o = __atomic_load_n(&rt.overflow, __ATOMIC_SEQ_CST);
    if (o) {
        int sig = __builtin_ctzll(o) + 1;
        *at = UINT64_MAX;
        *info = rt.overflow_info[sig];
        __atomic_and_fetch(&rt.overflow, ~(1ULL << (sig - 1)), __ATOMIC_SEQ_CST);
        return sig;
    }
    return 0;
}

/* The kernel's default action for sig, now the program's again (SA_RESETHAND, or changed
 * while the signal was forwarded): raised again with the kernel's disposition. */
static void act_default(int sig)
{
    struct sigaction cur;
    if (REAL(sigaction)(sig, NULL, &cur) == 0 && !(cur.sa_flags & SA_SIGINFO) &&
        cur.sa_handler == SIG_DFL)
        rt_syscall(SYS_tgkill, self_pid, rt_syscall(SYS_gettid, 0, 0, 0), sig);
}

/* Run the program's handler for sig, here. */
static void call_app(int sig, siginfo_t *info, void *uc)
{
    struct sigaction a = app_act[sig];
    if (!goshim_vforked)
        shim_handler_ran(); /* for the waits that end when a handler ran (shim_callmask) */
    if ((a.sa_flags & SA_RESETHAND) && a.sa_handler != SIG_DFL && a.sa_handler != SIG_IGN) {
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        app_act[sig] = dfl;
        __atomic_and_fetch(&dispatched, ~(1ULL << (sig - 1)), __ATOMIC_SEQ_CST);
        __atomic_and_fetch(&sched_routed_signals, ~(1ULL << (sig - 1)), __ATOMIC_SEQ_CST);
        if (preempt_owns(sig))
            preempt_app_action(sig, &dfl, NULL); /* goshim's handler stays */
        else
            REAL(sigaction)(sig, &dfl, NULL);
    }
    if (a.sa_flags & SA_SIGINFO) {
        if ((uintptr_t)a.sa_sigaction > 1)
            a.sa_sigaction(sig, info, uc);
    } else if (a.sa_handler == SIG_DFL) {
        act_default(sig);
    } else if (a.sa_handler != SIG_IGN) {
        a.sa_handler(sig);
    }
}

/* Sent to one thread: by tgkill, raise or pthread_kill, or a fault of the code it runs. */
static bool thread_directed(int sig, const siginfo_t *info)
{
    if (info->si_code == SI_TKILL)
        return true;
    bool fault = sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE ||
                 sig == SIGTRAP || sig == SIGSYS;
    return fault && info->si_code > 0;
}

static void dispatch(int sig, siginfo_t *info, void *uc)
{
    int saved = errno;
    siginfo_t orig;
    info = (siginfo_t *)unparked(info, &orig);
    if (goshim_vforked || !goshim_started) { /* a vfork child; or before start-up */
        call_app(sig, info, uc);
        errno = saved;
        return;
    }
    struct g *gp = NULL;
    bool on_g = false;
    bool on_m = !on_router && sched_signal_context(&gp, &on_g);
    if (on_router) {
        post(sig, info);
    } else if (!on_m) {
        if (info->si_code != SHIM_SI_BELL)
            call_app(sig, info, uc); /* a thread of the program that goshim does not run */
    } else if (info->si_code == SHIM_SI_BELL && info->si_pid == self_pid) {
        /* On a scheduler context whose G is the bell's, that G is switching: it takes the
         * signal when it resumes (every way back into a thread's code delivers what is
         * pending). Else a bell that missed its thread goes back to the router. */
        siginfo_t mine = {.si_signo = 0};
        bool here = on_g ? shim_bell_take(sig, info, gp, &mine) : gp == info->si_value.sival_ptr;
        if (mine.si_signo)
            call_app(sig, &mine, uc);
        if (!here)
            post(sig, info);
    } else if (thread_directed(sig, info)) {
        siginfo_t fwd;
        if (on_g && info->si_code == SI_TKILL && info->si_pid == self_pid &&
            shim_forwarded_info(sig, &fwd))
            call_app(sig, &fwd, uc);
        else if (on_g || info->si_code != SI_TKILL)
            call_app(sig, info, uc); /* a fault is handled where it happened */
        else
            post(sig, info); /* landed on a scheduler context: to a thread that takes it */
    } else if (on_g && preempt_owns(sig) && (shim_hidden_mask() & (1ULL << (sig - 1)))) {
        post(sig, info); /* blocked here in the program's view: to a thread that takes it */
    } else if (on_g && !shim_main_takes(sig, gp)) {
        call_app(sig, info, uc); /* the thread the kernel would have chosen */
    } else {
        post(sig, info);
    }
    errno = saved;
}

/*
 * Give sig back to the kernel, pending for the process, with its siginfo. The kernel lets
 * a thread other than the main one queue a signal to its process only with a negative
 * si_code (rt_sigqueueinfo: "nor can they impersonate a kill()"; it said EPERM, and every
 * kill() nobody took at once was lost): the siginfo goes with goshim's code, the sender's
 * in si_errno, and unparked() puts it back where the signal is taken.
 */
static void park_in_kernel(int sig, const siginfo_t *info)
{
    siginfo_t q = *info;
    q.si_errno = info->si_code;
    q.si_code = SHIM_SI_PARKED;
    long rc = rt_syscall(SYS_rt_sigqueueinfo, self_pid, sig, &q);
    if (rc < 0)
        rt_print(2,
                 "goshim: cannot leave signal %d pending for the process (error %ld): it is "
                 "lost\n",
                 sig, -rc);
}

/* A signal taken from the kernel: its own siginfo if the router parked it. */
static const siginfo_t *unparked(const siginfo_t *info, siginfo_t *copy)
{
    if (info->si_code != SHIM_SI_PARKED)
        return info;
    *copy = *info;
    copy->si_code = info->si_errno;
    copy->si_errno = 0;
    return copy;
}

/* The router: takes the signals posted to it and hands each to its thread. Lets through
 * every signal that has a handler (none other: a default action would be the kernel's). */
static void *router_main(void *arg)
{
    (void)arg;
    on_router = true;
    /* A new thread inherits its creator's GS base, here an M's: this is no M (setxid.c and
     * the dispatcher tell Ms by it). */
    rt_syscall(SYS_arch_prctl, ARCH_SET_GS, 0, 0);
    uint64_t applied = 0, mask = 0;
    bool first = true;
    for (;;) {
        uint32_t w = __atomic_load_n(&rt.word, __ATOMIC_SEQ_CST);
        uint64_t want = __atomic_load_n(&dispatched, __ATOMIC_SEQ_CST) &
                        ~__atomic_load_n(&parked, __ATOMIC_SEQ_CST);
        if (first || want != applied) {
            /* glibc's SIGCANCEL and SIGSETXID stay open on every thread (setxid.c). */
            mask = ~want & ~((1ULL << (SIGCANCEL_NO - 1)) | (1ULL << (SIGSETXID_NO - 1)));
            rt_syscall6(SYS_rt_sigprocmask, SIG_SETMASK, (long)&mask, 0, 8, 0, 0);
            applied = want;
            first = false;
        }
        siginfo_t si;
        int sig, n = 0;
        uint64_t at;
        __atomic_store_n(&rt.routing, 1, __ATOMIC_SEQ_CST);
        while ((sig = take_posted(&si, &at)) != 0) {
            n++;
            uint64_t bit = 1ULL << (sig - 1);
            if (si.si_code == SHIM_SI_BELL && si.si_pid == self_pid) {
                shim_recheck_signal(sig, &si);
            } else if (preempt_owns(sig)) {
                if (!shim_route_signal(sig, &si)) /* never blocked: cannot wait in the kernel */
                    shim_pend_on_main(sig, &si);
            } else if ((__atomic_load_n(&parked, __ATOMIC_SEQ_CST) & bit) ||
                       !shim_route_signal(sig, &si)) {
                /* Nobody takes it: blocked here first, then back to the kernel for the
                 * process, with its siginfo, behind the ones of it that came before. */
                if (!(__atomic_fetch_or(&parked, bit, __ATOMIC_SEQ_CST) & bit)) {
                    mask |= bit;
                    applied &= ~bit;
                    rt_syscall6(SYS_rt_sigprocmask, SIG_SETMASK, (long)&mask, 0, 8, 0, 0);
                }
                park_in_kernel(sig, &si);
            }
            if (at != UINT64_MAX)
                handed_on(at);
        }
        __atomic_store_n(&rt.routing, 0, __ATOMIC_SEQ_CST);
        if (!n)
            futexsleep(&rt.word, w, -1);
    }
    return NULL;
}

void shim_signal_repost(int sig, const siginfo_t *info)
{
    post(sig, info);
}

/* A signal this process sends itself, to be routed here: one with a handler of the program
 * (the others are the kernel's), none of it left pending for the process before (they come
 * first), and a sender that is a thread of the program. */
static bool route_own(pid_t pid, int sig)
{
    if (pid != self_pid || sig <= 0 || sig >= 65 || !goshim_active())
        return false;
    uint64_t bit = 1ULL << (sig - 1);
    return (__atomic_load_n(&dispatched, __ATOMIC_SEQ_CST) & bit) &&
           !(__atomic_load_n(&parked, __ATOMIC_SEQ_CST) & bit);
}

/* kill() and sigqueue() of the own process: the siginfo the kernel would give, posted to
 * the router, which has handed it on when the call returns (see wait_handed). */
static int send_own(int sig, int code, union sigval value)
{
    siginfo_t si;
    shim_own_info(&si, sig, code);
    si.si_value = value;
    /* Nothing before it with the router: routed here at once if the locks are free (a
     * handler may have interrupted their holder). Else the router's, waited for. */
    if (router_busy() || shim_route_signal_now(sig, &si) != 1) {
        struct m *mp = acquirem(); /* no hand-off of its P while it waits a moment */
        wait_handed(post(sig, &si));
        releasem(mp);
    }
    shim_deliver_signals(); /* routed to the sender itself: handled before the call returns */
    return 0;
}

GOSHIM_EXPORT int kill(pid_t pid, int sig)
{
    if (!route_own(pid, sig))
        return REAL(kill)(pid, sig);
    return send_own(sig, SI_USER, (union sigval){0});
}

GOSHIM_EXPORT int sigqueue(pid_t pid, int sig, const union sigval value)
{
    if (!route_own(pid, sig))
        return REAL(sigqueue)(pid, sig, value);
    return send_own(sig, SI_QUEUE, value);
}

/* Signals posted to the router that it has not handed on yet. */
static bool router_busy(void)
{
    return __atomic_load_n(&rt.head, __ATOMIC_SEQ_CST) !=
               __atomic_load_n(&rt.tail, __ATOMIC_SEQ_CST) ||
           __atomic_load_n(&rt.overflow, __ATOMIC_SEQ_CST) ||
           __atomic_load_n(&rt.routing, __ATOMIC_SEQ_CST);
}

static void router_fork_child(void)
{
    if (!goshim_started || !sched_self())
        return;
    self_pid = getpid();
    postq_init();
    rt.word = 0;
    rt.handed = 0;
    rt.handed_waiters = 0;
    parked = 0;
    if (sched_helper_thread(router_main) != 0)
        rt_print(2, "goshim: cannot start the signal router in the fork child: signals sent to "
                    "the process may reach a thread late\n");
}

int shim_signal_init(void)
{
    self_pid = getpid();
    postq_init();
    int err = sched_helper_thread(router_main);
    if (err == 0)
        err = pthread_atfork(NULL, NULL, router_fork_child);
    return err;
}

/* goshim's own text: a handler there is goshim's (preemption's, moved to another signal at
 * run time by sched/preempt.c), installed as it is. */
extern const char __ehdr_start[] __attribute__((visibility("hidden")));
extern const char etext[] __attribute__((visibility("hidden")));

static bool goshims_own(const struct sigaction *act)
{
    uintptr_t h = (uintptr_t)act->sa_sigaction;
    return h >= (uintptr_t)__ehdr_start && h < (uintptr_t)etext;
}

static bool dispatchable(int sig)
{
    return sig > 0 && sig < 65 && sig != SIGKILL && sig != SIGSTOP && sig != SIGCANCEL_NO &&
           sig != SIGSETXID_NO;
}

/*
 * The program's action for a signal of preemption's kind (SIGURG, or the real-time signal
 * preemption moved to): goshim's handler stays installed and chains to what
 * preempt_app_action records, which for a handler of the program is the dispatcher (the
 * program's action kept in app_act): so the program's own SIGURG goes where the kernel
 * would send it and waits, pending, while the thread blocks it in its own view (the
 * signal is never blocked in fact), as any other signal.
 */
static int owned_action(int sig, const struct sigaction *act, struct sigaction *old)
{
    uint64_t bit = 1ULL << (sig - 1);
    struct sigaction prev;
    preempt_app_action(sig, NULL, &prev);
    if (__atomic_load_n(&dispatched, __ATOMIC_SEQ_CST) & bit)
        prev = app_act[sig];
    if (act) {
        bool handler = (act->sa_flags & SA_SIGINFO)
                           ? (uintptr_t)act->sa_sigaction > 1
                           : act->sa_handler != SIG_DFL && act->sa_handler != SIG_IGN;
        app_act[sig] = *act;
        if (handler) {
            struct sigaction k = *act;
            k.sa_sigaction = dispatch;
            k.sa_flags = (act->sa_flags | SA_SIGINFO) & ~SA_RESETHAND;
            preempt_app_action(sig, &k, NULL);
            __atomic_or_fetch(&dispatched, bit, __ATOMIC_SEQ_CST);
        } else {
            preempt_app_action(sig, act, NULL);
            __atomic_and_fetch(&dispatched, ~bit, __ATOMIC_SEQ_CST);
        }
        router_kick();
    }
    if (old)
        *old = prev;
    return 0;
}

GOSHIM_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    if (goshim_on && preempt_owns(sig))
        return owned_action(sig, act, old);
    if (!goshim_on || !dispatchable(sig) || (act && goshims_own(act))) {
        int r = REAL(sigaction)(sig, act, old);
        if (r == 0 && act && dispatchable(sig)) {
            __atomic_and_fetch(&dispatched, ~(1ULL << (sig - 1)), __ATOMIC_SEQ_CST);
            __atomic_and_fetch(&sched_routed_signals, ~(1ULL << (sig - 1)), __ATOMIC_SEQ_CST);
        }
        if (r == 0 && old && sig == SIGQUIT && !(old->sa_flags & SA_SIGINFO) &&
            sched_quit_handler_is(old->sa_handler))
            old->sa_handler = SIG_DFL;
        return r;
    }
    uint64_t bit = 1ULL << (sig - 1);
    struct sigaction prev;
    if (REAL(sigaction)(sig, NULL, &prev) != 0)
        return -1;
    if (__atomic_load_n(&dispatched, __ATOMIC_SEQ_CST) & bit)
        prev = app_act[sig];
    /* goshim's SIGQUIT dump stands in for the default action: reported as such. */
    if (sig == SIGQUIT && !(prev.sa_flags & SA_SIGINFO) && sched_quit_handler_is(prev.sa_handler))
        prev.sa_handler = SIG_DFL;
    if (act) {
        bool handler = (act->sa_flags & SA_SIGINFO)
                           ? (uintptr_t)act->sa_sigaction > 1
                           : act->sa_handler != SIG_DFL && act->sa_handler != SIG_IGN;
        if (handler) {
            struct sigaction k = *act;
            k.sa_sigaction = dispatch;
            k.sa_flags = (act->sa_flags | SA_SIGINFO) & ~SA_RESETHAND;
            app_act[sig] = *act;
            if (REAL(sigaction)(sig, &k, NULL) != 0)
                return -1;
            __atomic_or_fetch(&dispatched, bit, __ATOMIC_SEQ_CST);
            __atomic_or_fetch(&sched_routed_signals, bit, __ATOMIC_SEQ_CST);
        } else {
            if (REAL(sigaction)(sig, act, NULL) != 0)
                return -1;
            __atomic_and_fetch(&dispatched, ~bit, __ATOMIC_SEQ_CST);
            __atomic_and_fetch(&sched_routed_signals, ~bit, __ATOMIC_SEQ_CST);
            app_act[sig] = *act;
        }
        router_kick();
    }
    if (old)
        *old = prev;
    return 0;
}

GOSHIM_EXPORT sighandler_t signal(int sig, sighandler_t handler)
{
    if (!goshim_on)
        return REAL(signal)(sig, handler);
    struct sigaction act, old;
    memset(&act, 0, sizeof act);
    act.sa_handler = handler;
    act.sa_flags = SA_RESTART; /* glibc's signal() is BSD's */
    sigemptyset(&act.sa_mask);
    if (dispatchable(sig))
        sigaddset(&act.sa_mask, sig);
    if (sigaction(sig, &act, &old) != 0)
        return SIG_ERR;
    return old.sa_handler; /* the union's other member if it was an SA_SIGINFO handler */
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

/* The preemption signals: the program may block them in its own view (its old sets
 * show them), never in fact. */
static uint64_t preempt_signals(void)
{
    uint64_t set = 0;
    for (int sig = 1; sig < 65; sig++)
        if (preempt_owns(sig))
            set |= 1ULL << (sig - 1);
    return set;
}

/* The current G's mask becomes next (real before): what it now blocks and was routed here
 * goes to another thread; what it now lets through is handled at once. */
static void install_mask(uint64_t real, uint64_t next)
{
    sched_set_sigmask(next);
    if (next & ~real)
        shim_give_back_blocked(next & ~real); /* routed here, now blocked: for another thread */
    if (real & ~next) {
        /* Left in the kernel for the process: this M takes them now (its mask lets them
         * through); the router lets them through again, for the next ones. */
        if (__atomic_fetch_and(&parked, ~(real & ~next), __ATOMIC_SEQ_CST) & real & ~next)
            router_kick();
        shim_deliver_signals(); /* sent while blocked: handled now */
    }
}

/*
 * ppoll, pselect, epoll_pwait and epoll_pwait2 with a mask (shim/net.c) wait on the
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

/* The mask is the G's for the wait (and the M's while it blocks, its P handed
 * off); a signal left pending for this thread that the mask lets through is
 * handled at once, as the kernel would do. */
GOSHIM_EXPORT int sigsuspend(const sigset_t *set)
{
    if (!goshim_active())
        return REAL(sigsuspend)(set);
    uint64_t want, old = sched_sigmask(), hidden = shim_hidden_mask();
    memcpy(&want, set, sizeof want);
    shim_sigwaiting(~want); /* the router's view: it takes what the wait lets through */
    shim_set_hidden_mask(want & preempt_signals());
    sched_set_sigmask(want & ~never_blocked());
    int ran = shim_deliver_signals();
    sched_set_sigmask(old);
    shim_set_hidden_mask(hidden);
    if (ran) {
        shim_sigwaiting(0);
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
    int r, e;
    do {
        uint32_t before = shim_handlers_ran();
        r = REAL(sigsuspend)(&ks);
        e = errno;
        if (shim_handlers_ran() != before)
            break;
    } while (r < 0 && e == EINTR);
    if (entered)
        exitsyscall();
    shim_sigwaiting(0);
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

static uint64_t set_bits(const sigset_t *set)
{
    uint64_t w;
    memcpy(&w, set, sizeof w);
    return w;
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
    shim_sigwaiting(set_bits(set));
    /* Signals sent before the call and still with the router are pending already, as the
     * kernel would have them: let it hand them on first (the lowest is taken first). */
    for (int i = 0; i < 1000 && router_busy(); i++)
        sched_goyield();
    int got = take_pending(set, info);
    if (got) {
        shim_sigwaiting(0);
        return got;
    }
    bool entered = entersyscallblock();
    int r, e;
    for (;;) {
        r = REAL(sigtimedwait)(set, info, ts);
        e = errno;
        if (r > 0 && info->si_code == SHIM_SI_PARKED) {
            siginfo_t orig;
            *info = *unparked(info, &orig);
        }
        if (r > 0 && preempt_owns(r) && info->si_pid == self_pid &&
            (info->si_code == SI_QUEUE || info->si_code == SI_TIMER))
            continue; /* preemption's request or slice timer, not the program's */
        if (r <= 0 || info->si_code != SHIM_SI_BELL || info->si_pid != self_pid)
            break;
        /* A bell: taken here like a handler would take it (the signal may have been
         * delivered already: wait again), or one for another thread (to the router). */
        siginfo_t taken;
        if (!shim_bell_take(r, info, sched_self(), &taken))
            post(r, info);
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

/* ---- exec: what is pending for the thread stays pending (signal(7)) ------------------ */

#define EXEC_WRAPPER(name, params, args)                                                           \
    GOSHIM_EXPORT int name params                                                                  \
    {                                                                                              \
        if (!goshim_active())                                                                      \
            return REAL(name) args;                                                                \
        uint64_t kept = shim_exec_prepare();                                                       \
        int r = REAL(name) args;                                                                   \
        int e = errno;                                                                             \
        shim_exec_failed(kept);                                                                    \
        errno = e;                                                                                 \
        return r;                                                                                  \
    }
EXEC_WRAPPER(execve, (const char *path, char *const argv[], char *const envp[]), (path, argv, envp))
EXEC_WRAPPER(execv, (const char *path, char *const argv[]), (path, argv))
EXEC_WRAPPER(execvp, (const char *file, char *const argv[]), (file, argv))
EXEC_WRAPPER(execvpe, (const char *file, char *const argv[], char *const envp[]),
             (file, argv, envp))
EXEC_WRAPPER(fexecve, (int fd, char *const argv[], char *const envp[]), (fd, argv, envp))
#undef EXEC_WRAPPER

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
