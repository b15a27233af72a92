/*
 * The program's signal handlers (sigaction, signal) and the dispatcher
 * goshim installs in their place; exec.
 *
 * The preemption signal belongs to goshim (sched/preempt.c): the
 * application's sigaction and signal for it are recorded, not installed,
 * and goshim's handler passes every signal that is not its own on to that
 * recorded handler. The dlopen and dlclose wrappers, which refresh
 * preemption's table of application text, are in shim/dlopen.c.
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
 * the router (shim/sigroute.c), which picks the thread (an M asleep, or
 * looking for work, does the router's part itself: route_on_scheduler).
 * A handler never runs on a scheduler stack. SA_RESETHAND is applied when the program's
 * handler actually runs (the kernel's reset would catch the forward).
 *
 * Signals left at SIG_IGN are the kernel's alone. So is a signal left at
 * SIG_DFL as long as no thread blocks it: every OS thread then lets it
 * through, and its default action (terminate, core, stop, ignore) acts as
 * natively wherever it lands. Once a thread blocks it (shim_route_defaults,
 * before the mask is installed), the kernel's choice among goshim's OS
 * threads can no longer be trusted: an M that runs no thread (idle, or
 * between two) still carries the mask of the last thread it ran, which
 * may have ended or blocked the signal since, and the kernel may take
 * such an M for a signal every thread blocks - the default action then
 * kills the process that natively leaves the signal pending for its
 * sigwait (issue 27: threads that spawn children hand their Ps off and
 * leave such Ms). From then on such a signal goes through the dispatcher
 * and the router like one with a handler, and the thread that takes it
 * performs the default action itself (act_default); one that every
 * thread blocks waits, pending, for a sigwait or an unblock, as
 * natively. It stays routed (a thread that blocked it once may block it
 * again; a program that blocks around its calls must not pay two
 * sigactions each time). A signal whose default is to ignore it (SIGCHLD,
 * SIGWINCH, SIGCONT) needs no thread to act: it stays the kernel's, and
 * only the idle Ms block it from then on (route_default_locked).
 *
 * The program's actions (app_act) and the kernel's change together under
 * act_mu, which is taken with every signal blocked on its OS thread: a
 * handler that changes an action, or performs a default one, never finds
 * its own thread holding it.
 *
 * Rejected: making every M block every signal but the router, which
 * would then get all of them; a thread-directed signal (pthread_kill,
 * raise, a fault) must reach the M that runs its thread. Rejected for
 * default actions: keeping the masks of the Ms that run no thread in step
 * with the threads instead (idle Ms blocking what every thread blocks).
 * Which signals every thread blocks changes whenever a thread masks or
 * ends, and an idle or spinning M can only change its own mask: each such
 * change would have to wait for every M to look, and a thread that blocks
 * around its calls would pay that each time.
 *
 * Not seen: glibc's sigset() and bsd_signal() install through libc's
 * internal sigaction. Masks, sigsuspend and the sigwait family:
 * shim/sigmask.c.
 */
#include <asm/prctl.h>
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shim/shim.h"
#include "shim/sigdeliver.h"
#include "shim/sigroute.h"

/* ---- the program's handlers, and the dispatcher installed in their place ---------- */

static struct sigaction app_act[65] GOSHIM_LARGE;
/* Signals some thread has blocked (bit sig-1; atomic, only grows): at SIG_DFL they are routed
 * (shim_route_defaults). */
static uint64_t sig_blocked_once;
/* goshim's SIGQUIT dump, when it stood in for SIGQUIT's default action as that was routed. */
static void (*quit_dump)(int);
static struct runtime_lock act_mu FORK_WRITTEN; /* read by every fork child */
/* shim/sigroute.h says what these are. */
uint64_t sig_dispatched;
uint64_t sig_parked;
pid_t sig_self_pid FORK_WRITTEN;
uint32_t sig_default_gen[65];
uint32_t sig_ringing;
__thread uint32_t sig_ringing_here __attribute__((tls_model("initial-exec")));
__thread bool sig_on_router __attribute__((tls_model("initial-exec")));

