/*
 * goshim stress: run a program under chaos mode once per seed, many at a
 * time, and list the seeds that fail with the command that replays each.
 *
 *   goshim stress [-n RUNS] [--seeds A-B] [-j JOBS] [-p PROCS] [--timeout S]
 *                 [--check CMD] [--out DIR] [--stop-after K] [--shard K/N]
 *                 [--json FILE] [--] PROG [ARGS...]
 *   goshim stress --merge FILE...
 *
 * Chaos mode (sched/chaos.c) turns one seed into one schedule; with one P
 * (the default here, -p 1) a program whose behaviour does not depend on
 * time gets the same schedule again for the same seed, so a failing seed
 * is a bug report that replays. What the user had to write by hand is the
 * loop: one seed per run, JOBS runs at a time (default: the usable CPUs),
 * each with GOSHIM_CHAOS=seed and GOSHIM_PROCS, stdin from /dev/null and
 * its stdout and stderr in files of a run directory.
 *
 * A run fails when the program exits non-zero, is killed by a signal, or
 * is still running after --timeout seconds: a hang. A hang gets SIGQUIT
 * first, which goshim answers with a dump of every thread (what each one
 * waits for, and where) on stderr and exit status 2; after a grace period
 * the run's process group gets SIGKILL. With --check CMD, a run that
 * exited 0 also fails when `sh -c CMD`, fed the run's stdout on its stdin,
 * exits non-zero.
 *
 * The run directory is --out DIR (created if needed), else a temporary
 * one removed at the end. Passing runs' files are removed as they finish;
 * a failing run keeps seed-N.out, seed-N.err (and seed-N.check).
 *
 * One process waits for all: each running child has a pidfd, and poll on
 * them wakes the loop at an exit, at the next deadline, or at the next
 * progress line (stderr, redrawn in place on a terminal, else one line
 * per second). Each run is its own process group, so that a hang's
 * children are killed with it. Rejected: a thread per run (a child's
 * exit is one event; nothing here needs parallel code) and SIGCHLD with
 * a self-pipe (pidfds say which child, without a handler).
 *
 * Because the runs are out of the terminal's process group, ^C reaches
 * only stress: SIGINT, SIGTERM and SIGHUP make it kill the runs in flight
 * and print the table so far.
 *
 * Across machines, --shard K/N runs the K-th of N consecutive parts of
 * the seeds (split_shard: cut from the range and K/N alone, so that every
 * machine computes the same parts), --json FILE keeps every run's result,
 * and --merge prints the one report of the files (tools/stress_json.c,
 * tools/stress_merge.c).
 *
 * Exit status: 0 when every run passed, 1 when a seed failed, 2 for bad
 * usage (127/126 when the program cannot be found or run, as goshim run),
 * 128+sig when interrupted.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tools/launcher.h"
#include "tools/library.h"
#include "tools/measure.h"
#include "tools/stress.h"

#define MAX_TIMEOUT_S 86400
#define QUIT_GRACE_MS 5000 /* after SIGQUIT, how long a hang may take to dump */
#define PROGRESS_MS   1000 /* progress line period when stderr is not a terminal */

const char usage_stress[] =
    "usage: goshim stress [-n RUNS] [--seeds A-B] [-j JOBS] [-p N] [--timeout S]\n"
    "                     [--check CMD] [--out DIR] [--stop-after K] [--shard K/N]\n"
    "                     [--json FILE] [--] CMD [ARGS...]\n"
    "       goshim stress --merge FILE...\n";
const char help_stress[] =
    "  run CMD under chaos mode once per seed, JOBS at a time, and list the failing\n"
    "  seeds (exit status or signal, duration, first line of stderr) with the command\n"
    "  that replays each; exit status 0 if every run passed, else 1\n"
    "  -n, --runs RUNS   number of runs, one seed each (default 100, or the --seeds range)\n"
    "  --seeds A-B       the seeds to try (default 1-RUNS)\n"
    "  -j, --jobs JOBS   runs at a time, 1 to 256 (default: usable CPUs)\n"
    "  -p, --procs N     GOSHIM_PROCS of every run (default 1: a seed replays exactly)\n"
    "  --timeout S       a run still going after S seconds is a hang: SIGQUIT (goshim\n"
    "                    dumps every thread), then SIGKILL (default 60)\n"
    "  --check CMD       a run that exited 0 fails unless sh -c CMD, with the run's\n"
    "                    stdout on its stdin, exits 0\n"
    "  --out DIR         keep each failing run's seed-N.out and seed-N.err in DIR\n"
    "  --stop-after K    stop after K failures (runs in flight are killed, not counted)\n"
    "  --shard K/N       run only the K-th of N equal parts of the seeds (K from 1 to N),\n"
    "                    one per machine or job: together they run every seed once\n"
    "  --json FILE       write every run's result to FILE (FILE.partial until the end)\n"
    "  --merge FILE...   the table and replay lines of the --json files of one stress\n"
    "                    run in parts, as one run over them all would print them\n";

