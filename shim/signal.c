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
 * the router (shim/sigroute.c), which picks the thread. A handler never
 * runs on a scheduler stack. SA_RESETHAND is applied when the program's
 * handler actually runs (the kernel's reset would catch the forward).
 * Signals left at SIG_DFL or SIG_IGN are the kernel's alone: default
 * actions (terminate, core, stop) act as natively.
 *
 * Rejected: making every M block every signal but the router, which
 * would then get all of them; a thread-directed signal (pthread_kill,
 * raise, a fault) must reach the M that runs its thread.
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
#include "shim/sigroute.h"
#include "shim/thread.h"

/* ---- the program's handlers, and the dispatcher installed in their place ---------- */

static struct sigaction app_act[65];
/* shim/sigroute.h says what these are. */
uint64_t sig_dispatched;
uint64_t sig_parked;
pid_t sig_self_pid;
__thread bool sig_on_router __attribute__((tls_model("initial-exec")));

static void dispatch(int sig, siginfo_t *info, void *uc);

/* The kernel's default action for sig, now the program's again (SA_RESETHAND, or changed
 * while the signal was forwarded): raised again with the kernel's disposition. */
static void act_default(int sig)
{
    struct sigaction cur;
    if (REAL(sigaction)(sig, NULL, &cur) == 0 && !(cur.sa_flags & SA_SIGINFO) &&
        cur.sa_handler == SIG_DFL)
        rt_syscall(SYS_tgkill, sig_self_pid, rt_syscall(SYS_gettid, 0, 0, 0), sig);
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
        __atomic_and_fetch(&sig_dispatched, ~(1ULL << (sig - 1)), __ATOMIC_SEQ_CST);
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
    info = (siginfo_t *)sig_unparked(info, &orig);
    if (goshim_vforked || !goshim_started) { /* a vfork child; or before start-up */
        call_app(sig, info, uc);
        errno = saved;
        return;
    }
    struct g *gp = NULL;
    bool on_g = false;
    bool on_m = !sig_on_router && sched_signal_context(&gp, &on_g);
    if (sig_on_router) {
        sig_post(sig, info);
    } else if (!on_m) {
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
    } else {
        sig_post(sig, info);
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
            __atomic_or_fetch(&sig_dispatched, bit, __ATOMIC_SEQ_CST);
        } else {
            preempt_app_action(sig, act, NULL);
            __atomic_and_fetch(&sig_dispatched, ~bit, __ATOMIC_SEQ_CST);
        }
        sig_router_kick();
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
    uint64_t bit = 1ULL << (sig - 1);
    struct sigaction prev;
    if (REAL(sigaction)(sig, NULL, &prev) != 0)
        return -1;
    if (__atomic_load_n(&sig_dispatched, __ATOMIC_SEQ_CST) & bit)
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
            __atomic_or_fetch(&sig_dispatched, bit, __ATOMIC_SEQ_CST);
            __atomic_or_fetch(&sched_routed_signals, bit, __ATOMIC_SEQ_CST);
        } else {
            if (REAL(sigaction)(sig, act, NULL) != 0)
                return -1;
            __atomic_and_fetch(&sig_dispatched, ~bit, __ATOMIC_SEQ_CST);
            __atomic_and_fetch(&sched_routed_signals, ~bit, __ATOMIC_SEQ_CST);
            app_act[sig] = *act;
        }
        sig_router_kick();
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