/*
 * A signal for the process that lands on goshim's scheduler (an M between two threads, or
 * idle) used to go to the router, a thread of its own, whose wake-up and the wake-up of an
 * M for the thread it hands the signal to cost two passes through the kernel's scheduler
 * where the kernel's own delivery costs none: a POSIX timer's signals reached their handler
 * at half the kernel's rate. So an M asleep with nothing to run lets the routed signals
 * through (shim_idle_lets) and hands one that lands on it on itself, the thread it readies
 * run on this very M; an M looking for work hands it on before it runs a G or sleeps
 * (sig_route_posted), the router not woken meanwhile. Real-time signals stay in order: an
 * M routes at once only with nothing queued for the router before it, as kill() to the own
 * process does (send_own); else it queues the signal behind the others.
 */
static int route_if_quiet(int sig, const siginfo_t *info)
{
    return sig_router_busy() ? -1 : shim_route_signal_asleep(sig, info);
}

static void route_on_scheduler(int sig, const siginfo_t *info)
{
    int where;
    if (sched_route_asleep(route_if_quiet, sig, info, &where) == 1)
        return;
    sig_post_kick(sig, info, where != M_ROUTES_SOON);
}

/* The routed signals an idle M lets through (sched_hooks.idle_lets): the dispatched ones
 * that no thread has left waiting in the kernel (a parked one would come straight back). */
uint64_t shim_idle_lets(void)
{
    return __atomic_load_n(&sig_dispatched, __ATOMIC_SEQ_CST) &
           ~__atomic_load_n(&sig_parked, __ATOMIC_SEQ_CST);
}

static void dispatch(int sig, siginfo_t *info, void *uc);

/* Handlers of the program's this thread is in (call_app); one left by a longjmp stays
 * counted, which only delays the helpers below to the next park. */
static __thread int in_handler __attribute__((tls_model("initial-exec")));

/* sig is routed from now on: the router and the waker are made for the first routed
 * signal (sched/helpers.c), by helpers_settle once act_mu is let go. */
static void routed(uint64_t bit)
{
    __atomic_or_fetch(&sig_dispatched, bit, __ATOMIC_SEQ_CST);
    sched_signal_helpers_want();
}

/* After a call that may have routed a signal: the helpers now, from the program's own call;
 * from a handler (no thread can be made there), at the next park (sched_helpers_check). */
static void helpers_settle(void)
{
    if (!in_handler)
        sched_helpers_check();
}

/* Take act_mu, with every signal blocked on this OS thread (the mask before is returned, for
 * act_unlock). Not in a vfork child. */
static uint64_t act_lock(void)
{
    uint64_t all = ~0ULL, old = 0;
    rt_syscall6(SYS_rt_sigprocmask, SIG_SETMASK, (long)&all, (long)&old, sizeof all, 0, 0);
    runtime_lock(&act_mu);
    return old;
}

/*
 * A signal the dispatcher handled gets the kernel's default action back (the program's
 * sigaction to SIG_DFL, or SA_RESETHAND). Bells rung for it (shim/sigdeliver.c) may still
 * wait on an OS thread: an idle M blocks those it does not hand on itself
 * (sched/machines.c), so a bell rung for a thread that had just left that M may wait there
 * until the M runs a thread again. With the default installed, such a bell acts as a signal
 * of its own when it comes through, for a signal its thread took long before: it ends the process, dumps
 * core or stops it (CPython's test_signal sets SIGALRM back to SIG_DFL after a test that
 * may leave such a bell: "Alarm clock"). The kernel discards every
 * pending instance of a signal, of each thread and of the process, when it becomes
 * ignored: so the signal is ignored for a moment on its way to SIG_DFL. What the calling
 * thread can take of it first, bells apart (its OS thread's own, then the process's,
 * where the router leaves a signal no thread takes), is sent to the process again once
 * the default is in place: a signal of the program that was pending stays pending.
 *
 * Not kept: a signal of the program pending on another OS thread (a real-time signal a
 * thread raised to itself while blocking it), beyond KEEP instances of a real-time one,
 * and one that comes in the moment the signal is ignored.
 */