static void parse_stress_options(const struct command *cmd, struct stress *s, int argc,
                                 char **argv);
static void open_run_dir(struct stress *s);
static void start_run(struct stress *s, struct job *j);
static void start_check(struct stress *s, struct job *j);
static void reap(struct stress *s, struct job *j);
static void finish(struct stress *s, struct job *j, int kind, int wstatus);
static void on_deadline(struct job *j, double now);
static void kill_in_flight(struct stress *s);
static void progress(struct stress *s, bool last);
static void run_file(char *buf, size_t len, const struct stress *s, uint64_t seed, const char *ext);
static void first_line(const struct stress *s, uint64_t seed, char *buf, size_t len);
static void describe_failure(char *buf, size_t len, const struct failure *f);
static int open_pidfd(pid_t pid);
static unsigned usable_cpus(void);
static void catch_interrupts(void);

/* SIGINT, SIGTERM or SIGHUP received: the runs (each its own process group, out of
 * the terminal's reach) are killed, the table so far printed, and stress exits 128+sig. */
static volatile sig_atomic_t interrupted;

/* ---- options ----------------------------------------------------------------------------- */

/* "A-B" with A <= B: true, the range in *a and *b. */
static bool parse_range(const char *v, uint64_t *a, uint64_t *b)
{
    const char *dash = strchr(v, '-');
    char left[32];

    if (dash == NULL || (size_t)(dash - v) >= sizeof left)
        return false;
    memcpy(left, v, (size_t)(dash - v));
    left[dash - v] = '\0';
    if (!parse_uint(left, 0, UINT64_MAX) || !parse_uint(dash + 1, 0, UINT64_MAX))
        return false;
    *a = strtoull(left, NULL, 10);
    *b = strtoull(dash + 1, NULL, 10);
    return *a <= *b;
}

/* "K/N", whole numbers with 1 <= K <= N: *k and *n, or a usage error that says what is wrong. */
static void parse_shard(const struct command *cmd, const char *v, unsigned *k, unsigned *n)
{
    const char *slash = strchr(v, '/');
    char left[16];

    if (slash != NULL && (size_t)(slash - v) < sizeof left) {
        memcpy(left, v, (size_t)(slash - v));
        left[slash - v] = '\0';
    }
    if (slash == NULL || (size_t)(slash - v) >= sizeof left || !parse_uint(left, 0, UINT32_MAX) ||
        !parse_uint(slash + 1, 1, UINT32_MAX))
        usage_error(cmd,
                    "--shard wants K/N, whole numbers with 1 <= K <= N (part K of N), not '%s'", v);
    *k = (unsigned)strtoul(left, NULL, 10);
    *n = (unsigned)strtoul(slash + 1, NULL, 10);
    if (*k == 0)
        usage_error(cmd,
                    "--shard %s: K counts from 1 to N (from an index that counts from 0, such as "
                    "JOB_COMPLETION_INDEX, give $((INDEX + 1))/N)",
                    v);
    if (*k > *n)
        usage_error(cmd, "--shard %s: there is no part %u of %u (K is at most N)", v, *k, *n);
}

/*
 * --shard K/N: the seeds of s become the K-th of N consecutive parts of its
 * range, part K being [R(K-1)/N, RK/N) of its R seeds (rounded down): the
 * parts are disjoint, cover the range, differ in size by one at most, and
 * depend on nothing but the range and K/N (not -j, not the machine).
 */
