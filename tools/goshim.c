/*
 * goshim: the launcher for libgoshim.so.
 *
 *   goshim run [options] [--] CMD [ARGS...]      CMD on goshim's scheduler
 *   goshim compare [options] [--] CMD [ARGS...]  CMD natively and under goshim, side by side
 *   goshim stress [options] [--] CMD [ARGS...]   CMD under chaos mode, one seed per run (stress.c)
 *   goshim trace-plot FILE [-o OUT.png]          GOSHIM_SCHEDTRACE output as a chart
 *
 * run turns its options into the GOSHIM_ variables the runtime reads
 * (sched/config.def), puts the library first in LD_PRELOAD and execs CMD:
 * nothing of the launcher stays between the caller and the program, so the
 * program's exit status, signals, pid and terminal are its own. Options are
 * checked against the ranges the runtime accepts, so a typo fails here, at
 * once, instead of becoming a warning and a default inside the program.
 *
 * The library is $GOSHIM_LIB if set, else libgoshim.so in the launcher's
 * own directory (the build tree: build/goshim beside build/libgoshim.so),
 * else ../lib/libgoshim.so from there (installed: PREFIX/bin/goshim and
 * PREFIX/lib/libgoshim.so). The directory comes from /proc/self/exe, so a
 * PATH lookup or a symlink to the launcher changes nothing. The path put in
 * LD_PRELOAD is absolute: the program may chdir, and its children inherit
 * it. A sanitizer build (GOSHIM_PRELOAD_FIRST) puts its runtime first.
 *
 * compare runs CMD RUNS times in each mode, alternating, so that drift of
 * the machine (clock frequency, caches, other load) falls on both modes,
 * and reports medians and ranges: wall time; CPU time, peak RSS and context
 * switches from wait4's rusage; and the peak number of OS threads, sampled
 * from /proc every millisecond while CMD runs (a pidfd wakes the sampler
 * the moment CMD exits, so sampling adds no wall time). Rejected: reading
 * /proc/PID/task once at the end (the threads are gone by then) and
 * counting clone() calls with ptrace (slows down exactly what is measured).
 *
 * trace-plot reads Go's schedtrace format, which the runtime prints
 * (sched/trace.c), and so does a Go program under GODEBUG=schedtrace=N:
 *
 *   SCHED 50ms: gomaxprocs=2 idleprocs=0 threads=3 spinningthreads=0 idlethreads=0 runqueue=0 [3 0]
 *
 * With SCHEDDETAIL the bracket is missing and "  P0: ... runqsize=N" lines
 * follow instead; those give the local run queues. Unknown keys are
 * skipped, other lines (the program's output, "goshim stats:") ignored.
 * The chart is drawn by gnuplot, fed through a pipe.
 *
 * Exit statuses: 2 for bad arguments or when libgoshim.so cannot be found;
 * as in a shell, 127 when CMD is not found and 126 when it cannot be
 * executed; otherwise run exits with CMD's own status, compare with 0
 * (every run exited 0 in both modes) or 1, stress with 0 (every seed
 * passed) or 1, trace-plot with 0 or 1.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tools/launcher.h"

#ifndef GOSHIM_VERSION
#define GOSHIM_VERSION "0.0.0-dev"
#endif

#define GNUPLOT_HINT "sudo apt-get install gnuplot-nox"

/* The runtime's limits (sched/config.def). */
#define MAX_TRACE_MS   3600000
#define MAX_PREEMPT_MS 60000
#define MAX_RUNS       10000

/* compare: how often the thread count is sampled, and how far the process tree is walked. */
#define SAMPLE_MS     1
#define TREE_DEPTH    8
#define TREE_PROCS    256
#define TREE_CHILDREN 64

/* compare's measurements, in table order. */
enum { M_WALL, M_CPU, M_RSS, M_THREADS, M_VCSW, M_IVCSW, M_STATUS, NMETRICS };

/* One run of CMD: the metrics, and how it ended. */
struct run_result {
    double v[NMETRICS];
    int wstatus;
};

/* Median and range of one metric in one mode (0 native, 1 goshim). */
struct summary {
    double med[2], lo[2], hi[2];
};

/* One SCHED line of a trace, with the local run queues of the P lines after it. */
struct trace_point {
    double t_ms;
    long gomaxprocs, idleprocs, threads, spinning, idlethreads, runqueue, local;
    bool has_spinning, has_idlethreads, has_local, local_from_bracket;
    long line;
};

enum { PLOT_OK, PLOT_FAILED, PLOT_MISSING };

static int cmd_run(const struct command *cmd, int argc, char **argv);
static int cmd_compare(const struct command *cmd, int argc, char **argv);
static int cmd_trace_plot(const struct command *cmd, int argc, char **argv);
static bool parse_msec(const char *s, double max);
static bool find_in_path(const char *name);
static long read_threads(pid_t pid);
static long tree_threads(pid_t pid, int depth, int *budget);
static int run_measured(char **argv, const char *preload, const char *procs, bool show,
                        struct run_result *res, int *exec_errno);
static int cmp_double(const void *a, const void *b);
static int summarize(const struct run_result *rr, int n, int metric, double *med, double *lo,
                     double *hi);
static const char *fmt_num(char *buf, size_t len, double v);
static void write_table(FILE *f, const struct summary *sum, bool status_same);
static void describe_statuses(FILE *f, const struct run_result *rr, int n);
static int write_compare_files(const char *dir, const struct summary *sum, bool status_same,
                               int runs, char **argv);
static void gp_quote(FILE *f, const char *s);
static int run_gnuplot(const char *who, const char *dir, const char *script_file,
                       const char *script_text, size_t script_len);
static const char *parse_sched_line(char *s, struct trace_point *tp);
static bool parse_p_line(const char *s, long *runqsize);
static int cmp_point(const void *a, const void *b);
static char *default_png(const char *file);
static char *trace_script(const struct trace_point *pts, size_t n, const char *title,
                          const char *out, size_t *len);

/* ---- usage ------------------------------------------------------------------------------- */

/* glibc's spare static TLS, none: see sched/tls.c's essay (memory per thread). */
#define LEAN_TUNABLES "glibc.rtld.optional_static_tls=0:glibc.rtld.nns=1"

static const char intro[] =
    "goshim runs an unmodified pthread program on a Go-style G/M/P scheduler\n"
    "(LD_PRELOAD=libgoshim.so): each thread becomes a task, N processors run them.\n"
    "\n";

static const char usage_run[] =
    "usage: goshim run [-p N] [--trace MS] [--detail] [--stats] [--chaos SEED]\n"
    "                  [--preempt MS] [--lean-tls] [--] CMD [ARGS...]\n";
static const char help_run[] =
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

static const char usage_compare[] =
    "usage: goshim compare [-n RUNS] [-p N] [--out DIR] [--show-output] [--] CMD [ARGS...]\n";