static int install_default(int sig, const struct sigaction *act)
{
    enum { KEEP = 4 }; /* a standard signal: one of the OS thread's, one of the process's */
    /* No new bell for what was marked before (sigdeliver.c: ring_other); the ones other
     * threads are queueing are in before the discard (not this thread's own: this may be a
     * handler that interrupted one). Bounded all the same, for a thread stopped there. */
    __atomic_add_fetch(&sig_default_gen[sig], 1, __ATOMIC_SEQ_CST);
    for (int64_t until = nanotime() + 1000000000;
         __atomic_load_n(&sig_ringing, __ATOMIC_SEQ_CST) > sig_ringing_here && nanotime() < until;)
        osyield();
    uint64_t one = 1ULL << (sig - 1), old = 0;
    rt_syscall6(SYS_rt_sigprocmask, SIG_BLOCK, (long)&one, (long)&old, 8, 0, 0);
    siginfo_t keep[KEEP], si;
    int n = 0;
    struct timespec zero = {0, 0};
    while (n < KEEP &&
           rt_syscall6(SYS_rt_sigtimedwait, (long)&one, (long)&si, (long)&zero, 8, 0, 0) == sig)
        if (si.si_code != SHIM_SI_BELL || si.si_pid != sig_self_pid)
            keep[n++] = si;
    struct sigaction ign;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    int r = REAL(sigaction)(sig, &ign, NULL);
    if (r == 0)
        r = REAL(sigaction)(sig, act, NULL);
    for (int i = 0; i < n; i++) {
        siginfo_t copy;
        sig_park_in_kernel(sig, sig_unparked(&keep[i], &copy));
    }
    int e = errno;
    rt_syscall6(SYS_rt_sigprocmask, SIG_SETMASK, (long)&old, 0, 8, 0, 0);
    errno = e;
    return r;
}

static void act_unlock(uint64_t old)
{
    runtime_unlock(&act_mu);
    rt_syscall6(SYS_rt_sigprocmask, SIG_SETMASK, (long)&old, 0, sizeof old, 0, 0);
}

FORK_TEXT void sig_act_fork_child(void)
{
    FORK_SET(act_mu.key, 0); /* a thread the child does not have may have held it */
}

/* The handler an action runs: (void *)SIG_DFL or SIG_IGN for none. */
static void *handler_of(const struct sigaction *a)
{
    return (a->sa_flags & SA_SIGINFO) ? (void *)a->sa_sigaction : (void *)a->sa_handler;
}

static bool is_handler(const struct sigaction *a)
{
    return (uintptr_t)handler_of(a) > 1;
}

/* The signals a fault raises on the thread that made it (a kill may send them too). */
static bool fault_signal(int sig)
{
    return sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE || sig == SIGTRAP ||
           sig == SIGSYS;
}

/*
 * The deadlock detector's question (sched_hooks.signal_may_wake): whether a handler of the
 * program's could still wake a parked thread, i.e. one is installed for a signal that can
 * come from outside the thread (a kill, a tty, a timer, a child) - any but the faults a
 * thread raises on itself. Such a program waits for the world as one in an I/O wait does
 * (main sem_waits for the semaphore its SIGINT handler posts), and Go's runtime, too, does
 * not call a program that listens for signals deadlocked. A racy read of each action, as
 * one changing at that moment.
 */
bool shim_signal_may_wake(void)
{
    for (int sig = 1; sig < 65; sig++) {
        if (!fault_signal(sig) && is_handler(&app_act[sig]))
            return true;
    }
    return false;
}

/* The signals whose default action is to ignore them (SIGCONT continues the process where it
 * is sent, whatever its action). */
static bool default_ignores(int sig)
{
    return sig == SIGCHLD || sig == SIGCONT || sig == SIGURG || sig == SIGWINCH;
}