static void split_shard(const struct command *cmd, struct stress *s, const char *spec)
{
    unsigned __int128 r = s->runs;

    s->range_first = s->first_seed;
    s->range_runs = s->runs;
    if (s->shard_n > s->runs)
        usage_error(cmd,
                    "--shard %s: %u parts of %llu seeds would leave some empty (N is at most "
                    "the number of seeds)",
                    spec, s->shard_n, (unsigned long long)s->runs);
    uint64_t lo = (uint64_t)(r * (s->shard_k - 1) / s->shard_n);
    uint64_t hi = (uint64_t)(r * s->shard_k / s->shard_n);
    s->first_seed += lo;
    s->runs = hi - lo;
}

/* The value of option k is valid, or a usage error. */
static void check_value(const struct command *cmd, int k, const char *name, const char *val)
{
    enum { O_RUNS, O_SEEDS, O_JOBS, O_PROCS, O_TIMEOUT, O_CHECK, O_OUT, O_STOP, O_JSON };

    if (k == O_RUNS && !parse_uint(val, 1, UINT32_MAX))
        usage_error(cmd, "-n wants a whole number of runs from 1 to %u, not '%s'", UINT32_MAX, val);
    if (k == O_JOBS && !parse_uint(val, 1, MAX_JOBS))
        usage_error(cmd, "-j wants a whole number from 1 to %d, not '%s'", MAX_JOBS, val);
    if (k == O_PROCS && !parse_uint(val, 1, MAX_PROCS))
        usage_error(cmd, "-p wants a whole number from 1 to %d, not '%s'", MAX_PROCS, val);
    if (k == O_TIMEOUT && !parse_uint(val, 1, MAX_TIMEOUT_S))
        usage_error(cmd, "--timeout wants whole seconds from 1 to %d, not '%s'", MAX_TIMEOUT_S,
                    val);
    if (k == O_STOP && !parse_uint(val, 1, UINT32_MAX))
        usage_error(cmd, "--stop-after wants a whole number of failures, not '%s'", val);
    if ((k == O_CHECK || k == O_OUT || k == O_JSON) && *val == '\0')
        usage_error(cmd, "--%s wants a value", name);
}

static void parse_stress_options(const struct command *cmd, struct stress *s, int argc, char **argv)
{
    static const struct option_spec opts[] = {
        {"runs", 'n', true},  {"seeds", 0, true}, {"jobs", 'j', true}, {"procs", 'p', true},
        {"timeout", 0, true}, {"check", 0, true}, {"out", 0, true},    {"stop-after", 0, true},
        {"json", 0, true},    {"shard", 0, true}, {"merge", 0, false}, {"help", 'h', false},
        {NULL, 0, false},
    };
    enum {
        O_RUNS,
        O_SEEDS,
        O_JOBS,
        O_PROCS,
        O_TIMEOUT,
        O_CHECK,
        O_OUT,
        O_STOP,
        O_JSON,
        O_SHARD,
        O_MERGE,
        O_HELP
    };
    uint64_t a = 1, b = 0, runs = 0;
    bool seeds = false;
    const char *val, *shard = NULL;
    int i = 1, k;

    while ((k = next_option(cmd, opts, argc, argv, &i, &val)) >= 0) {
        if (k == O_HELP) {
            printf("%s%s", cmd->usage, cmd->help);
            exit(0);
        }
        if (k == O_MERGE)
            usage_error(cmd, "--merge comes first and takes only files: goshim stress --merge "
                             "FILE...");
        if (k == O_SEEDS && (!(seeds = parse_range(val, &a, &b)) || b - a == UINT64_MAX))
            usage_error(cmd, "--seeds wants a range A-B of whole numbers, A <= B, not '%s'", val);
        if (k == O_SHARD)
            parse_shard(cmd, shard = val, &s->shard_k, &s->shard_n);
        check_value(cmd, k, opts[k].name, val);
        runs = k == O_RUNS ? strtoull(val, NULL, 10) : runs;
        s->jobs = k == O_JOBS ? (unsigned)strtoul(val, NULL, 10) : s->jobs;
        s->procs = k == O_PROCS ? (unsigned)strtoul(val, NULL, 10) : s->procs;
        s->timeout_ms = k == O_TIMEOUT ? strtod(val, NULL) * 1e3 : s->timeout_ms;
        s->stop_after = k == O_STOP ? (unsigned)strtoul(val, NULL, 10) : s->stop_after;
        s->check = k == O_CHECK ? val : s->check;
        s->out = k == O_OUT ? val : s->out;
        s->json = k == O_JSON ? val : s->json;
    }
    if (i >= argc)
        usage_error(cmd, "missing command to run");
    if (seeds && runs > b - a + 1)
        usage_error(cmd, "-n %llu is more runs than the %llu seeds of --seeds",
                    (unsigned long long)runs, (unsigned long long)(b - a + 1));
    s->first_seed = a;
    s->runs = runs ? runs : seeds ? b - a + 1 : 100;
    s->argv = argv + i;
    split_shard(cmd, s, shard ? shard : "1/1");
}

