/*
 * The goshim launcher's tools (tools/goshim.c, built as build/goshim):
 * compare (the Markdown table, the files of --out, loud exit-status
 * differences), trace-plot (real and hand-written traces, garbage) and
 * stress (finding a race, replays, hangs with their dump, --check and
 * --stop-after, an interrupted stress). Arguments, --help, --version and
 * run are in tests/test_launcher.c.
 *
 * The launcher runs in a child, with stdout and stderr told apart by a
 * /bin/sh wrapper that sends one of them to /dev/null. Sanitizer builds
 * skip the tests that preload their libgoshim.so into a program, as the
 * preload suites are skipped there (see the Makefile's TEST_FILTER).
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/helpers.h"
#include "tests/launcher_helpers.h"

static int count_words(const char *s, const char *word)
{
    int n = 0;

    for (; (s = strstr(s, word)) != NULL; s++)
        n++;
    return n;
}

static char *read_file(const char *path)
{
    static char buf[1 << 16];
    FILE *f = fopen(path, "r");
    size_t n;

    cr_assert(f != NULL, "%s: %s", path, strerror(errno));
    n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* `file PATH` says it is a PNG image. */
static void assert_png(const char *path)
{
    char *argv[] = {"file", "-b", (char *)path, NULL};
    int st = run_exec("/usr/bin/file", argv, NULL, NULL, out, sizeof out);

    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "file %s: status %#x\n%s", path, st, out);
    cr_assert(strncmp(out, "PNG image data", 14) == 0, "%s is not a PNG: %s", path, out);
}

/* ---- compare ----------------------------------------------------------------------------- */

/* The table on stdout: header, separator, then one row per metric, 4 columns each. */
static void assert_table(const char *table)
{
    static const char *const rows[] = {
        "wall time (ms)",  "CPU user+sys (ms)",          "peak RSS (MiB)",
        "peak OS threads", "voluntary context switches", "involuntary context switches",
        "exit status",
    };
    const char *line = table;
    size_t nrows = sizeof rows / sizeof rows[0];

    cr_assert_eq(count_lines(table), 2 + nrows, "want a header, a separator and %zu rows:\n%s",
                 nrows, table);
    cr_assert(strncmp(line,
                      "| metric | native median (min–max) | goshim median (min–max) | "
                      "native/goshim |\n",
                      strlen("| metric | native median (min–max) | goshim median (min–max) | "
                             "native/goshim |\n")) == 0,
              "bad header:\n%s", table);
    line = strchr(line, '\n') + 1;
    cr_assert(strncmp(line, "| --- | ---: | ---: | ---: |\n", 29) == 0, "bad separator:\n%s",
              table);
    line = strchr(line, '\n') + 1;
    for (size_t k = 0; k < nrows; k++) {
        const char *nl = strchr(line, '\n');
        int bars = 0;
        char prefix[64];

        for (const char *p = line; p < nl; p++)
            bars += *p == '|';
        snprintf(prefix, sizeof prefix, "| %s | ", rows[k]);
        cr_assert(strncmp(line, prefix, strlen(prefix)) == 0 && bars == 5 && nl[-1] == '|',
                  "row %zu should be '%s...' with 4 cells:\n%s", k, prefix, table);
        /* median (min–max) in both mode columns */
        cr_assert(strstr(line, ") | ") && strstr(line, "–"), "row %zu: no ranges:\n%s", k, table);
        line = nl + 1;
    }
}

Test(launcher, compare_prints_a_table_and_writes_the_files, .timeout = 120)
{
    char dir[64], sub[96], path[160];
    static char table[1 << 16];
    int st;

    skip_if_sanitized();
    make_tmpdir(dir, sizeof dir);
    snprintf(sub, sizeof sub, "%s/results", dir); /* --out creates it */
    st =
        GOSHIM(STDOUT_ONLY, "compare", "-n", "2", "--out", sub, "--", TEST_PROGS_DIR "/prog_hello");
    snprintf(table, sizeof table, "%s", out);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        remove_tree(dir);
        assert_exit(st, 0, "goshim compare -n 2 --out DIR prog_hello");
    }
    assert_table(table);
    cr_assert(strstr(table, "| exit status | 0 (0–0) | 0 (0–0) | same |\n"), "%s", table);

    snprintf(path, sizeof path, "%s/compare.md", sub);
    cr_assert_str_eq(read_file(path), table, "compare.md should hold the table");
    snprintf(path, sizeof path, "%s/compare.dat", sub);
    {
        const char *dat = read_file(path);

        cr_assert(strstr(dat, "\"wall time (ms)\" "), "compare.dat:\n%s", dat);
    }
    snprintf(path, sizeof path, "%s/compare.png", sub);
    cr_assert(access("/usr/bin/gnuplot", X_OK) == 0 || access("/usr/local/bin/gnuplot", X_OK) == 0,
              "gnuplot is missing: apt-get install gnuplot-nox (scripts/setup.sh installs it)");
    assert_png(path);
    remove_tree(dir);
}