static const char help_compare[] =
    "  run CMD natively and under goshim, alternately, and print a Markdown table of\n"
    "  medians (min-max): wall time, CPU time, peak RSS, peak OS threads, context switches\n"
    "  and exit status\n"
    "  -n, --runs RUNS   runs in each mode (default 5)\n"
    "  -p, --procs N     GOSHIM_PROCS for the goshim runs\n"
    "  --out DIR         also write DIR/compare.md, compare.dat, compare.gp and compare.png\n"
    "  --show-output     keep CMD's stdout and stderr (default: /dev/null)\n";

static const char usage_plot[] = "usage: goshim trace-plot FILE [-o OUT.png]\n";
static const char help_plot[] =
    "  chart GOSHIM_SCHEDTRACE output (FILE, or - for stdin) as a PNG: run queues,\n"
    "  idle processors and OS threads over time\n"
    "  -o, --output OUT  the PNG to write (default: FILE with its extension replaced by .png)\n";

static const char outro[] =
    "\n"
    "The library is $GOSHIM_LIB, else libgoshim.so beside this program, else\n"
    "../lib/libgoshim.so from its directory.\n"
    "Exit status: 2 for bad arguments or no library; 127 if CMD is not found, 126 if it\n"
    "cannot be executed; else run: CMD's status; compare: 0 if every run exited 0 in both\n"
    "modes, else 1; stress: 0 if every run passed, else 1; trace-plot: 0, or 1 for\n"
    "unreadable or malformed input.\n"
    "See goshim(1).\n";

static const struct command commands[] = {
    {"run", usage_run, help_run, cmd_run},
    {"compare", usage_compare, help_compare, cmd_compare},
    {"stress", usage_stress, help_stress, cmd_stress},
    {"trace-plot", usage_plot, help_plot, cmd_trace_plot},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void print_help(FILE *f)
{
    fputs(intro, f);
    for (size_t k = 0; k < NCOMMANDS; k++)
        fputs(commands[k].usage, f);
    fputs("       goshim --help | --version\n", f);
    for (size_t k = 0; k < NCOMMANDS; k++) {
        fprintf(f, "\n%s:\n", commands[k].name);
        fputs(commands[k].help, f);
    }
    fputs(outro, f);
}

/*
 * usage_error prints "goshim CMD: message" and the command's usage (every
 * command's when cmd is NULL) on stderr, and exits 2.
 */
void usage_error(const struct command *cmd, const char *fmt, ...)
{
    va_list ap;

    fflush(stdout);
    fprintf(stderr, "goshim%s%s: ", cmd ? " " : "", cmd ? cmd->name : "");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    if (cmd != NULL) {
        fputs(cmd->usage, stderr);
    } else {
        for (size_t k = 0; k < NCOMMANDS; k++)
            fputs(commands[k].usage, stderr);
        fputs("       goshim --help | --version\n", stderr);
    }
    fputs("Run 'goshim --help' for the options.\n", stderr);
    exit(EXIT_USAGE);
}

/* fail prints the message (one line, newline added) on stderr and exits with status. */
void fail(int status, const char *fmt, ...)
{
    va_list ap;

    fflush(stdout);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(status);
}

/*
 * next_option reads argv[*i]: the index of the option in opts (its value,
 * if it takes one, in *val: "--name VALUE", "--name=VALUE", "-xVALUE" or
 * "-x VALUE"), OPT_OPERAND at an operand (not consumed), or OPT_END after
 * "--" (consumed) or at the end. An unknown option, a missing value or a
 * value given to a flag is a usage error.
 */
int next_option(const struct command *cmd, const struct option_spec *opts, int argc, char **argv,
                int *i, const char **val)
{
    const char *a;

    *val = NULL;
    if (*i >= argc)
        return OPT_END;
    a = argv[*i];
    if (strcmp(a, "--") == 0) {
        (*i)++;
        return OPT_END;
    }
    if (a[0] != '-' || a[1] == '\0')
        return OPT_OPERAND;
    for (int k = 0; opts[k].name != NULL; k++) {
        const struct option_spec *o = &opts[k];

        if (a[1] == '-') {
            size_t len = strlen(o->name);

            if (strncmp(a + 2, o->name, len) != 0 || (a[2 + len] != '\0' && a[2 + len] != '='))
                continue;
            (*i)++;
            if (a[2 + len] == '=') {
                if (!o->has_value)
                    usage_error(cmd, "option '--%s' takes no value", o->name);
                *val = a + 3 + len;
            } else if (o->has_value) {
                if (*i >= argc)
                    usage_error(cmd, "option '--%s' needs a value", o->name);
                *val = argv[(*i)++];
            }
            return k;
        }
        if (o->letter != 0 && a[1] == o->letter) {
            (*i)++;
            if (!o->has_value) {
                if (a[2] != '\0')
                    usage_error(cmd, "unknown option '%s'", a);
            } else if (a[2] != '\0') {
                *val = a + 2;
            } else if (*i >= argc) {
                usage_error(cmd, "option '-%c' needs a value", o->letter);
            } else {
                *val = argv[(*i)++];
            }
            return k;
        }
    }
    usage_error(cmd, "unknown option '%s'", a);
}

/* s is a whole decimal number (digits only: no sign, blanks or 0x) in [min, max]. */
bool parse_uint(const char *s, unsigned long long min, unsigned long long max)
{
    unsigned long long v;

    if (*s == '\0' || strspn(s, "0123456789") != strlen(s))
        return false;
    errno = 0;
    v = strtoull(s, NULL, 10);
    return errno == 0 && v >= min && v <= max;
}

/* s is a number of milliseconds, DIGITS or DIGITS.DIGITS, at most max. */
static bool parse_msec(const char *s, double max)
{
    size_t whole = strspn(s, "0123456789");

    if (whole == 0)
        return false;
    if (s[whole] == '.') {
        size_t frac = strspn(s + whole + 1, "0123456789");

        if (frac == 0 || s[whole + 1 + frac] != '\0')
            return false;
    } else if (s[whole] != '\0') {
        return false;
    }
    return strtod(s, NULL) <= max;
}

/* ---- finding and preloading the library --------------------------------------------------- */

/*
 * find_library returns the absolute path of libgoshim.so (malloc'd), from
 * $GOSHIM_LIB, beside the launcher, or in ../lib from it. If there is none
 * it says where it looked and exits 2.
 */
char *find_library(const char *who)
{
    const char *env = getenv("GOSHIM_LIB");
    char exe[PATH_MAX], *slash, *path;
    ssize_t n;

    if (env != NULL && *env != '\0') {
        path = realpath(env, NULL);
        if (path == NULL || access(path, R_OK) != 0)
            fail(EXIT_USAGE, "%s: GOSHIM_LIB=%s: %s", who, env, strerror(errno));
        return path;
    }
    n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n < 0)
        fail(EXIT_USAGE, "%s: cannot find libgoshim.so: /proc/self/exe: %s (set GOSHIM_LIB)", who,
             strerror(errno));
    exe[n] = '\0';
    slash = strrchr(exe, '/');
    if (slash != NULL)
        *slash = '\0';
    for (int k = 0; k < 2; k++) {
        char cand[PATH_MAX + 32];

        snprintf(cand, sizeof cand, k == 0 ? "%s/libgoshim.so" : "%s/../lib/libgoshim.so", exe);
        if (access(cand, R_OK) == 0 && (path = realpath(cand, NULL)) != NULL)
            return path;
    }
    fail(EXIT_USAGE, "%s: libgoshim.so not found in %s or %s/../lib (set GOSHIM_LIB to its path)",
         who, exe, exe);
}

