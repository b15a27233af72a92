/*
 * goshim run [options] [--] CMD [ARGS...]: CMD on goshim's scheduler.
 *
 * run turns its options into the GOSHIM_ variables the runtime reads
 * (sched/config.def), puts the library first in LD_PRELOAD and execs CMD:
 * nothing of the launcher stays between the caller and the program, so the
 * program's exit status, signals, pid and terminal are its own. Options are
 * checked against the ranges the runtime accepts, so a typo fails here, at
 * once, instead of becoming a warning and a default inside the program.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/launcher.h"
#include "tools/library.h"

/* The runtime's limits (sched/config.def). */
#define MAX_TRACE_MS   3600000
#define MAX_PREEMPT_MS 60000

/* glibc's spare static TLS, none: see sched/tls.c's essay (memory per thread). */
#define LEAN_TUNABLES "glibc.rtld.optional_static_tls=0:glibc.rtld.nns=1"

const char usage_run[] =
    "usage: goshim run [-p N] [--trace MS] [--detail] [--stats] [--chaos SEED]\n"
    "                  [--preempt MS] [--lean-tls] [--] CMD [ARGS...]\n";
const char help_run[] =
    "  run CMD with libgoshim.so preloaded; goshim's exit status is CMD's\n"
    "  -p, --procs N     number of processors P, 1 to 1024 (GOSHIM_PROCS; default: usable CPUs)\n"
    "  --trace MS        print a SCHED line every MS milliseconds (GOSHIM_SCHEDTRACE; 0: off)\n"
    "  --detail          with --trace, one line per P, M and G (GOSHIM_SCHEDDETAIL=1)\n"
    "  --stats           print the scheduler's counters at exit (GOSHIM_STATS=1)\n"
    "  --chaos SEED      randomized run order, steals and preemptions (GOSHIM_CHAOS)\n"
    "  --preempt MS      preemption time slice, fractions allowed, 0: off (GOSHIM_PREEMPT)\n"
    "  --lean-tls        a blocked thread holds one page instead of two: glibc keeps no\n"
    "                    spare static TLS (GLIBC_TUNABLES=" LEAN_TUNABLES "\n"
    "                    first), so a later dlopen of libraries with more than about 144\n"
    "                    bytes of initial-exec TLS fails, as does dlmopen\n";

/* set_lean_tunables puts LEAN_TUNABLES first in GLIBC_TUNABLES: the user's own come after, and win. */
static void set_lean_tunables(void)
{
    const char *old = getenv("GLIBC_TUNABLES");
    char *v;
    if (old && *old ? asprintf(&v, "%s:%s", LEAN_TUNABLES, old) < 0
                    : (v = strdup(LEAN_TUNABLES)) == NULL)
        fail(EXIT_USAGE, "goshim run: out of memory for GLIBC_TUNABLES");
    if (setenv("GLIBC_TUNABLES", v, 1) != 0)
        fail(EXIT_USAGE, "goshim run: setenv GLIBC_TUNABLES: %s", strerror(errno));
    free(v);
}

int cmd_run(const struct command *cmd, int argc, char **argv)
{
    static const struct option_spec opts[] = {
        {"procs", 'p', true}, {"trace", 0, true},     {"detail", 0, false},
        {"stats", 0, false},  {"chaos", 0, true},     {"preempt", 0, true},
        {"help", 'h', false}, {"lean-tls", 0, false}, {NULL, 0, false},
    };
    enum { O_PROCS, O_TRACE, O_DETAIL, O_STATS, O_CHAOS, O_PREEMPT, O_HELP, O_LEAN };
    /* The environment for CMD, by option; NULL: not given. */
    static const char *const names[] = {"GOSHIM_PROCS", "GOSHIM_SCHEDTRACE", "GOSHIM_SCHEDDETAIL",
                                        "GOSHIM_STATS", "GOSHIM_CHAOS",      "GOSHIM_PREEMPT"};
    const char *values[O_HELP] = {NULL};
    const char *val;
    char *lib, *preload;
    bool lean = false;
    int i = 1, k;

    while ((k = next_option(cmd, opts, argc, argv, &i, &val)) >= 0) {
        switch (k) {
        case O_LEAN:
            lean = true;
            continue;
        case O_PROCS:
            if (!parse_uint(val, 1, MAX_PROCS))
                usage_error(cmd, "-p wants a whole number from 1 to %d, not '%s'", MAX_PROCS, val);
            break;
        case O_TRACE:
            if (!parse_uint(val, 0, MAX_TRACE_MS))
                usage_error(cmd, "--trace wants milliseconds from 0 to %d, not '%s'", MAX_TRACE_MS,
                            val);
            break;
        case O_CHAOS:
            if (!parse_uint(val, 0, UINT64_MAX))
                usage_error(cmd, "--chaos wants a seed from 0 to %llu, not '%s'",
                            (unsigned long long)UINT64_MAX, val);
            break;
        case O_PREEMPT:
            if (!parse_msec(val, MAX_PREEMPT_MS))
                usage_error(cmd,
                            "--preempt wants milliseconds from 0 to %d like 10 or 0.5, not '%s'",
                            MAX_PREEMPT_MS, val);
            break;
        case O_DETAIL:
        case O_STATS:
            val = "1";
            break;
        case O_HELP:
            printf("%s%s", cmd->usage, cmd->help);
            return 0;
        }
        values[k] = val;
    }
    if (i >= argc)
        usage_error(cmd, "missing command to run");

    lib = find_library("goshim run");
    preload = preload_value(lib);
    for (k = 0; k < O_HELP; k++) {
        if (values[k] != NULL && setenv(names[k], values[k], 1) != 0)
            fail(EXIT_USAGE, "goshim run: setenv %s: %s", names[k], strerror(errno));
    }
    if (setenv("LD_PRELOAD", preload, 1) != 0)
        fail(EXIT_USAGE, "goshim run: setenv LD_PRELOAD: %s", strerror(errno));
    if (lean)
        set_lean_tunables();
    free(preload);
    free(lib);
    fflush(NULL);
    execvp(argv[i], argv + i);
    return exec_failed("goshim run", argv[i], errno);
}