Test(launcher, compare_fails_loudly_when_exit_statuses_differ, .timeout = 60)
{
    int st;

    skip_if_sanitized();
    /* Exits 3 only with a preload: natively 0, under goshim 3. */
    st = GOSHIM(STDERR_ONLY, "compare", "-n", "1", "--", "sh", "-c",
                "test -n \"$LD_PRELOAD\" && exit 3; exit 0");
    assert_exit(st, 1, "compare of a command whose status differs");
    cr_assert(strstr(out, "EXIT STATUS DIFFERS") && strstr(out, "native: exit 0 in 1 run") &&
                  strstr(out, "goshim: exit 3 in 1 run"),
              "%s", out);
    st = GOSHIM(STDOUT_ONLY, "compare", "-n", "1", "--", "sh", "-c",
                "test -n \"$LD_PRELOAD\" && exit 3; exit 0");
    assert_exit(st, 1, "compare of a command whose status differs");
    cr_assert(strstr(out, "| exit status | 0 (0–0) | 3 (3–3) | **DIFFERS** |\n"), "%s", out);

    /* The same failure in both modes is a failure, not a difference. */
    st = GOSHIM(STDERR_ONLY, "compare", "-n", "1", "--", "false");
    assert_exit(st, 1, "compare of false");
    cr_assert(strstr(out, "the command failed") && !strstr(out, "DIFFERS"), "%s", out);
}

Test(launcher, compare_without_gnuplot_still_prints_the_table, .timeout = 60)
{
    char dir[64], path[96];
    static char table[1 << 16];
    int st;

    skip_if_sanitized();
    make_tmpdir(dir, sizeof dir);
    /* No gnuplot on this PATH (nor anything else: the command is given by its path). */
    st = launch_env(STDOUT_ONLY, "PATH=/nonexistent", NULL, "compare", "-n", "1", "--out", dir,
                    "--", TEST_PROGS_DIR "/prog_hello", NULL);
    snprintf(table, sizeof table, "%s", out);
    assert_exit(st, 0, "compare with no gnuplot on PATH");
    assert_table(table);
    st = launch_env(STDERR_ONLY, "PATH=/nonexistent", NULL, "compare", "-n", "1", "--out", dir,
                    "--", TEST_PROGS_DIR "/prog_hello", NULL);
    snprintf(path, sizeof path, "%s/compare.png", dir);
    cr_assert(access(path, F_OK) != 0, "compare.png without gnuplot?");
    snprintf(path, sizeof path, "%s/compare.md", dir);
    cr_assert(access(path, F_OK) == 0, "no compare.md");
    remove_tree(dir);
    assert_exit(st, 0, "compare with no gnuplot on PATH");
    cr_assert(strstr(out, "gnuplot is not installed") && strstr(out, "apt-get install gnuplot-nox"),
              "want the apt-get line:\n%s", out);
}

Test(launcher, compare_hides_output_unless_asked, .timeout = 60)
{
    int st;

    skip_if_sanitized();
    st = GOSHIM(BOTH, "compare", "-n", "1", "--", "sh", "-c", "echo visible; echo visible >&2");
    assert_exit(st, 0, "compare of echo");
    cr_assert_null(strstr(out, "visible"), "the command's output should go to /dev/null:\n%s", out);
    st = GOSHIM(BOTH, "compare", "-n", "1", "--show-output", "--", "sh", "-c",
                "echo visible; echo visible >&2");
    assert_exit(st, 0, "compare --show-output of echo");
    cr_assert_eq(count_words(out, "visible"), 4,
                 "--show-output should keep both streams of both runs:\n%s", out);
}

Test(launcher, compare_of_a_missing_command_is_127, .timeout = 30)
{
    int st = GOSHIM(STDERR_ONLY, "compare", "-n", "1", "--", "goshim-test-no-such-command");

    assert_exit(st, 127, "compare of a missing command");
    cr_assert_str_eq(out, "goshim compare: goshim-test-no-such-command: command not found\n");
}

/* ---- trace-plot -------------------------------------------------------------------------- */