/*
 * preload_value returns (malloc'd) the LD_PRELOAD for CMD: the library
 * first, then whatever LD_PRELOAD held (ld.so takes colons or spaces).
 */
char *preload_value(const char *lib)
{
    const char *old = getenv("LD_PRELOAD");
    const char *first = "";
    char *v;

#ifdef GOSHIM_PRELOAD_FIRST
    first = GOSHIM_PRELOAD_FIRST ":"; /* a sanitizer runtime must precede the library */
#endif
    if (asprintf(&v, "%s%s%s%s", first, lib, old && *old ? ":" : "", old && *old ? old : "") < 0)
        fail(EXIT_USAGE, "goshim: out of memory");
    return v;
}

/* exec_failed reports a failed exec of file as a shell would, and returns the status to exit with. */
int exec_failed(const char *who, const char *file, int err)
{
    if (err == ENOENT && strchr(file, '/') == NULL) {
        fprintf(stderr, "%s: %s: command not found\n", who, file);
        return EXIT_NOTFOUND;
    }
    fprintf(stderr, "%s: %s: %s\n", who, file, strerror(err));
    return err == ENOENT ? EXIT_NOTFOUND : EXIT_NOEXEC;
}

/* Whether an executable file called name is in $PATH. */
static bool find_in_path(const char *name)
{
    const char *path = getenv("PATH");
    char *copy, *save = NULL;
    bool found = false;

    copy = strdup(path != NULL && *path != '\0' ? path : "/usr/local/bin:/usr/bin:/bin");
    if (copy == NULL)
        return false;
    for (char *dir = strtok_r(copy, ":", &save); dir != NULL && !found;
         dir = strtok_r(NULL, ":", &save)) {
        char file[PATH_MAX];
        struct stat st;

        snprintf(file, sizeof file, "%s/%s", dir, name);
        found = stat(file, &st) == 0 && S_ISREG(st.st_mode) && access(file, X_OK) == 0;
    }
    free(copy);
    return found;
}

/* Whether cmd can be executed: a path to an executable file, or such a file in $PATH. */
bool find_command(const char *cmd)
{
    if (strchr(cmd, '/') != NULL)
        return access(cmd, X_OK) == 0;
    if (find_in_path(cmd))
        return true;
    errno = ENOENT;
    return false;
}

/* ---- run --------------------------------------------------------------------------------- */

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

static int cmd_run(const struct command *cmd, int argc, char **argv)
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

/* ---- compare ----------------------------------------------------------------------------- */

static const struct {
    const char *label; /* table row */
    const char *key;   /* compare.dat, no blanks */
} metrics[NMETRICS] = {
    [M_WALL] = {"wall time (ms)", "wall_ms"},
    [M_CPU] = {"CPU user+sys (ms)", "cpu_ms"},
    [M_RSS] = {"peak RSS (MiB)", "maxrss_mib"},
    [M_THREADS] = {"peak OS threads", "threads"},
    [M_VCSW] = {"voluntary context switches", "nvcsw"},
    [M_IVCSW] = {"involuntary context switches", "nivcsw"},
    [M_STATUS] = {"exit status", "status"},
};

double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The Threads: line of /proc/PID/status; 0 if the process is gone. */
static long read_threads(pid_t pid)
{
    static char buf[8192];
    char path[64];
    size_t len = 0;
    ssize_t n;
    const char *p;
    int fd;

    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    while (len < sizeof buf - 1 && (n = read(fd, buf + len, sizeof buf - 1 - len)) > 0)
        len += (size_t)n;
    close(fd);
    buf[len] = '\0';
    p = strstr(buf, "\nThreads:");
    return p != NULL ? strtol(p + 9, NULL, 10) : 0;
}

/*
 * tree_threads counts the OS threads of pid and of its descendants, found
 * through the children file of each process's main thread (children forked
 * by its other threads are not seen), at most TREE_DEPTH levels and *budget
 * processes deep.
 */
static long tree_threads(pid_t pid, int depth, int *budget)
{
    static char buf[4096];
    pid_t kids[TREE_CHILDREN];
    int nkids = 0, fd;
    long n = read_threads(pid);
    char path[64], *p;
    ssize_t len;

    if (n <= 0 || depth >= TREE_DEPTH)
        return n;
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)pid, (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return n;
    len = read(fd, buf, sizeof buf - 1);
    close(fd);
    buf[len > 0 ? len : 0] = '\0';
    for (p = buf; nkids < TREE_CHILDREN;) {
        char *end;
        long kid = strtol(p, &end, 10);

        if (end == p)
            break;
        kids[nkids++] = (pid_t)kid;
        p = end;
    }
    for (int k = 0; k<nkids && * budget> 0; k++) {
        (*budget)--;
        n += tree_threads(kids[k], depth + 1, budget);
    }
    return n;
}

/*
 * run_measured runs argv to completion, natively (preload NULL) or with
 * LD_PRELOAD=preload and GOSHIM_PROCS=procs (if not NULL), stdin from
 * /dev/null and, unless show, stdout and stderr to /dev/null. Returns 0
 * with the metrics in res, or -1: the fork failed (errno), or the exec did
 * (its errno in *exec_errno).
 */
static int run_measured(char **argv, const char *preload, const char *procs, bool show,
                        struct run_result *res, int *exec_errno)
{
    struct rusage ru;
    int errp[2], status, pidfd = -1, err = 0;
    long peak = 0;
    double t0;
    pid_t pid;
    ssize_t n;