/*
 * The default action of sig, performed by the thread that takes it (a signal handler, the
 * dispatcher): nothing where the default ignores it; goshim's dump for SIGQUIT where it
 * stands in for it; else the kernel's, on this OS thread: the kernel's default put in
 * place of the dispatcher, sig let through and raised here (the process ends, or stops and
 * goes on from here once continued), then the dispatcher back.
 */
static void act_default(int sig)
{
    if (default_ignores(sig))
        return;
    if (sig == SIGQUIT && quit_dump) {
        quit_dump(sig);
        return;
    }
    bool locked = !goshim_vforked; /* a vfork child has its own actions, and no lock */
    uint64_t all = ~0ULL, before = 0, only = ~(1ULL << (sig - 1));
    if (locked)
        before = act_lock();
    else
        rt_syscall6(SYS_rt_sigprocmask, SIG_SETMASK, (long)&all, (long)&before, 8, 0, 0);
    struct sigaction dfl, cur;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    if (REAL(sigaction)(sig, &dfl, &cur) == 0) {
        rt_syscall6(SYS_rt_sigprocmask, SIG_SETMASK, (long)&only, 0, 8, 0, 0);
        rt_syscall(SYS_tgkill, getpid(), rt_syscall(SYS_gettid, 0, 0, 0), sig);
        rt_syscall6(SYS_rt_sigprocmask, SIG_SETMASK, (long)&all, 0, 8, 0, 0);
        REAL(sigaction)(sig, &cur, NULL);
    }
    if (locked)
        act_unlock(before);
    else
        rt_syscall6(SYS_rt_sigprocmask, SIG_SETMASK, (long)&before, 0, 8, 0, 0);
}

static bool routes_default(int sig);
static int route_default_locked(int sig, const struct sigaction *act, uint64_t *idle);

/* SA_RESETHAND: sig's action is SIG_DFL again, as its handler runs. A signal routed at its
 * default stays routed. In a vfork child, only the child's own action changes. */
static void reset_action(int sig)
{
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    if (goshim_vforked) {
        if (!preempt_owns(sig))
            REAL(sigaction)(sig, &dfl, NULL);
        return;
    }
    uint64_t before = act_lock(), idle = 0; /* (routed with its handler: idle Ms block it) */
    if (routes_default(sig)) {
        route_default_locked(sig, &dfl, &idle);
    } else {
        app_act[sig] = dfl;
        __atomic_and_fetch(&sig_dispatched, ~(1ULL << (sig - 1)), __ATOMIC_SEQ_CST);
        __atomic_and_fetch(&sched_routed_signals, ~(1ULL << (sig - 1)), __ATOMIC_SEQ_CST);
        if (preempt_owns(sig))
            preempt_app_action(sig, &dfl, NULL); /* goshim's handler stays */
        else
            install_default(sig, &dfl);
    }
    act_unlock(before);
}

bool shim_in_handler(void)
{
    return in_handler > 0;
}

/* Run the program's action for sig, here. */
static void call_app(int sig, siginfo_t *info, void *uc)
{
    struct sigaction a = app_act[sig];
    bool handler = is_handler(&a);
    if (handler && !goshim_vforked)
        shim_handler_ran(a.sa_flags & SA_RESTART); /* for the waits a handler ends */
    if (handler && (a.sa_flags & SA_RESETHAND))
        reset_action(sig);
    void *h = handler_of(&a);
    in_handler++;
    if (handler && (a.sa_flags & SA_SIGINFO))
        a.sa_sigaction(sig, info, uc);
    else if (handler)
        a.sa_handler(sig);
    else if (h == (void *)SIG_DFL)
        act_default(sig);
    in_handler--;
    if (handler && uc) /* it ran where a blocking call had yet to enter the kernel */
        sched_checked_syscall_rewind(uc);
}

/* Sent to one thread: by tgkill, raise or pthread_kill, or a fault of the code it runs. */
static bool thread_directed(int sig, const siginfo_t *info)
{
    if (info->si_code == SI_TKILL)
        return true;
    return fault_signal(sig) && info->si_code > 0;
}