Test(launcher, trace_plot_of_a_captured_trace, .timeout = 120)
{
    char dir[64], trace[96], png[96];
    static char captured[1 << 16];
    int st, sched;

    skip_if_sanitized();
    /* prog_sleep sleeps at least 190 ms in all: some 10 ms trace periods must pass. */
    st = GOSHIM(STDERR_ONLY, "run", "--trace", "10", "--stats", "--", TEST_PROGS_DIR "/prog_sleep");
    assert_exit(st, 0, "goshim run --trace 10 prog_sleep");
    snprintf(captured, sizeof captured, "%s", out);
    sched = count_words(captured, "SCHED ");
    cr_assert(sched >= 3 && strstr(captured, "goshim stats:"),
              "want SCHED lines and the counters on stderr:\n%s", captured);

    make_tmpdir(dir, sizeof dir);
    snprintf(trace, sizeof trace, "%s/trace.txt", dir);
    snprintf(png, sizeof png, "%s/trace.png", dir);
    write_file(trace, captured, 0644);
    st = GOSHIM(BOTH, "trace-plot", trace, "-o", png);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        remove_tree(dir);
        assert_exit(st, 0, "goshim trace-plot of a captured trace");
    }
    assert_png(png);
    remove_tree(dir);
}

Test(launcher, trace_plot_reads_detail_and_skips_other_lines, .timeout = 60)
{
    static const char trace[] =
        "hello from the program\n"
        "SCHED 10ms: gomaxprocs=2 idleprocs=1 threads=3 spinningthreads=0 idlethreads=1 "
        "runqueue=5 [3 0]\n"
        "SCHED 20ms: gomaxprocs=2 idleprocs=0 threads=4 spinningthreads=1 idlethreads=0 "
        "runqueue=0\n"
        "  preempt: requests=6 done=0 refused=0 stale=6 handoffs=0\n"
        "  P0: status=1 schedtick=0 m=0 runqsize=227 runnext=1 gfreecnt=0\n"
        "  P1: status=1 schedtick=284 m=1 runqsize=40 runnext=0 gfreecnt=0\n"
        "  M1: p=1 curg=284 spinning=false tid=1096\n"
        "  G554: status=1(runnable) m=-1\n"
        /* Go's own format has more keys */
        "SCHED 30ms: gomaxprocs=2 idleprocs=2 threads=5 spinningthreads=0 needspinning=0 "
        "idlethreads=3 runqueue=0 [0 0]\n"
        "goshim stats: procs=2 threads=2 tls=full gs_created=5\n";
    char dir[64], path[96], png[96];
    int st;

    make_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/sample.trace", dir);
    snprintf(png, sizeof png, "%s/sample.png", dir);
    write_file(path, trace, 0644);
    st = GOSHIM(STDOUT_ONLY, "trace-plot", path); /* default output: sample.png */
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        remove_tree(dir);
        assert_exit(st, 0, "goshim trace-plot of a hand-written trace");
    }
    cr_assert(strstr(out, "3 SCHED lines"), "%s", out);
    assert_png(png);
    remove_tree(dir);
}

Test(launcher, trace_plot_rejects_garbage, .timeout = 30)
{
    char dir[64], path[96], png[96];
    int st;

    make_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/garbage.txt", dir);
    snprintf(png, sizeof png, "%s/garbage.png", dir);
    write_file(path, "hello\nworld\n\x01\x02\x03\n", 0644);
    st = GOSHIM(STDERR_ONLY, "trace-plot", path, "-o", png);
    assert_exit(st, 1, "trace-plot of a file without SCHED lines");
    cr_assert(count_lines(out) == 1 && strstr(out, "no SCHED lines"), "%s", out);
    cr_assert(access(png, F_OK) != 0, "a PNG was written for garbage");

    write_file(path,
               "SCHED 10ms: gomaxprocs=2 idleprocs=1 threads=3 runqueue=0 [0 0]\n"
               "SCHED 20ms: gomaxprocs=2 idleprocs=x threads=3 runqueue=0 [0 0]\n",
               0644);
    st = GOSHIM(STDERR_ONLY, "trace-plot", path, "-o", png);
    assert_exit(st, 1, "trace-plot of a malformed SCHED line");
    cr_assert(count_lines(out) == 1 && strstr(out, ":2: malformed SCHED line") &&
                  strstr(out, "idleprocs"),
              "want one line naming line 2 and idleprocs:\n%s", out);

    write_file(path, "SCHED 10ms: gomaxprocs=2 idleprocs=1 threads=3 [0 0]\n", 0644);
    st = GOSHIM(STDERR_ONLY, "trace-plot", path, "-o", png);
    assert_exit(st, 1, "trace-plot of a SCHED line without runqueue");
    cr_assert(count_lines(out) == 1 && strstr(out, "no runqueue="), "%s", out);
    remove_tree(dir);

    st = GOSHIM(STDERR_ONLY, "trace-plot", "/nonexistent/trace.txt");
    assert_exit(st, 1, "trace-plot of a missing file");
    cr_assert(count_lines(out) == 1 && strstr(out, "No such file"), "%s", out);
}