    *exec_errno = 0;
    if (pipe2(errp, O_CLOEXEC) != 0)
        return -1;
    fflush(NULL);
    t0 = now_ms();
    pid = fork();
    if (pid < 0) {
        close(errp[0]);
        close(errp[1]);
        return -1;
    }
    if (pid == 0) {
        int null = open("/dev/null", O_RDWR | O_CLOEXEC);

        close(errp[0]);
        if (null >= 0) {
            dup2(null, STDIN_FILENO);
            if (!show) {
                dup2(null, STDOUT_FILENO);
                dup2(null, STDERR_FILENO);
            }
        }
        if (preload != NULL) {
            setenv("LD_PRELOAD", preload, 1);
            if (procs != NULL)
                setenv("GOSHIM_PROCS", procs, 1);
        }
        execvp(argv[0], argv);
        err = errno;
        if (write(errp[1], &err, sizeof err) < 0)
            _exit(EXIT_NOEXEC);
        _exit(EXIT_NOTFOUND);
    }
    close(errp[1]);

#ifdef SYS_pidfd_open
    pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
#endif
    for (;;) {
        int budget = TREE_PROCS;
        long t = tree_threads(pid, 0, &budget);

        if (t > peak)
            peak = t;
        if (pidfd >= 0) {
            struct pollfd pfd = {.fd = pidfd, .events = POLLIN};
            int r = poll(&pfd, 1, SAMPLE_MS);

            if (r > 0)
                break;
            if (r < 0 && errno != EINTR) {
                close(pidfd); /* sample by waitpid polling instead */
                pidfd = -1;
            }
        } else {
            siginfo_t si = {0};
            struct timespec ts = {0, SAMPLE_MS * 1000000L};

            if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid)
                break;
            nanosleep(&ts, NULL);
        }
    }
    while (wait4(pid, &status, 0, &ru) < 0 && errno == EINTR)
        ;
    res->v[M_WALL] = now_ms() - t0;
    if (pidfd >= 0)
        close(pidfd);
    while ((n = read(errp[0], &err, sizeof err)) < 0 && errno == EINTR)
        ;
    close(errp[0]);
    if (n == (ssize_t)sizeof err) {
        *exec_errno = err;
        return -1;
    }
    res->v[M_CPU] = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
                    (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
    res->v[M_RSS] = (double)ru.ru_maxrss / 1024.0;
    res->v[M_THREADS] = (double)peak;
    res->v[M_VCSW] = (double)ru.ru_nvcsw;
    res->v[M_IVCSW] = (double)ru.ru_nivcsw;
    res->v[M_STATUS] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    res->wstatus = status;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* summarize computes median, minimum and maximum of metric over rr[0..n-1]; 0, or -1 (no memory). */
static int summarize(const struct run_result *rr, int n, int metric, double *med, double *lo,
                     double *hi)
{
    double *v = malloc((size_t)n * sizeof *v);

    if (v == NULL)
        return -1;
    for (int k = 0; k < n; k++)
        v[k] = rr[k].v[metric];
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    *med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    *lo = v[0];
    *hi = v[n - 1];
    free(v);
    return 0;
}

/* fmt_num prints v with as many decimals as its size deserves: 3, 12.5, 1.23. */
static const char *fmt_num(char *buf, size_t len, double v)
{
    if (v > -1e15 && v < 1e15 && v == (double)(long long)v)
        snprintf(buf, len, "%lld", (long long)v);
    else if (v >= 100 || v <= -100)
        snprintf(buf, len, "%.0f", v);
    else if (v >= 10 || v <= -10)
        snprintf(buf, len, "%.1f", v);
    else
        snprintf(buf, len, "%.2f", v);
    return buf;
}

static void write_table(FILE *f, const struct summary *sum, bool status_same)
{
    fputs("| metric | native median (min–max) | goshim median (min–max) | native/goshim |\n", f);
    fputs("| --- | ---: | ---: | ---: |\n", f);
    for (int m = 0; m < NMETRICS; m++) {
        const struct summary *s = &sum[m];
        char a[32], b[32], c[32], d[32], e[32], g[32], ratio[32];
        double r = s->med[1] != 0 ? s->med[0] / s->med[1] : 0;

        if (m == M_STATUS)
            snprintf(ratio, sizeof ratio, "%s", status_same ? "same" : "**DIFFERS**");
        else if (s->med[1] != 0)
            snprintf(ratio, sizeof ratio, "%.*fx", r >= 100 ? 0 : r >= 10 ? 1 : 2, r);
        else
            snprintf(ratio, sizeof ratio, "n/a");
        fprintf(f, "| %s | %s (%s–%s) | %s (%s–%s) | %s |\n", metrics[m].label,
                fmt_num(a, sizeof a, s->med[0]), fmt_num(b, sizeof b, s->lo[0]),
                fmt_num(c, sizeof c, s->hi[0]), fmt_num(d, sizeof d, s->med[1]),
                fmt_num(e, sizeof e, s->lo[1]), fmt_num(g, sizeof g, s->hi[1]), ratio);
    }
}

/* sig_name returns "SIGSEGV" for SIGSEGV, "signal 40" for signals without a name. */
const char *sig_name(char *buf, size_t len, int sig)
{
    const char *abbrev = sigabbrev_np(sig);

    if (abbrev != NULL)
        snprintf(buf, len, "SIG%s", abbrev);
    else
        snprintf(buf, len, "signal %d", sig);
    return buf;
}

/* describe_statuses prints how the n runs ended: "0 in 4 runs, killed by SIGSEGV in 1 run". */
static void describe_statuses(FILE *f, const struct run_result *rr, int n)
{
    for (int k = 0; k < n; k++) {
        int count = 0, st = rr[k].wstatus;
        bool seen = false;
        char sig[32];

        for (int j = 0; j < k; j++)
            seen = seen || rr[j].wstatus == st;
        if (seen)
            continue;
        for (int j = k; j < n; j++)
            count += rr[j].wstatus == st;
        if (WIFEXITED(st))
            fprintf(f, "%sexit %d", k ? ", " : "", WEXITSTATUS(st));
        else
            fprintf(f, "%skilled by %s", k ? ", " : "", sig_name(sig, sizeof sig, WTERMSIG(st)));
        fprintf(f, " in %d run%s", count, count == 1 ? "" : "s");
    }
}

/* mkdir -p dir: 0, or -1 with errno set. */
int mkdir_p(const char *dir)
{
    char *copy = strdup(dir);
    int rc = 0;

    if (copy == NULL)
        return -1;
    for (char *p = copy + 1; rc == 0; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;

        *p = '\0';
        if (mkdir(copy, 0777) != 0 && errno != EEXIST)
            rc = -1;
        *p = c;
        if (c == '\0')
            break;
    }
    free(copy);
    if (rc == 0) {
        struct stat st;

        if (stat(dir, &st) != 0)
            return -1;
        if (!S_ISDIR(st.st_mode)) {
            errno = ENOTDIR;
            return -1;
        }
    }
    return rc;
}

/* gp_quote writes s as a gnuplot single-quoted string ('' stands for '). */
static void gp_quote(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'')
            fputc('\'', f);
        if (*s != '\n')
            fputc(*s, f);
    }
    fputc('\'', f);
}

/*
 * write_compare_files writes DIR/compare.md (the table), compare.dat (one
 * line per metric: median, min, max natively, then under goshim) and
 * compare.gp (the gnuplot script for compare.png, run in DIR). 0, or -1
 * after saying which file could not be written.
 */
