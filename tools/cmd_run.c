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

/* run's options; the first NVARS set the variable of the same index in vars. */
static const struct option_spec run_opts[] = {
    {"procs", 'p', true}, {"trace", 0, true},     {"detail", 0, false},
    {"stats", 0, false},  {"chaos", 0, true},     {"preempt", 0, true},
    {"help", 'h', false}, {"lean-tls", 0, false}, {NULL, 0, false},
};
enum { O_PROCS, O_TRACE, O_DETAIL, O_STATS, O_CHAOS, O_PREEMPT, O_HELP, O_LEAN };
#define NVARS O_HELP
static const char *const vars[NVARS] = {"GOSHIM_PROCS", "GOSHIM_SCHEDTRACE", "GOSHIM_SCHEDDETAIL",
                                        "GOSHIM_STATS", "GOSHIM_CHAOS",      "GOSHIM_PREEMPT"};

/* check_value exits with a usage error unless val is in the runtime's range for option k. */
static void check_value(const struct command *cmd, int k, const char *val)
{
    if (k == O_PROCS && !parse_uint(val, 1, MAX_PROCS))
        usage_error(cmd, "-p wants a whole number from 1 to %d, not '%s'", MAX_PROCS, val);
    if (k == O_TRACE && !parse_uint(val, 0, MAX_TRACE_MS))
        usage_error(cmd, "--trace wants milliseconds from 0 to %d, not '%s'", MAX_TRACE_MS, val);
    if (k == O_CHAOS && !parse_uint(val, 0, UINT64_MAX))
        usage_error(cmd, "--chaos wants a seed from 0 to %llu, not '%s'",
                    (unsigned long long)UINT64_MAX, val);
    if (k == O_PREEMPT && !parse_msec(val, MAX_PREEMPT_MS))
        usage_error(cmd, "--preempt wants milliseconds from 0 to %d like 10 or 0.5, not '%s'",
                    MAX_PREEMPT_MS, val);
}

/*
 * run_parse reads run's options: each variable's value in values (NULL:
 * not given), --lean-tls in *lean. The index of CMD in argv, or 0 after
 * --help; exits on a usage error.
 */
static int run_parse(const struct command *cmd, int argc, char **argv, const char *values[NVARS],
                     bool *lean)
{
    const char *val;
    int i = 1, k;

    while ((k = next_option(cmd, run_opts, argc, argv, &i, &val)) >= 0) {
        if (k == O_HELP) {
            printf("%s%s", cmd->usage, cmd->help);
            return 0;
        }
        if (k == O_LEAN) {
            *lean = true;
            continue;
        }
        check_value(cmd, k, val);
        values[k] = k == O_DETAIL || k == O_STATS ? "1" : val;
    }
    if (i >= argc)
        usage_error(cmd, "missing command to run");
    return i;
}

int cmd_run(const struct command *cmd, int argc, char **argv)
{
    const char *values[NVARS] = {NULL};
    char *lib, *preload;
    bool lean = false;
    int i = run_parse(cmd, argc, argv, values, &lean);

    if (i == 0)
        return 0;
    lib = find_library("goshim run");
    preload = preload_value(lib);
    for (int k = 0; k < NVARS; k++) {
        if (values[k] != NULL && setenv(vars[k], values[k], 1) != 0)
            fail(EXIT_USAGE, "goshim run: setenv %s: %s", vars[k], strerror(errno));
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