/* ---- stress ------------------------------------------------------------------------------ */

/* The text after the line starting with "replay:" in out, up to its first newline, into cmd. */
static void first_replay(const char *report, char *cmd, size_t len)
{
    const char *r = strstr(report, "\nreplay:\n");

    cr_assert(r != NULL, "no replay commands:\n%s", report);
    r += 9;
    snprintf(cmd, len, "%.*s", (int)strcspn(r, "\n"), r);
}

/* The seed of the first row of the failure table. */
static unsigned long first_failing_seed(const char *report)
{
    const char *row = strstr(report, "| ---: | --- | ---: | --- |\n| ");

    cr_assert(row != NULL, "no failure table:\n%s", report);
    return strtoul(row + 30, NULL, 10);
}

/* stress finds prog_chaos_race's race in 20 seeds, keeps the output, and the replay fails again. */
Test(launcher, stress_finds_the_race_and_the_replay_fails_again, .timeout = 120)
{
    static char report[1 << 16];
    char dir[64], path[160], cmd[1024];
    int st;

    skip_if_sanitized();
    make_tmpdir(dir, sizeof dir);
    st = GOSHIM(STDOUT_ONLY, "stress", "-n", "20", "-j", "2", "--out", dir, "--",
                TEST_PROGS_DIR "/prog_chaos_race");
    snprintf(report, sizeof report, "%s", out);
    assert_exit(st, 1, "goshim stress -n 20 prog_chaos_race");
    cr_assert(strstr(report, "goshim stress: 20 runs (seeds from 1, -p 1, 2 at a time): "), "%s",
              report);
    unsigned long seed = first_failing_seed(report);
    cr_assert(strstr(report, " | exit 1 | "), "%s", report);
    cr_assert(strstr(report, " | (stdout) overdrawn: balance -100 in round 1 |\n"), "%s", report);

    snprintf(path, sizeof path, "%s/seed-%lu.out", dir, seed);
    cr_assert(strstr(read_file(path), "overdrawn"), "%s: the failing run's output is not kept",
              path);
    snprintf(path, sizeof path, "%s/seed-%lu.err", dir, seed);
    cr_assert(strstr(read_file(path), "goshim: chaos mode, seed "), "%s", path);

    first_replay(report, cmd, sizeof cmd);
    char want[64];
    snprintf(want, sizeof want, " run -p 1 --chaos %lu -- ", seed);
    cr_assert(strstr(cmd, want), "replay of seed %lu: %s", seed, cmd);
    char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    for (int k = 0; k < 3; k++) { /* the same schedule, every time */
        st = run_exec("/bin/sh", argv, NULL, NULL, out, sizeof out);
        assert_exit(st, 1, cmd);
        cr_assert(strstr(out, "overdrawn: balance -100 in round 1\n"), "%s:\n%s", cmd, out);
    }
    remove_tree(dir);
}

Test(launcher, stress_of_a_correct_program_exits_0, .timeout = 120)
{
    int st;

    skip_if_sanitized();
    st = GOSHIM(BOTH, "stress", "-n", "10", "--", TEST_PROGS_DIR "/prog_sync_mutex");
    assert_exit(st, 0, "goshim stress -n 10 prog_sync_mutex");
    cr_assert(strstr(out, "goshim stress: 10 runs (seeds from 1, -p 1, "), "%s", out);
    cr_assert(strstr(out, "): no failure\n"), "%s", out);
    cr_assert(strstr(out, "stress: 10/10 runs, 0 failed, "), "no progress line:\n%s", out);
}