static int write_compare_files(const char *dir, const struct summary *sum, bool status_same,
                               int runs, char **argv)
{
    static const char *const names[] = {"compare.md", "compare.dat", "compare.gp"};

    for (int k = 0; k < 3; k++) {
        char path[PATH_MAX];
        FILE *f;

        snprintf(path, sizeof path, "%s/%s", dir, names[k]);
        f = fopen(path, "we");
        if (f == NULL) {
            fprintf(stderr, "goshim compare: cannot write %s: %s\n", path, strerror(errno));
            return -1;
        }
        if (k == 0) {
            write_table(f, sum, status_same);
        } else if (k == 1) {
            fprintf(f, "# goshim compare: %d runs in each mode of:", runs);
            for (char **a = argv; *a; a++)
                fprintf(f, " %s", *a);
            fputs("\n# metric native_median native_min native_max goshim_median goshim_min "
                  "goshim_max\n",
                  f);
            for (int m = 0; m < NMETRICS; m++)
                fprintf(f, "\"%s\" %.6g %.6g %.6g %.6g %.6g %.6g\n", metrics[m].label,
                        sum[m].med[0], sum[m].lo[0], sum[m].hi[0], sum[m].med[1], sum[m].lo[1],
                        sum[m].hi[1]);
        } else {
            const char *base = strrchr(argv[0], '/');

            fputs("# goshim compare: compare.png from compare.dat; run 'gnuplot compare.gp' here.\n"
                  "set terminal pngcairo size 1200,720 noenhanced font 'sans,10'\n"
                  "set output 'compare.png'\n",
                  f);
            fprintf(f, "set multiplot layout 2,3 title ");
            gp_quote(f, base ? base + 1 : argv[0]);
            fprintf(f, ".' natively and under goshim: median of %d runs, bar: min to max'\n", runs);
            fputs("set style fill solid 0.75 border -1\n"
                  "set boxwidth 0.6\n"
                  "set xrange [0.4:2.6]\n"
                  "set xtics ('native' 1, 'goshim' 2) nomirror scale 0\n"
                  "set grid ytics\n"
                  "unset key\n"
                  "label(v) = v >= 100 ? sprintf('%.0f', v) : sprintf('%.3g', v)\n",
                  f);
            for (int m = 0; m < M_STATUS; m++) {
                static const char *const colour[2] = {"#4e79a7", "#f28e2b"};
                double top = sum[m].hi[0] > sum[m].hi[1] ? sum[m].hi[0] : sum[m].hi[1];

                fprintf(f, "set title '%s'\nset yrange [0:%.6g]\n", metrics[m].label,
                        top > 0 ? top * 1.15 : 1);
                fputs("plot ", f);
                for (int mode = 0; mode < 2; mode++) {
                    int c = 2 + 3 * mode; /* the median's column; min and max follow */

                    fprintf(f,
                            "%s'compare.dat' every ::%d::%d using (%d):%d with boxes lc rgb '%s'",
                            mode ? ", \\\n     " : "", m, m, mode + 1, c, colour[mode]);
                    fprintf(f,
                            ", \\\n     '' every ::%d::%d using (%d):%d:%d:%d with yerrorbars "
                            "lc rgb 'black' pt 7 ps 0.4",
                            m, m, mode + 1, c, c + 1, c + 2);
                    fprintf(f,
                            ", \\\n     '' every ::%d::%d using (%d):%d:(label($%d)) with labels "
                            "offset 0,0.8",
                            m, m, mode + 1, c + 2, c);
                }
                fputc('\n', f);
            }
            fputs("unset multiplot\n", f);
        }
        if (ferror(f) | (fclose(f) != 0)) {
            fprintf(stderr, "goshim compare: cannot write %s: %s\n", path, strerror(errno));
            return -1;
        }
    }
    return 0;
}

struct compare_opts {
    const char *procs, *outdir;
    bool show;
    int runs;
    char **cmdv;
};

/* goshim compare's options; exits on a usage error, returns 1 after --help. */
static int compare_parse(const struct command *cmd, int argc, char **argv, struct compare_opts *o)
{
    static const struct option_spec opts[] = {
        {"runs", 'n', true},       {"procs", 'p', true}, {"out", 0, true},
        {"show-output", 0, false}, {"help", 'h', false}, {NULL, 0, false},
    };
    enum { O_RUNS, O_PROCS, O_OUT, O_SHOW, O_HELP };
    const char *val;
    int i = 1, k;

    *o = (struct compare_opts){.runs = 5};
    while ((k = next_option(cmd, opts, argc, argv, &i, &val)) >= 0) {
        switch (k) {
        case O_RUNS:
            if (!parse_uint(val, 1, MAX_RUNS))
                usage_error(cmd, "-n wants a whole number from 1 to %d, not '%s'", MAX_RUNS, val);
            o->runs = atoi(val);
            break;
        case O_PROCS:
            if (!parse_uint(val, 1, MAX_PROCS))
                usage_error(cmd, "-p wants a whole number from 1 to %d, not '%s'", MAX_PROCS, val);
            o->procs = val;
            break;
        case O_OUT:
            if (*val == '\0')
                usage_error(cmd, "--out wants a directory");
            o->outdir = val;
            break;
        case O_SHOW:
            o->show = true;
            break;
        case O_HELP:
            printf("%s%s", cmd->usage, cmd->help);
            return 1;
        }
    }
    if (i >= argc)
        usage_error(cmd, "missing command to compare");
    o->cmdv = argv + i;
    return 0;
}

/* Run the command o->runs times in each mode, alternating, so that a
 * drift of the machine weighs on both. 0, or the exit status to return. */
static int compare_run(const struct compare_opts *o, struct run_result *rr[2])
{
    char *lib = find_library("goshim compare");
    char *preload = preload_value(lib);
    int rc = 0;

    free(lib);
    for (int r = 0; r < o->runs && rc == 0; r++) {
        for (int mode = 0; mode < 2 && rc == 0; mode++) {
            int exec_errno;

            if (run_measured(o->cmdv, mode ? preload : NULL, o->procs, o->show, &rr[mode][r],
                             &exec_errno) == 0)
                continue;
            if (exec_errno != 0) {
                rc = exec_failed("goshim compare", o->cmdv[0], exec_errno);
            } else {
                fprintf(stderr, "goshim compare: fork: %s\n", strerror(errno));
                rc = 1;
            }
        }
    }
    free(preload);
    return rc;
}

/* Say on stderr how the exit statuses went when they differ between the
 * modes or are not all 0 (then 1, else 0). */