/* ---- runs -------------------------------------------------------------------------------- */

static int open_pidfd(pid_t pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    (void)pid;
    errno = ENOSYS;
    return -1;
#endif
}

/* DIR/seed-N.ext */
static void run_file(char *buf, size_t len, const struct stress *s, uint64_t seed, const char *ext)
{
    snprintf(buf, len, "%s/seed-%llu.%s", s->dir, (unsigned long long)seed, ext);
}

/* In a child: fd 0 from in, 1 and 2 to out and err (NULL: /dev/null), or _exit(126). */
static void child_files(const char *in, const char *out, const char *err)
{
    int fd0 = open(in ? in : "/dev/null", O_RDONLY);
    int fd1 = open(out ? out : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0666);
    int fd2 = open(err ? err : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0666);

    if (fd0 < 0 || fd1 < 0 || fd2 < 0 || dup2(fd0, 0) < 0 || dup2(fd1, 1) < 0 || dup2(fd2, 2) < 0)
        _exit(EXIT_NOEXEC);
    close(fd0);
    close(fd1);
    close(fd2);
}

__attribute__((noreturn)) static void spawn_failed(const char *what)
{
    fail(EXIT_USAGE, "goshim stress: %s: %s", what, strerror(errno));
}

/* Start the program for seed j->seed in slot j. */
static void start_run(struct stress *s, struct job *j)
{
    char out[PATH_MAX], err[PATH_MAX], seed[24], procs[16];

    run_file(out, sizeof out, s, j->seed, "out");
    run_file(err, sizeof err, s, j->seed, "err");
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)j->seed);
    snprintf(procs, sizeof procs, "%u", s->procs);
    fflush(NULL);
    j->start = now_ms();
    j->deadline = j->start + s->timeout_ms;
    j->checking = j->quit = false;
    j->pid = fork();
    if (j->pid < 0)
        spawn_failed("fork");
    if (j->pid == 0) {
        setpgid(0, 0);
        signal(SIGQUIT, SIG_DFL); /* goshim dumps the threads of a hang on SIGQUIT */
        child_files(NULL, out, err);
        setenv("LD_PRELOAD", s->preload, 1);
        setenv("GOSHIM_CHAOS", seed, 1);
        setenv("GOSHIM_PROCS", procs, 1);
        execvp(s->argv[0], s->argv);
        _exit(exec_failed("goshim stress", s->argv[0], errno));
    }
    setpgid(j->pid, j->pid);
    if ((j->pidfd = open_pidfd(j->pid)) < 0)
        spawn_failed("pidfd_open");
}

/* The run in slot j exited 0: feed its stdout to sh -c CHECK. */
static void start_check(struct stress *s, struct job *j)
{
    char out[PATH_MAX], chk[PATH_MAX];

    run_file(out, sizeof out, s, j->seed, "out");
    run_file(chk, sizeof chk, s, j->seed, "check");
    fflush(NULL);
    j->checking = true;
    j->deadline = now_ms() + s->timeout_ms;
    j->pid = fork();
    if (j->pid < 0)
        spawn_failed("fork");
    if (j->pid == 0) {
        setpgid(0, 0);
        child_files(out, chk, chk);
        execl("/bin/sh", "sh", "-c", s->check, (char *)NULL);
        _exit(EXIT_NOTFOUND);
    }
    setpgid(j->pid, j->pid);
    if ((j->pidfd = open_pidfd(j->pid)) < 0)
        spawn_failed("pidfd_open");
}

/* Slot j's child exited: judge it, or go on to its check. */
static void reap(struct stress *s, struct job *j)
{
    int st;

    kill(-j->pid, SIGKILL); /* what it left in its group (the zombie still holds the id) */
    while (waitpid(j->pid, &st, 0) < 0 && errno == EINTR)
        ;
    close(j->pidfd);
    j->pid = 0;
    if (j->checking) {
        finish(s, j, WIFEXITED(st) && WEXITSTATUS(st) == 0 ? F_NONE : F_CHECK, st);
        return;
    }
    j->wstatus = st;
    j->ms = now_ms() - j->start;
    if (j->quit)
        finish(s, j, F_HANG, st);
    else if (WIFSIGNALED(st))
        finish(s, j, F_SIGNAL, st);
    else if (WEXITSTATUS(st) != 0)
        finish(s, j, F_EXIT, st);
    else if (s->check != NULL)
        start_check(s, j);
    else
        finish(s, j, F_NONE, st);
}