/* A deadlocked run is a hang: SIGQUIT makes goshim dump every thread into its kept stderr. */
Test(launcher, stress_reports_a_hang_with_the_dump, .timeout = 120)
{
    static char report[1 << 16];
    char dir[64], path[160];
    int st;

    skip_if_sanitized();
    make_tmpdir(dir, sizeof dir);
    st = GOSHIM(STDOUT_ONLY, "stress", "--seeds", "7-8", "--timeout", "2", "--out", dir, "--",
                TEST_PROGS_DIR "/prog_deadlock", "lockorder");
    snprintf(report, sizeof report, "%s", out);
    assert_exit(st, 1, "goshim stress prog_deadlock lockorder");
    cr_assert(strstr(report, "): 2 failed\n"), "%s", report);
    cr_assert(strstr(report, "| 7 | hang (no exit in 2 s) | ") &&
                  strstr(report, "| 8 | hang (no exit in 2 s) | "),
              "%s", report);
    snprintf(path, sizeof path, "%s/seed-7.err", dir);
    const char *err = read_file(path);
    cr_assert(strstr(err, "SIGQUIT: quit\n"), "%s has no dump:\n%s", path, err);
    cr_assert(strstr(err, " \"left\" [mutex 0x") && strstr(err, " \"right\" [mutex 0x"),
              "%s: the dump names no mutex waits:\n%s", path, err);
    remove_tree(dir);
}

/* --check judges the output; --stop-after ends the run early. */
Test(launcher, stress_check_and_stop_after, .timeout = 120)
{
    int st;

    skip_if_sanitized();
    st = GOSHIM(STDOUT_ONLY, "stress", "-n", "4", "-j", "1", "--check", "grep -q nothing", "--",
                TEST_PROGS_DIR "/prog_hello");
    assert_exit(st, 1, "goshim stress --check 'grep -q nothing' prog_hello");
    cr_assert_eq(count_words(out, " | check failed (exit 1) | "), 4, "%s", out);
    cr_assert(strstr(out, "-- " TEST_PROGS_DIR "/prog_hello | sh -c 'grep -q nothing'\n"), "%s",
              out);

    st = GOSHIM(STDOUT_ONLY, "stress", "-n", "4", "--check", "grep -q done", "--",
                TEST_PROGS_DIR "/prog_hello");
    assert_exit(st, 0, "goshim stress --check 'grep -q done' prog_hello");

    st = GOSHIM(STDOUT_ONLY, "stress", "-n", "50", "-j", "1", "--stop-after", "2", "--",
                TEST_PROGS_DIR "/prog_chaos_race");
    assert_exit(st, 1, "goshim stress --stop-after 2 prog_chaos_race");
    cr_assert(strstr(out, "): 2 failed (stopped at --stop-after)\n"), "%s", out);
    cr_assert_eq(count_words(out, " | exit 1 | "), 2, "%s", out);
}

/* Processes whose executable is path. */
static int count_running(const char *path)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    int n = 0;

    cr_assert(d != NULL);
    while ((e = readdir(d)) != NULL) {
        char link[300], exe[PATH_MAX];
        ssize_t len;

        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        snprintf(link, sizeof link, "/proc/%s/exe", e->d_name);
        len = readlink(link, exe, sizeof exe - 1);
        if (len <= 0)
            continue;
        exe[len] = '\0';
        n += strcmp(exe, path) == 0;
    }
    closedir(d);
    return n;
}

/* SIGTERM ends stress at once: the runs in flight (hangs here) are killed with it. */
Test(launcher, stress_interrupted_kills_its_runs, .timeout = 120)
{
    char dir[64], prog[PATH_MAX], line[256];
    int err[2], st;

    skip_if_sanitized();
    make_tmpdir(dir, sizeof dir);
    snprintf(prog, sizeof prog, "%s/prog_deadlock", dir); /* a copy only this test runs */
    copy_file(TEST_PROGS_DIR "/prog_deadlock", prog, 0755);
    cr_assert(pipe(err) == 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        dup2(err[1], 2);
        close(err[0]);
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        execl(LAUNCHER, LAUNCHER, "stress", "-n", "4", "-j", "2", "--timeout", "600", "--", prog,
              "lockorder", (char *)NULL);
        _exit(127);
    }
    close(err[1]);
    FILE *f = fdopen(err[0], "r");
    /* The first progress line comes once the first runs are started. */
    cr_assert(fgets(line, sizeof line, f) && !strncmp(line, "stress: 0/4 runs", 16), "%s", line);
    for (int k = 0; k < 2000 && count_running(prog) < 2; k++) /* until both exec'd */
        usleep(1000);
    cr_assert_eq(count_running(prog), 2, "the two runs did not start");
    cr_assert_eq(kill(pid, SIGTERM), 0);
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    fclose(f);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 128 + SIGTERM, "status %#x", st);
    cr_assert_eq(count_running(prog), 0, "runs outlived goshim stress");
    remove_tree(dir);
}