static int compare_statuses(struct run_result *rr[2], int runs, bool status_same)
{
    bool all_zero = true, sets_differ = false;

    for (int mode = 0; mode < 2; mode++)
        for (int r = 0; r < runs; r++)
            all_zero = all_zero && rr[mode][r].wstatus == 0;
    if (status_same && all_zero)
        return 0;
    for (int r = 0; r < runs; r++) {
        bool in_other = false;

        for (int q = 0; q < runs; q++)
            in_other = in_other || rr[1][q].wstatus == rr[0][r].wstatus;
        sets_differ = sets_differ || !in_other;
    }
    fputs(!status_same && sets_differ ? "goshim compare: EXIT STATUS DIFFERS: "
                                      : "goshim compare: the command failed: ",
          stderr);
    fputs("native: ", stderr);
    describe_statuses(stderr, rr[0], runs);
    fputs("; goshim: ", stderr);
    describe_statuses(stderr, rr[1], runs);
    fputs("\n", stderr);
    return 1;
}

/* --out: the table, the data and the gnuplot script, and the plot if gnuplot is there. */
static int compare_write(const struct compare_opts *o, const struct summary *sum, bool status_same)
{
    if (write_compare_files(o->outdir, sum, status_same, o->runs, o->cmdv) != 0)
        return 1;
    switch (run_gnuplot("goshim compare", o->outdir, "compare.gp", NULL, 0)) {
    case PLOT_OK:
        fprintf(stderr,
                "goshim compare: wrote %s/compare.md, compare.dat, compare.gp, compare.png\n",
                o->outdir);
        return 0;
    case PLOT_MISSING:
        fprintf(stderr, "goshim compare: wrote %s/compare.md, compare.dat, compare.gp\n",
                o->outdir);
        return 0;
    default:
        return 1;
    }
}

static int cmd_compare(const struct command *cmd, int argc, char **argv)
{
    struct compare_opts o;
    struct run_result *rr[2];
    struct summary sum[NMETRICS];
    bool status_same = true;

    if (compare_parse(cmd, argc, argv, &o) != 0)
        return 0;
    if (o.outdir != NULL && mkdir_p(o.outdir) != 0)
        fail(EXIT_USAGE, "goshim compare: --out %s: %s", o.outdir, strerror(errno));
    rr[0] = calloc((size_t)o.runs, sizeof *rr[0]);
    rr[1] = calloc((size_t)o.runs, sizeof *rr[1]);
    if (rr[0] == NULL || rr[1] == NULL)
        fail(EXIT_USAGE, "goshim compare: out of memory");
    int rc = compare_run(&o, rr);
    if (rc != 0) {
        free(rr[0]);
        free(rr[1]);
        return rc;
    }
    for (int m = 0; m < NMETRICS; m++)
        for (int mode = 0; mode < 2; mode++)
            if (summarize(rr[mode], o.runs, m, &sum[m].med[mode], &sum[m].lo[mode],
                          &sum[m].hi[mode]) != 0)
                fail(EXIT_USAGE, "goshim compare: out of memory");
    for (int mode = 0; mode < 2; mode++)
        for (int r = 0; r < o.runs; r++)
            status_same = status_same && rr[mode][r].wstatus == rr[0][0].wstatus;
    write_table(stdout, sum, status_same);
    fflush(stdout);
    rc = compare_statuses(rr, o.runs, status_same);
    free(rr[0]);
    free(rr[1]);
    if (o.outdir != NULL && compare_write(&o, sum, status_same) != 0)
        rc = 1;
    return rc;
}

/* ---- gnuplot ----------------------------------------------------------------------------- */

/*
 * run_gnuplot runs gnuplot in dir (NULL: here) on script_file, or on
 * script_text through a pipe. PLOT_OK; PLOT_MISSING (said, with the
 * apt-get line); PLOT_FAILED (said; gnuplot's own message is above).
 */
static int run_gnuplot(const char *who, const char *dir, const char *script_file,
                       const char *script_text, size_t script_len)
{
    struct sigaction ign = {.sa_handler = SIG_IGN}, old;
    int fds[2] = {-1, -1}, status;
    bool write_failed = false;
    pid_t pid;

    if (!find_in_path("gnuplot")) {
        fprintf(stderr, "%s: gnuplot is not installed, so no PNG: install it with '%s'\n", who,
                GNUPLOT_HINT);
        return PLOT_MISSING;
    }
    if (script_text != NULL && pipe2(fds, O_CLOEXEC) != 0) {
        fprintf(stderr, "%s: pipe: %s\n", who, strerror(errno));
        return PLOT_FAILED;
    }
    fflush(NULL);
    pid = fork();
    if (pid < 0) {
        fprintf(stderr, "%s: fork: %s\n", who, strerror(errno));
        if (fds[0] >= 0) {
            close(fds[0]);
            close(fds[1]);
        }
        return PLOT_FAILED;
    }
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY | O_CLOEXEC);

        if (null >= 0)
            dup2(null, STDOUT_FILENO);
        if (fds[0] >= 0)
            dup2(fds[0], STDIN_FILENO);
        if (dir != NULL && chdir(dir) != 0) {
            fprintf(stderr, "%s: %s: %s\n", who, dir, strerror(errno));
            _exit(EXIT_NOEXEC);
        }
        execlp("gnuplot", "gnuplot", script_file != NULL ? script_file : "-", (char *)NULL);
        fprintf(stderr, "%s: gnuplot: %s\n", who, strerror(errno));
        _exit(EXIT_NOTFOUND);
    }
    if (script_text != NULL) {
        close(fds[0]);
        sigaction(SIGPIPE, &ign, &old); /* gnuplot may stop reading early: EPIPE, not death */
        for (size_t off = 0; off < script_len && !write_failed;) {
            ssize_t n = write(fds[1], script_text + off, script_len - off);

            if (n < 0 && errno == EINTR)
                continue;
            write_failed = n <= 0;
            off += n > 0 ? (size_t)n : 0;
        }
        close(fds[1]);
        sigaction(SIGPIPE, &old, NULL);
    }
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || write_failed) {
        char sig[32];

        if (WIFEXITED(status))
            fprintf(stderr, "%s: gnuplot failed (exit status %d)\n", who, WEXITSTATUS(status));
        else
            fprintf(stderr, "%s: gnuplot was killed by %s\n", who,
                    sig_name(sig, sizeof sig, WTERMSIG(status)));
        return PLOT_FAILED;
    }
    return PLOT_OK;
}

/* ---- trace-plot -------------------------------------------------------------------------- */

/*
 * parse_sched_line parses what follows "SCHED" in a schedtrace line into
 * tp: NULL, or what is wrong with it. gomaxprocs, idleprocs, threads and
 * runqueue are required; spinningthreads, idlethreads and the bracketed
 * per-P run queue lengths are optional; other key=value pairs are skipped
 * (Go prints more of them than goshim does).
 */