/* Record the end of slot j's run; a pass leaves no files behind. */
static void finish(struct stress *s, struct job *j, int kind, int wstatus)
{
    static const char *const ext[] = {"out", "err", "check"};
    char path[PATH_MAX];

    s->done++;
    if (kind == F_NONE) {
        for (size_t k = 0; k < sizeof ext / sizeof ext[0]; k++) {
            run_file(path, sizeof path, s, j->seed, ext[k]);
            unlink(path);
        }
        stress_json_run(s, j, kind, wstatus, NULL);
        return;
    }
    struct failure *f = &s->fail[s->nfail++];
    f->seed = j->seed;
    f->kind = kind;
    f->wstatus = wstatus;
    f->ms = j->ms;
    f->timeout_ms = s->timeout_ms;
    first_line(s, j->seed, f->first, sizeof f->first);
    stress_json_run(s, j, kind, wstatus, f);
    if (s->stop_after && s->nfail >= s->stop_after)
        s->stopped = true;
}

/* Slot j is past its deadline: SIGQUIT (goshim's dump) first, SIGKILL after the grace. */
static void on_deadline(struct job *j, double now)
{
    if (j->checking || j->quit) {
        kill(-j->pid, SIGKILL);
        j->deadline = now + QUIT_GRACE_MS;
        return;
    }
    j->quit = true;
    kill(j->pid, SIGQUIT);
    j->deadline = now + QUIT_GRACE_MS;
}

static void kill_in_flight(struct stress *s)
{
    for (unsigned k = 0; k < s->jobs; k++) {
        struct job *j = &s->job[k];

        if (j->pid == 0)
            continue;
        kill(-j->pid, SIGKILL);
        while (waitpid(j->pid, NULL, 0) < 0 && errno == EINTR)
            ;
        close(j->pidfd);
        j->pid = 0;
    }
}

/* ---- the loop ---------------------------------------------------------------------------- */

/* Fill the free slots; poll until one child ends or a deadline or progress line is due. */
static void step(struct stress *s)
{
    struct pollfd pfd[MAX_JOBS];
    struct job *who[MAX_JOBS];
    double now = now_ms(), wake = now + PROGRESS_MS;
    int n = 0;

    for (unsigned k = 0; k < s->jobs; k++) {
        struct job *j = &s->job[k];

        if (j->pid == 0 && !s->stopped && s->next < s->runs) {
            j->seed = s->first_seed + s->next++;
            start_run(s, j);
        }
        if (j->pid == 0)
            continue;
        if (j->deadline <= now)
            on_deadline(j, now);
        wake = j->deadline < wake ? j->deadline : wake;
        pfd[n] = (struct pollfd){.fd = j->pidfd, .events = POLLIN};
        who[n++] = j;
    }
    if (n == 0)
        return;
    int r = poll(pfd, (nfds_t)n, (int)(wake - now) + 1);
    for (int k = 0; r > 0 && k < n; k++) {
        if (pfd[k].revents)
            reap(s, who[k]);
    }
}

static bool in_flight(const struct stress *s)
{
    for (unsigned k = 0; k < s->jobs; k++) {
        if (s->job[k].pid != 0)
            return true;
    }
    return false;
}

