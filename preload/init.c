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

static struct sched_config config;

/* Everything after the configuration: the runtime, the main thread made the main G, the
 * signal router; then goshim_started. On the main thread, in the constructor or at the
 * program's first pthread_create. */
static void start_runtime(void)
{
    char why[512];
    if (goshim_unsupported(why, sizeof why)) {
        rt_print(2, "goshim: %s: staying off, the program runs natively\n", why);
        return;
    }
    int err = sched_init(&config);
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
    hooks.deadlock = config.deadlock; /* armed now that the program runs */
    sched_set_hooks(&hooks);
    quit_install();
    /* Started before the dispatcher stands in for a default action: a signal pending since
     * before the exec reaches the router as soon as it is routed, and a dispatcher that saw
     * goshim not started would perform the default action there, on a thread that does not
     * block it (a child that blocks SIGTERM across its exec to ignore it first, as CPython's
     * resource tracker does, died). */
    goshim_started = true;
    sched_chaos_arm();
    shim_signal_adopt_handlers();         /* those the program (or a library's constructor) set */
    shim_route_defaults(sched_sigmask()); /* what main blocks now (exec keeps it) */
    shim_adopt_mask();
}

/* goshim_start_deferred: the program's first pthread_create. Only the main thread can
 * become the main G; a thread goshim does not run (made by glibc for a SIGEV_THREAD timer)
 * creates natively, and the start waits for main. */
static bool start_deferred(void)
{
    if (getpid() != (pid_t)syscall(SYS_gettid))
        return false;
    __atomic_store_n(&goshim_start_deferred, NULL, __ATOMIC_RELEASE);
    start_runtime();
    return goshim_started;
}

/* GOSHIM_STATS of a process that never started the runtime: one line, at its exit. */
static void stats_unstarted(void)
{
    if (!goshim_started)
        rt_print(2, "goshim stats: the runtime did not start: the program created no thread "
                    "(GOSHIM_START=now starts it at load)\n");
}

/*
 * The constructor reads the configuration (its complaints come at once) and, by default,
 * leaves the start to the program's first thread: a process that never makes one runs as
 * natively (the TLS probes, three helper threads and a slice timer saved per process;
 * the fork handlers alone are registered now, to run where fork.c needs them).
 * GOSHIM_SCHEDTRACE (its lines are periodic), chaos (its banner names the seed) and
 * GOSHIM_START=now start it here.
 */
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
    if (goshim_real_init() != 0) {
        rt_print(2, "goshim: some libc functions are missing: staying off\n");
        return;
    }
    sched_config_from_env(&config);
    if (config.start_now || config.schedtrace_ms > 0 || config.chaos) {
        start_runtime();
        return;
    }
    if (sched_atfork_init() != 0 || shim_thread_atfork() != 0 || shim_signal_atfork() != 0) {
        rt_print(2, "goshim: cannot register the fork handlers: starting now\n");
        start_runtime();
        return;
    }
    if (config.stats)
        atexit(stats_unstarted);
    __atomic_store_n(&goshim_start_deferred, start_deferred, __ATOMIC_RELEASE);
}

GOSHIM_EXPORT const char *goshim_version(void)
{
    return GOSHIM_VERSION;
}