static const char *parse_sched_line(char *s, struct trace_point *tp)
{
    static char why[96];
    static const char *const keys[] = {"gomaxprocs", "idleprocs",       "threads",
                                       "runqueue",   "spinningthreads", "idlethreads"};
    long *dst[] = {&tp->gomaxprocs, &tp->idleprocs, &tp->threads,
                   &tp->runqueue,   &tp->spinning,  &tp->idlethreads};
    bool seen[6] = {false};
    char *end;

    while (*s == ' ' || *s == '\t')
        s++;
    if (!isdigit((unsigned char)*s))
        return "no time: want 'SCHED <N>ms: ...'";
    tp->t_ms = strtod(s, &end);
    if (strncmp(end, "ms:", 3) != 0)
        return "no time: want 'SCHED <N>ms: ...'";
    for (s = end + 3;;) {
        size_t len;
        char *tok, *eq;

        while (*s == ' ' || *s == '\t')
            s++;
        if (*s == '\0' || *s == '\n' || *s == '\r')
            break;
        if (*s == '[') {
            long total = 0;

            for (s++;;) {
                while (*s == ' ')
                    s++;
                if (*s == ']')
                    break;
                if (!isdigit((unsigned char)*s))
                    return "malformed run queue list: want '[N N ...]'";
                total += strtol(s, &s, 10);
            }
            s++;
            if (!tp->local_from_bracket) {
                tp->local = total;
                tp->has_local = tp->local_from_bracket = true;
            }
            continue;
        }
        tok = s;
        len = strcspn(s, " \t\r\n");
        s += len;
        eq = memchr(tok, '=', len);
        if (eq == NULL)
            continue;
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
            size_t klen = strlen(keys[k]);
            char *vend;

            if ((size_t)(eq - tok) != klen || memcmp(tok, keys[k], klen) != 0)
                continue;
            if (!isdigit((unsigned char)eq[1]) ||
                (*dst[k] = strtol(eq + 1, &vend, 10), vend != s)) {
                snprintf(why, sizeof why, "%s= wants a whole number, not '%.*s'", keys[k],
                         (int)(s - eq - 1), eq + 1);
                return why;
            }
            seen[k] = true;
        }
    }
    for (int k = 0; k < 4; k++) {
        if (!seen[k]) {
            snprintf(why, sizeof why, "no %s=", keys[k]);
            return why;
        }
    }
    tp->has_spinning = seen[4];
    tp->has_idlethreads = seen[5];
    return NULL;
}

/* A SCHEDDETAIL line "  P<n>: ... runqsize=<k> ...": k in *runqsize. */
static bool parse_p_line(const char *s, long *runqsize)
{
    const char *q;

    while (*s == ' ' || *s == '\t')
        s++;
    if (*s != 'P' || !isdigit((unsigned char)s[1]))
        return false;
    s += 1 + strspn(s + 1, "0123456789");
    if (*s != ':' || (q = strstr(s, " runqsize=")) == NULL || !isdigit((unsigned char)q[10]))
        return false;
    *runqsize = strtol(q + 10, NULL, 10);
    return true;
}

static int cmp_point(const void *a, const void *b)
{
    const struct trace_point *x = a, *y = b;

    if (x->t_ms != y->t_ms)
        return x->t_ms < y->t_ms ? -1 : 1;
    return (x->line > y->line) - (x->line < y->line);
}

/* The default output of trace-plot: FILE with its extension replaced by .png (malloc'd). */
static char *default_png(const char *file)
{
    const char *base = strrchr(file, '/'), *dot;
    size_t keep;
    char *out;

    if (strcmp(file, "-") == 0)
        return strdup("schedtrace.png");
    base = base != NULL ? base + 1 : file;
    dot = strrchr(base, '.');
    keep = dot != NULL && dot != base ? (size_t)(dot - file) : strlen(file);
    if (asprintf(&out, "%.*s.png", (int)keep, file) < 0)
        return NULL;
    if (strcmp(out, file) == 0) {
        free(out);
        if (asprintf(&out, "%s.png", file) < 0)
            return NULL;
    }
    return out;
}

/*
 * trace_script returns (malloc'd, length in *len) the gnuplot script that
 * draws pts[0..n-1] into out: three panels, run queues, processors and OS
 * threads, over time; the data travel inside the script as a datablock.
 */
static char *trace_script(const struct trace_point *pts, size_t n, const char *title,
                          const char *out, size_t *len)
{
    long max_rq = 0, max_p = 0, max_th = 0;
    bool any_local = false, any_spin = false, any_idle = false;
    double scale = pts[n - 1].t_ms >= 10000 ? 1000 : 1, t0, t1;
    const char *style = n <= 60 ? "linespoints pt 7 ps 0.6" : "lines";
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);

    if (f == NULL)
        return NULL;
    for (size_t k = 0; k < n; k++) {
        const struct trace_point *p = &pts[k];

        max_rq = p->runqueue > max_rq ? p->runqueue : max_rq;
        max_rq = p->has_local && p->local > max_rq ? p->local : max_rq;
        max_p = p->gomaxprocs > max_p ? p->gomaxprocs : max_p;
        max_p = p->idleprocs > max_p ? p->idleprocs : max_p;
        max_th = p->threads > max_th ? p->threads : max_th;
        any_local = any_local || p->has_local;
        any_spin = any_spin || p->has_spinning;
        any_idle = any_idle || p->has_idlethreads;
    }
    t0 = pts[0].t_ms / scale;
    t1 = pts[n - 1].t_ms / scale;
    if (t1 <= t0) {
        t0 -= 1;
        t1 += 1;
    }

    fputs("set terminal pngcairo size 1000,900 noenhanced font 'sans,10'\nset output ", f);
    gp_quote(f, out);
    fputs("\n$trace << EOD\n", f);
    for (size_t k = 0; k < n; k++) {
        const struct trace_point *p = &pts[k];

        fprintf(f, "%.6g %ld ", p->t_ms / scale, p->runqueue);
        p->has_local ? fprintf(f, "%ld ", p->local) : fputs("? ", f);
        fprintf(f, "%ld %ld %ld ", p->idleprocs, p->gomaxprocs, p->threads);
        p->has_idlethreads ? fprintf(f, "%ld ", p->idlethreads) : fputs("? ", f);
        p->has_spinning ? fprintf(f, "%ld\n", p->spinning) : fputs("?\n", f);
    }
    fputs("EOD\nset datafile missing '?'\nset multiplot layout 3,1 title ", f);
    gp_quote(f, title);
    fprintf(f,
            "\nset grid\nset key outside top center horizontal\nset xlabel 'time (%s)'\nset xrange "
            "[%.6g:%.6g]\n",
            scale == 1 ? "ms" : "s", t0, t1);

    fprintf(f, "set title 'run queues: Gs waiting to run'\nset ylabel 'Gs'\nset yrange [0:%ld]\n",
            max_rq + max_rq / 10 + 1);
    fprintf(f, "plot $trace using 1:2 with %s lw 2 title 'global run queue'", style);
    if (any_local)
        fprintf(f,
                ", \\\n     $trace using 1:3 with %s lw 2 title 'local run queues (sum over Ps)'",
                style);
    fprintf(f, "\nset title 'processors'\nset ylabel 'Ps'\nset yrange [0:%ld]\n", max_p + 1);
    fprintf(f,
            "plot $trace using 1:4 with %s lw 2 title 'idle Ps', \\\n"
            "     $trace using 1:5 with lines dt 2 lw 2 title 'gomaxprocs'\n",
            style);
    fprintf(f, "set title 'OS threads'\nset ylabel 'threads'\nset yrange [0:%ld]\n",
            max_th + max_th / 10 + 1);
    fprintf(f, "plot $trace using 1:6 with %s lw 2 title 'threads (Ms and sysmon)'", style);
    if (any_idle)
        fprintf(f, ", \\\n     $trace using 1:7 with %s title 'idle threads'", style);
    if (any_spin)
        fprintf(f, ", \\\n     $trace using 1:8 with %s title 'spinning threads'", style);
    fputs("\nunset multiplot\n", f);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    *len = size;
    return text;
}