/* "stress: 12/20 runs, 3 failed, 8.1 runs/s, ETA 1s" on stderr. */
static void progress(struct stress *s, bool last)
{
    double now = now_ms(), el = (now - s->t0) / 1e3;
    double rate = el > 0 ? (double)s->done / el : 0;

    if (!last && (s->tty ? now - s->last_progress < 100 : now - s->last_progress < PROGRESS_MS))
        return;
    s->last_progress = now;
    fprintf(stderr, "%sstress: %llu/%llu runs, %llu failed, %.1f runs/s", s->tty ? "\r\033[K" : "",
            (unsigned long long)s->done, (unsigned long long)s->runs, (unsigned long long)s->nfail,
            rate);
    if (!last && rate > 0)
        fprintf(stderr, ", ETA %.0fs", (double)(s->runs - s->done) / rate);
    else if (last)
        fprintf(stderr, ", %.1fs", el);
    fputs(s->tty && !last ? "" : "\n", stderr);
    fflush(stderr);
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void open_run_dir(struct stress *s)
{
    if (s->out != NULL) {
        if (mkdir_p(s->out) != 0)
            fail(EXIT_USAGE, "goshim stress: --out %s: %s", s->out, strerror(errno));
        s->dir = realpath(s->out, NULL);
    } else {
        const char *tmp = getenv("TMPDIR");
        char *d;

        if (asprintf(&d, "%s/goshim-stress-XXXXXX", tmp && *tmp ? tmp : "/tmp") < 0 ||
            mkdtemp(d) == NULL)
            fail(EXIT_USAGE, "goshim stress: cannot make a temporary directory: %s",
                 strerror(errno));
        s->dir = d;
        s->temp_dir = true;
    }
    if (s->dir == NULL)
        fail(EXIT_USAGE, "goshim stress: --out %s: %s", s->out, strerror(errno));
}

static void on_interrupt(int sig)
{
    interrupted = sig;
}

static void catch_interrupts(void)
{
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    struct sigaction sa;

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    for (size_t k = 0; k < sizeof sigs / sizeof sigs[0]; k++)
        sigaction(sigs[k], &sa, NULL);
}

static unsigned usable_cpus(void)
{
    cpu_set_t set;

    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return (unsigned)CPU_COUNT(&set);
    return 1;
}

int cmd_stress(const struct command *cmd, int argc, char **argv)
{
    static struct stress s;
    char *lib;
    bool json_ok = true;

    if (argc > 1 && strcmp(argv[1], "--merge") == 0)
        return stress_merge(cmd, argc, argv, 2);
    s.procs = 1;
    s.timeout_ms = 60e3;
    s.shard_k = s.shard_n = 1;
    parse_stress_options(cmd, &s, argc, argv);
    if (s.jobs == 0)
        s.jobs = usable_cpus() < MAX_JOBS ? usable_cpus() : MAX_JOBS;
    if ((uint64_t)s.jobs > s.runs)
        s.jobs = (unsigned)s.runs;
    if (!find_command(s.argv[0]))
        return exec_failed("goshim stress", s.argv[0], errno);
    lib = find_library("goshim stress");
    s.preload = preload_value(lib);
    s.self = realpath("/proc/self/exe", NULL);
    s.fail = calloc(s.runs < 1000000 ? s.runs : 1000000, sizeof *s.fail);
    if (s.fail == NULL || s.self == NULL)
        fail(EXIT_USAGE, "goshim stress: out of memory");
    open_run_dir(&s);
    if (s.json != NULL)
        stress_json_open(&s);
    s.tty = isatty(STDERR_FILENO);
    s.t0 = now_ms();
    catch_interrupts();
    while (!s.stopped && !interrupted && (s.next < s.runs || in_flight(&s))) {
        step(&s);
        progress(&s, false);
        if (s.nfail >= 1000000)
            s.stopped = true;
    }
    kill_in_flight(&s);
    s.interrupted = interrupted;
    progress(&s, true);
    if (s.json != NULL)
        json_ok = stress_json_close(&s);
    stress_report(&s);
    if (s.temp_dir)
        nftw(s.dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
    free(lib);
    if (interrupted)
        return 128 + interrupted;
    return s.nfail || !json_ok ? 1 : 0;
}

/* ---- the report -------------------------------------------------------------------------- */

/* The first line of the run's stderr that is not goshim's chaos banner, else of its stdout. */
static void first_line(const struct stress *s, uint64_t seed, char *buf, size_t len)
{
    static const char *const ext[] = {"err", "out"};
    char path[PATH_MAX], line[1024];

    buf[0] = '\0';
    for (size_t k = 0; k < 2 && buf[0] == '\0'; k++) {
        FILE *f;

        run_file(path, sizeof path, s, seed, ext[k]);
        if ((f = fopen(path, "r")) == NULL)
            continue;
        while (fgets(line, sizeof line, f) != NULL) {
            line[strcspn(line, "\n")] = '\0';
            if (line[0] == '\0' || strncmp(line, "goshim: chaos mode, seed ", 25) == 0)
                continue;
            snprintf(buf, len, "%s%.*s", k ? "(stdout) " : "", (int)(len - 10), line);
            for (char *p = buf; *p; p++)
                *p = *p == '|' ? '/' : *p; /* keeps the Markdown table a table */
            break;
        }
        fclose(f);
    }
}

static void describe_failure(char *buf, size_t len, const struct failure *f)
{
    char sig[32];

    switch (f->kind) {
    case F_HANG:
        snprintf(buf, len, "hang (no exit in %.0f s)", f->timeout_ms / 1e3);
        break;
    case F_CHECK:
        if (WIFEXITED(f->wstatus))
            snprintf(buf, len, "check failed (exit %d)", WEXITSTATUS(f->wstatus));
        else
            snprintf(buf, len, "check killed by %s",
                     sig_name(sig, sizeof sig, WTERMSIG(f->wstatus)));
        break;
    case F_SIGNAL:
        snprintf(buf, len, "killed by %s", sig_name(sig, sizeof sig, WTERMSIG(f->wstatus)));
        break;
    default:
        snprintf(buf, len, "exit %d", WEXITSTATUS(f->wstatus));
    }
}

/* A word as sh reads it: bare if it is safe, else in single quotes. */
static void sh_quote(FILE *f, const char *w)
{
    if (*w != '\0' && strspn(w, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                "_-+=./:,@%") == strlen(w)) {
        fputs(w, f);
        return;
    }
    fputc('\'', f);
    for (; *w; w++) {
        if (*w == '\'')
            fputs("'\\''", f);
        else
            fputc(*w, f);
    }
    fputc('\'', f);
}

/* goshim run -p P --chaos SEED -- CMD ARGS... */
void stress_replay(FILE *f, const struct stress *s, uint64_t seed)
{
    sh_quote(f, s->self);
    fprintf(f, " run -p %u --chaos %llu --", s->procs, (unsigned long long)seed);
    for (char **a = s->argv; *a; a++) {
        fputc(' ', f);
        sh_quote(f, *a);
    }
    if (s->check) {
        fputs(" | sh -c ", f);
        sh_quote(f, s->check);
    }
    fputc('\n', f);
}

static int cmp_failure(const void *a, const void *b)
{
    uint64_t x = ((const struct failure *)a)->seed, y = ((const struct failure *)b)->seed;

    return (x > y) - (x < y);
}

/* "(seeds from 1, -p 1, 2 at a time)", or the shard's part, or the number of files merged. */
static void print_header(const struct stress *s)
{
    printf("goshim stress: %llu runs (seeds from %llu, ", (unsigned long long)s->done,
           (unsigned long long)s->first_seed);
    if (s->shard_n > 1)
        printf("part %u/%u of seeds %llu-%llu, ", s->shard_k, s->shard_n,
               (unsigned long long)s->range_first,
               (unsigned long long)(s->range_first + s->range_runs - 1));
    if (s->merged)
        printf("-p %u, %u file%s merged): ", s->procs, s->merged, s->merged > 1 ? "s" : "");
    else
        printf("-p %u, %u at a time): ", s->procs, s->jobs);
}

void stress_report(struct stress *s)
{
    const char *why = s->stopped       ? " (stopped at --stop-after)"
                      : s->interrupted ? " (interrupted)"
                                       : "";
    char what[64];

    qsort(s->fail, s->nfail, sizeof *s->fail, cmp_failure);
    print_header(s);
    if (s->nfail == 0)
        printf("no failure%s\n", why);
    else
        printf("%llu failed%s\n", (unsigned long long)s->nfail, why);
    if (s->note != NULL)
        printf("%s\n", s->note);
    if (s->nfail == 0)
        return;
    printf("\n| seed | result | time (ms) | first line of stderr |\n| ---: | --- | ---: | --- |\n");
    for (uint64_t k = 0; k < s->nfail; k++) {
        const struct failure *f = &s->fail[k];

        describe_failure(what, sizeof what, f);
        printf("| %llu | %s | %.0f | %s |\n", (unsigned long long)f->seed, what, f->ms, f->first);
    }
    printf("\nreplay:\n");
    for (uint64_t k = 0; k < s->nfail; k++)
        stress_replay(stdout, s, s->fail[k].seed);
    if (!s->temp_dir)
        printf("\noutput of each failing run: %s/seed-N.out, seed-N.err%s\n", s->dir,
               s->check ? ", seed-N.check" : "");
}