static void dispatch(int sig, siginfo_t *info, void *uc)
{
    int saved = errno;
    siginfo_t orig;
    info = (siginfo_t *)sig_unparked(info, &orig);
    if (sig_on_router) { /* never the router's to act on: it hands it on */
        sig_post(sig, info);
        errno = saved;
        return;
    }
    if (goshim_vforked || !goshim_started) { /* a vfork child; or before start-up */
        call_app(sig, info, uc);
        errno = saved;
        return;
    }
    struct g *gp = NULL;
    bool on_g = false;
    bool on_m = sched_signal_context(&gp, &on_g);
    if (!on_m) {
        if (info->si_code != SHIM_SI_BELL)
            call_app(sig, info, uc); /* a thread of the program that goshim does not run */
    } else if (info->si_code == SHIM_SI_BELL && info->si_pid == sig_self_pid) {
        /* On a scheduler context whose G is the bell's, that G is switching: it takes the
         * signal when it resumes (every way back into a thread's code delivers what is
         * pending). Else a bell that missed its thread goes back to the router. */
        siginfo_t mine = {.si_signo = 0};
        bool here = on_g ? shim_bell_take(sig, info, gp, &mine) : gp == info->si_value.sival_ptr;
        if (mine.si_signo)
            call_app(sig, &mine, uc);
        if (!here)
            sig_post(sig, info);
    } else if (thread_directed(sig, info)) {
        siginfo_t fwd;
        if (on_g && info->si_code == SI_TKILL && info->si_pid == sig_self_pid &&
            shim_forwarded_info(sig, &fwd))
            call_app(sig, &fwd, uc);
        else if (on_g || info->si_code != SI_TKILL)
            call_app(sig, info, uc); /* a fault is handled where it happened */
        else
            sig_post(sig, info); /* landed on a scheduler context: to a thread that takes it */
    } else if (on_g && preempt_owns(sig) && (shim_hidden_mask() & (1ULL << (sig - 1)))) {
        sig_post(sig, info); /* blocked here in the program's view: to a thread that takes it */
    } else if (on_g && !shim_main_takes(sig, gp)) {
        call_app(sig, info, uc); /* the thread the kernel would have chosen */
    } else if (on_g) {
        sig_post(sig, info);
    } else {
        route_on_scheduler(sig, info);
    }
    errno = saved;
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

/* A signal whose default action is routed once a thread blocks it: any the dispatcher may
 * take but the faults (the kernel unblocks a fault it raises, and runs its action on the
 * thread that faulted) and the preemption signal (never blocked in fact). */
static bool routable_default(int sig)
{
    return dispatchable(sig) && !fault_signal(sig) && !preempt_owns(sig);
}

/* sig, at its default action, goes through the dispatcher: a thread blocked it once. */
static bool routes_default(int sig)
{
    return (__atomic_load_n(&sig_blocked_once, __ATOMIC_SEQ_CST) & (1ULL << (sig - 1))) &&
           routable_default(sig);
}

/*
 * With act_mu: the program's action for sig is act, its default, and a thread has blocked
 * sig. Where the default ignores it, it stays the kernel's and idle Ms block it (one of
 * them must not discard it while every thread blocks it: a sigwait may be waiting for it);
 * a handler there would cut short the system calls the kernel never restarts, which an
 * ignored signal leaves alone. Else the dispatcher stands in for it in the kernel (with
 * SA_RESTART: the calls the kernel restarts go on after a stop, as natively). idle gets the
 * signals that Ms idle now must block (sched_idle_block, once act_mu is let go).
 */
static int route_default_locked(int sig, const struct sigaction *act, uint64_t *idle)
{
    uint64_t bit = 1ULL << (sig - 1);
    bool ignored = default_ignores(sig);
    struct sigaction k = *act, was = app_act[sig];
    if (!ignored) {
        k.sa_sigaction = dispatch;
        k.sa_flags = (act->sa_flags | SA_SIGINFO | SA_RESTART) & ~SA_RESETHAND;
        app_act[sig] = *act; /* before the kernel's: another thread may take sig at once */
    }
    if (REAL(sigaction)(sig, &k, NULL) != 0) {
        app_act[sig] = was; /* left as it was */
        return -1;
    }
    if (ignored) {
        __atomic_and_fetch(&sig_dispatched, ~bit, __ATOMIC_SEQ_CST);
        app_act[sig] = *act;
        *idle |= bit;
    } else {
        routed(bit);
    }
    __atomic_or_fetch(&sched_routed_signals, bit, __ATOMIC_SEQ_CST);
    sig_router_kick();
    return 0;
}

/*
 * A thread is about to block the signals in blocked: those it is the first to block, and
 * that are at their default action, are routed from now on (the top comment says why),
 * before the mask reaches the kernel. Those at SIG_IGN stay the kernel's (it discards them
 * wherever they land) until the program gives them back their default action.
 */
void shim_route_defaults(uint64_t blocked)
{
    uint64_t fresh = blocked & ~__atomic_load_n(&sig_blocked_once, __ATOMIC_SEQ_CST);
    if (!fresh || goshim_vforked)
        return;
    uint64_t before = act_lock(), idle = 0;
    fresh &= ~__atomic_fetch_or(&sig_blocked_once, fresh, __ATOMIC_SEQ_CST);
    for (int sig = 1; fresh && sig < 65; sig++) {
        uint64_t bit = 1ULL << (sig - 1);
        if (!(fresh & bit) || !routable_default(sig) ||
            (__atomic_load_n(&sig_dispatched, __ATOMIC_SEQ_CST) & bit))
            continue; /* not for routing; or a handler of the program's: routed already */
        struct sigaction cur;
        if (REAL(sigaction)(sig, NULL, &cur) != 0)
            continue;
        bool dump =
            sig == SIGQUIT && !(cur.sa_flags & SA_SIGINFO) && sched_quit_handler_is(cur.sa_handler);
        if (dump) {
            quit_dump = cur.sa_handler;
            cur.sa_handler = SIG_DFL; /* what the program is shown */
        }
        if (handler_of(&cur) == (void *)SIG_DFL)
            route_default_locked(sig, &cur, &idle);
    }
    act_unlock(before);
    sched_idle_block(idle);
    helpers_settle();
}

/* The program's action for sig, as sigaction reports it to the program (sigroute.h). */
int sig_handler_restarts(int sig)
{
    struct sigaction a;
    if (__atomic_load_n(&sig_dispatched, __ATOMIC_SEQ_CST) & (1ULL << (sig - 1)))
        a = app_act[sig];                   /* a racy copy, as sig_discarded's: no system call */
    else if (sigaction(sig, NULL, &a) != 0) /* the program's view: goshim's own are SIG_DFL */
        return 0;
    if (a.sa_handler == SIG_IGN || a.sa_handler == SIG_DFL)
        return 0;
    return a.sa_flags & SA_RESTART ? 1 : 2;
}

/* The router's question: a thread that takes sig and does not sigwait for it discards it,
 * its action (its default) ignoring it, as the kernel discards it. */
bool sig_discarded(int sig)
{
    struct sigaction a = app_act[sig]; /* a racy copy: as one changing at that moment */
    return (__atomic_load_n(&sig_dispatched, __ATOMIC_SEQ_CST) & (1ULL << (sig - 1))) &&
           ((handler_of(&a) == (void *)SIG_DFL && default_ignores(sig)) ||
            handler_of(&a) == (void *)SIG_IGN);
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
    if (__atomic_load_n(&sig_dispatched, __ATOMIC_SEQ_CST) & bit)
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
            routed(bit);
        } else {
            preempt_app_action(sig, act, NULL);
            __atomic_and_fetch(&sig_dispatched, ~bit, __ATOMIC_SEQ_CST);
        }
        sig_router_kick();
        helpers_settle();
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
        /* (A vfork child's actions are its own: the parent's records stay.) */
        if (r == 0 && act && dispatchable(sig) && !goshim_vforked) {
            __atomic_and_fetch(&sig_dispatched, ~(1ULL << (sig - 1)), __ATOMIC_SEQ_CST);
            __atomic_and_fetch(&sched_routed_signals, ~(1ULL << (sig - 1)), __ATOMIC_SEQ_CST);
        }
        if (r == 0 && old && sig == SIGQUIT && !(old->sa_flags & SA_SIGINFO) &&
            sched_quit_handler_is(old->sa_handler))
            old->sa_handler = SIG_DFL;
        return r;
    }
    uint64_t bit = 1ULL << (sig - 1), idle = 0;
    uint64_t before = act ? act_lock() : 0; /* a look alone needs no lock */
    struct sigaction prev;
    int r = REAL(sigaction)(sig, NULL, &prev);
    if (r == 0 && (__atomic_load_n(&sig_dispatched, __ATOMIC_SEQ_CST) & bit))
        prev = app_act[sig];
    /* goshim's SIGQUIT dump stands in for the default action: reported as such. */
    if (sig == SIGQUIT && !(prev.sa_flags & SA_SIGINFO) && sched_quit_handler_is(prev.sa_handler))
        prev.sa_handler = SIG_DFL;
    if (r == 0 && act) {
        if (is_handler(act)) {
            struct sigaction k = *act, was = app_act[sig];
            k.sa_sigaction = dispatch;
            k.sa_flags = (act->sa_flags | SA_SIGINFO) & ~SA_RESETHAND;
            app_act[sig] = *act; /* before the kernel's: another thread may take sig at once */
            r = REAL(sigaction)(sig, &k, NULL);
            if (r == 0) {
                routed(bit);
                __atomic_or_fetch(&sched_routed_signals, bit, __ATOMIC_SEQ_CST);
            } else {
                app_act[sig] = was;
            }
        } else if (handler_of(act) == (void *)SIG_DFL && routes_default(sig)) {
            r = route_default_locked(sig, act, &idle);
        } else {
            /* A handled signal set back to its default: no bell of it left (install_default). */
            bool to_default = handler_of(act) == (void *)SIG_DFL &&
                              (__atomic_load_n(&sig_dispatched, __ATOMIC_SEQ_CST) & bit);
            r = to_default ? install_default(sig, act) : REAL(sigaction)(sig, act, NULL);
            if (r == 0) {
                __atomic_and_fetch(&sig_dispatched, ~bit, __ATOMIC_SEQ_CST);
                __atomic_and_fetch(&sched_routed_signals, ~bit, __ATOMIC_SEQ_CST);
                app_act[sig] = *act;
            }
        }
        if (r == 0 && sig == SIGQUIT)
            quit_dump = NULL; /* the program's own action now, whatever it is */
        sig_router_kick();
    }
    if (act) {
        act_unlock(before);
        sched_idle_block(idle);
        helpers_settle();
    }
    if (r != 0)
        return -1; /* errno: the kernel's */
    if (old)
        *old = prev;
    return 0;
}

void shim_signal_adopt_handlers(void)
{
    for (int sig = 1; sig < 65; sig++) {
        struct sigaction cur;
        if (dispatchable(sig) && preempt_owns(sig)) {
            /* preempt_init kept it aside; through the dispatcher now, as a later sigaction
             * would put it (and preemption moves off the program's signal). */
            preempt_app_action(sig, NULL, &cur);
            if (is_handler(&cur))
                owned_action(sig, &cur, NULL);
            continue;
        }
        if (!dispatchable(sig) || REAL(sigaction)(sig, NULL, &cur) != 0 || !is_handler(&cur) ||
            goshims_own(&cur))
            continue;
        if (sigaction(sig, &cur, NULL) != 0)
            rt_print(2,
                     "goshim: cannot take over the handler of signal %d: it may run on a "
                     "thread other than the one the kernel would choose\n",
                     sig);
    }
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