/* trace-plot's operand and -o; exits on a usage error, returns 1 after --help. */
static int plot_parse(const struct command *cmd, int argc, char **argv, const char **file,
                      const char **out)
{
    static const struct option_spec opts[] = {
        {"output", 'o', true}, {"help", 'h', false}, {NULL, 0, false}};
    enum { O_OUTPUT, O_HELP };
    bool operands_only = false;
    const char *val;
    int i = 1, k;

    *file = *out = NULL;
    while (i < argc) {
        k = operands_only ? OPT_OPERAND : next_option(cmd, opts, argc, argv, &i, &val);
        if (k == OPT_END) {
            operands_only = true;
            continue;
        }
        if (k == OPT_OPERAND) {
            if (*file != NULL)
                usage_error(cmd, "one FILE only, not '%s' as well", argv[i]);
            *file = argv[i++];
        } else if (k == O_OUTPUT) {
            if (*val == '\0')
                usage_error(cmd, "-o wants a file name");
            *out = val;
        } else {
            printf("%s%s", cmd->usage, cmd->help);
            return 1;
        }
    }
    if (*file == NULL)
        usage_error(cmd, "missing FILE (the saved output of GOSHIM_SCHEDTRACE)");
    return 0;
}

/* The SCHED lines of file (- for stdin) in time order, with SCHEDDETAIL's
 * per-P queue lengths summed in; exits on unreadable or malformed input. */
static struct trace_point *plot_read(const char *file, size_t *np)
{
    struct trace_point *pts = NULL;
    size_t n = 0, cap = 0, linecap = 0;
    long lineno = 0, backwards = 0;
    char *line = NULL;
    FILE *in = strcmp(file, "-") == 0 ? stdin : fopen(file, "re");

    if (in == NULL)
        fail(1, "goshim trace-plot: %s: %s", file, strerror(errno));
    while (getline(&line, &linecap, in) >= 0) {
        char *s = line;
        long rq;

        lineno++;
        while (*s == ' ' || *s == '\t')
            s++;
        if (strncmp(s, "SCHED ", 6) == 0) {
            struct trace_point tp = {.line = lineno};
            const char *why = parse_sched_line(s + 5, &tp);

            if (why != NULL)
                fail(1, "goshim trace-plot: %s:%ld: malformed SCHED line: %s", file, lineno, why);
            if (n == cap) {
                cap = cap ? 2 * cap : 256;
                struct trace_point *grown = realloc(pts, cap * sizeof *pts);
                if (grown == NULL)
                    fail(1, "goshim trace-plot: out of memory");
                pts = grown;
            }
            if (n > 0 && tp.t_ms < pts[n - 1].t_ms && backwards == 0)
                backwards = lineno;
            pts[n++] = tp;
        } else if (n > 0 && !pts[n - 1].local_from_bracket && parse_p_line(line, &rq)) {
            pts[n - 1].local += rq; /* SCHEDDETAIL: one line per P follows the SCHED line */
            pts[n - 1].has_local = true;
        }
    }
    if (ferror(in))
        fail(1, "goshim trace-plot: %s: %s", file, strerror(errno));
    if (in != stdin)
        fclose(in);
    free(line);
    if (n == 0)
        fail(1,
             "goshim trace-plot: %s: no SCHED lines (want GOSHIM_SCHEDTRACE output like "
             "'SCHED 50ms: gomaxprocs=2 idleprocs=0 threads=3 ... runqueue=0 [3 0]')",
             file);
    if (backwards != 0) {
        fprintf(stderr,
                "goshim trace-plot: %s:%ld: time goes backwards (traces of several processes?); "
                "plotting in time order\n",
                file, backwards);
        qsort(pts, n, sizeof *pts, cmp_point);
    }
    *np = n;
    return pts;
}

static int cmd_trace_plot(const struct command *cmd, int argc, char **argv)
{
    const char *file, *out, *base;
    char *outbuf = NULL, *script, *title;
    size_t n, script_len = 0;
    int fd, rc;

    if (plot_parse(cmd, argc, argv, &file, &out) != 0)
        return 0;
    struct trace_point *pts = plot_read(file, &n);
    if (out == NULL && (out = outbuf = default_png(file)) == NULL)
        fail(1, "goshim trace-plot: out of memory");
    fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0)
        fail(1, "goshim trace-plot: cannot write %s: %s", out, strerror(errno));
    close(fd);
    base = strrchr(file, '/');
    if (asprintf(&title, "goshim schedtrace: %s (%zu SCHED lines)",
                 strcmp(file, "-") == 0 ? "stdin"
                 : base                 ? base + 1
                                        : file,
                 n) < 0)
        fail(1, "goshim trace-plot: out of memory");
    script = trace_script(pts, n, title, out, &script_len);
    if (script == NULL)
        fail(1, "goshim trace-plot: out of memory");
    rc = run_gnuplot("goshim trace-plot", NULL, NULL, script, script_len) == PLOT_OK ? 0 : 1;
    if (rc == 0)
        printf("goshim trace-plot: wrote %s (%zu SCHED lines, %g to %g ms)\n", out, n, pts[0].t_ms,
               pts[n - 1].t_ms);
    else
        unlink(out);
    free(script);
    free(title);
    free(outbuf);
    free(pts);
    return rc;
}

/* ---- main -------------------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    if (argc < 2)
        usage_error(NULL, "missing command");
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        print_help(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("goshim %s\n", GOSHIM_VERSION);
        return 0;
    }
    for (size_t k = 0; k < NCOMMANDS; k++) {
        if (strcmp(argv[1], commands[k].name) == 0)
            return commands[k].fn(&commands[k], argc - 1, argv + 1);
    }
    if (argv[1][0] == '-')
        usage_error(NULL, "unknown option '%s'", argv[1]);
    usage_error(NULL, "unknown command '%s'", argv[1]);
}
