/*
 * Start-up of libgoshim.so.
 *
 * The constructor runs on the main thread before main() (LD_PRELOAD
 * libraries' constructors run after libc's and before the program's). It
 * resolves the real functions, reads the GOSHIM_ configuration, starts the
 * runtime and turns the main thread into the main G, keeping its stack and
 * TCB. Only then does goshim_started (goshim_on) become true; until then, and for ever if
 * anything fails or GOSHIM_DISABLE=1, every interposer passes straight
 * through to glibc and the program runs natively.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "preload/detect.h"
#include "preload/goshim.h"
#include "shim/shim.h"
#include "shim/thread.h"

#ifndef GOSHIM_VERSION
#define GOSHIM_VERSION "0.0.0-dev"
#endif

static bool disabled_by_env(void)
{
    const char *v = getenv("GOSHIM_DISABLE");
    if (!v || !strcmp(v, "0") || !*v)
        return false;
    if (strcmp(v, "1") != 0)
        rt_print(2, "goshim: GOSHIM_DISABLE=%s is not valid: want 0 or 1; treating it as 1\n", v);
    return true;
}

__attribute__((constructor)) static void goshim_init(void)
{
    goshim_real_init(); /* interposers pass through to these, even when off */
    if (disabled_by_env())
        return;
    if (getpid() != (pid_t)syscall(SYS_gettid)) {
        rt_print(2, "goshim: loaded on a thread other than the main thread (dlopen?): "
                    "staying off, the program runs natively\n");
        return;
    }
    char why[512];
    if (goshim_unsupported(why, sizeof why)) {
        rt_print(2, "goshim: %s: staying off, the program runs natively\n", why);
        return;
    }
    if (goshim_real_init() != 0) {
        rt_print(2, "goshim: some libc functions are missing: staying off\n");
        return;
    }

    struct sched_config c;
    sched_config_from_env(&c);
    int err = sched_init(&c);
    struct sched_hooks hooks = {.deadlock = DEADLOCK_OFF};
    if (err == 0)
        err = shim_thread_init();
    if (err == 0) {
        shim_thread_hooks(&hooks);
        sched_set_hooks(&hooks);
    }
    if (err == 0)
        err = sched_adopt_main();
    if (err != 0) {
        rt_print(2, "goshim: the runtime did not start (error %d): the program runs natively\n",
                 err);
        return;
    }
    shim_thread_adopted_main();
    if (shim_signal_init() != 0)
        rt_print(2, "goshim: cannot start the signal router: signals sent to the process may "
                    "reach a thread late\n");
    hooks.deadlock = c.deadlock; /* armed now that the program runs */
    sched_set_hooks(&hooks);
    quit_install();
    /* Started before the dispatcher stands in for a default action: a signal pending since
     * before the exec reaches the router as soon as it is routed, and a dispatcher that saw
     * goshim not started would perform the default action there, on a thread that does not
     * block it (a child that blocks SIGTERM across its exec to ignore it first, as CPython's
     * resource tracker does, died). */
    goshim_started = true;
    shim_route_defaults(sched_sigmask()); /* what main blocks from the start (exec keeps it) */
}

GOSHIM_EXPORT const char *goshim_version(void)
{
    return GOSHIM_VERSION;
}
