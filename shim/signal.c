/*
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
#include <signal.h>
#include <string.h>

#include "sched/preempt.h"
#include "shim/shim.h"

GOSHIM_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    if (goshim_on && preempt_owns(sig)) {
        preempt_app_action(sig, act, old);
        return 0;
    }
    return REAL(sigaction)(sig, act, old);
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
    return REAL(signal)(sig, handler);
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

GOSHIM_EXPORT int pthread_sigmask(int how, const sigset_t *set, sigset_t *old)
{
    sigset_t copy;
    return REAL(pthread_sigmask)(how, keep_open(how, set, &copy), old);
}

GOSHIM_EXPORT int sigprocmask(int how, const sigset_t *set, sigset_t *old)
{
    sigset_t copy;
    return REAL(sigprocmask)(how, keep_open(how, set, &copy), old);
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
