/*
 * The goshim launcher's tools (tools/goshim.c, built as build/goshim):
 * compare (the Markdown table, the files of --out, loud exit-status
 * differences), trace-plot (real and hand-written traces, garbage) and
 * stress (finding a race, replays, hangs with their dump, --check and
 * --stop-after, an interrupted stress; --shard, --json and --merge across
 * machines). Arguments, --help, --version and run are in
 * tests/test_launcher.c.
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
    /* 4 runs: prog_sync_mutex takes up to 30 s a run under chaos on a loaded 2-CPU host. */
    st = GOSHIM(BOTH, "stress", "-n", "4", "--", TEST_PROGS_DIR "/prog_sync_mutex");
    assert_exit(st, 0, "goshim stress -n 4 prog_sync_mutex");
    cr_assert(strstr(out, "goshim stress: 4 runs (seeds from 1, -p 1, "), "%s", out);
    cr_assert(strstr(out, "): no failure\n"), "%s", out);
    cr_assert(strstr(out, "stress: 4/4 runs, 0 failed, "), "no progress line:\n%s", out);
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

/* ---- stress across machines: --shard, --json, --merge ------------------------------------- */

/* At -p 1 a timed preemption is the one switch a seed does not decide (tests/test_preload_chaos.c):
 * off, so that the runs compared here have the same failing seeds whatever the load. */
#define STRESS_ENV "GOSHIM_PREEMPT=0"
#define RACE       TEST_PROGS_DIR "/prog_chaos_race"

/* The failure table of report without its time column ("| 5 | exit 1 | (stdout) ... |\n" per
 * row) into buf; the seeds alone, blank-separated, into seeds. Returns the number of rows. */
static int table_rows(const char *report, char *buf, size_t len, char *seeds, size_t slen)
{
    const char *row = strstr(report, "| ---: | --- | ---: | --- |\n");
    size_t n = 0, sn = 0;
    int rows = 0;

    buf[0] = seeds[0] = '\0';
    for (row = row ? strchr(row, '\n') + 1 : NULL; row && strncmp(row, "| ", 2) == 0; rows++) {
        const char *result = strstr(row, " | ") + 3, *time = strstr(result, " | ") + 3;
        const char *rest = strstr(time, " | "), *end = strchr(row, '\n');

        n += (size_t)snprintf(buf + n, len - n, "%.*s%.*s\n", (int)(time - row), row,
                              (int)(end - rest - 3), rest + 3);
        sn += (size_t)snprintf(seeds + sn, slen - sn, "%s%lu", sn ? " " : "",
                               strtoul(row + 2, NULL, 10));
        row = end + 1;
    }
    return rows;
}

/* The replay lines of report (from "replay:" to the blank line or the end). */
static const char *replay_block(const char *report, char *buf, size_t len)
{
    const char *r = strstr(report, "\nreplay:\n"), *end;

    cr_assert(r != NULL, "no replay lines:\n%s", report);
    end = strstr(r + 9, "\n\n");
    snprintf(buf, len, "%.*s", (int)(end ? end - r : (long)strlen(r)), r);
    return buf;
}

/* goshim stress --seeds 1-20 -p 1 ARGS... -- prog_chaos_race: its stdout into report. */
#define STRESS_RACE(report, ...)                                                                   \
    (st = launch_env(STDOUT_ONLY, STRESS_ENV, NULL, "stress", "--seeds", "1-20", "-p", "1",        \
                     __VA_ARGS__, "--", RACE, (char *)NULL),                                       \
     snprintf(report, sizeof report, "%s", out), st)

/* Every seed of a part's table lies in [lo, hi]. */
static void assert_seeds_within(const char *seeds, unsigned long lo, unsigned long hi)
{
    for (char *p = (char *)seeds, *e; *p; p = e) {
        unsigned long seed = strtoul(p, &e, 10);

        cr_assert(seed >= lo && seed <= hi, "seed %lu outside the part's %lu-%lu: %s", seed, lo, hi,
                  seeds);
    }
}

/* --seeds 1-20 in two shards (at different -j), merged: the failing seeds, the table (but its
 * times) and the replay lines of one run over 1-20 at -p 1; each part ran its half only. */
Test(launcher, stress_shards_merged_are_one_run, .timeout = 240)
{
    static char whole[1 << 16], part1[1 << 16], part2[1 << 16], merged[1 << 16];
    static char rows[2][4096], replays[2][8192];
    char dir[64], a[96], b[96], seeds[2][256], ps[256], pr[4096];
    int st, n;

    skip_if_sanitized();
    make_tmpdir(dir, sizeof dir);
    snprintf(a, sizeof a, "%s/part1.json", dir);
    snprintf(b, sizeof b, "%s/part2.json", dir);
    st = STRESS_RACE(whole, "-j", "2");
    assert_exit(st, 1, "goshim stress --seeds 1-20 -p 1 prog_chaos_race");
    n = table_rows(whole, rows[0], sizeof rows[0], seeds[0], sizeof seeds[0]);
    cr_assert_gt(n, 0, "no seed of 1-20 failed:\n%s", whole);

    st = STRESS_RACE(part1, "-j", "2", "--shard", "1/2", "--json", a);
    cr_assert(strstr(part1, "goshim stress: 10 runs (seeds from 1, part 1/2 of seeds 1-20, -p 1, "),
              "%s", part1);
    table_rows(part1, pr, sizeof pr, ps, sizeof ps);
    assert_seeds_within(ps, 1, 10);
    st = STRESS_RACE(part2, "-j", "1", "--shard", "2/2", "--json", b);
    cr_assert(
        strstr(part2, "goshim stress: 10 runs (seeds from 11, part 2/2 of seeds 1-20, -p 1, "),
        "%s", part2);
    table_rows(part2, pr, sizeof pr, ps, sizeof ps);
    assert_seeds_within(ps, 11, 20);
    cr_assert_eq(count_words(read_file(a), "{\"seed\": "), 10, "%s", read_file(a));
    cr_assert_eq(count_words(read_file(b), "{\"seed\": "), 10, "%s", read_file(b));

    st = GOSHIM(STDOUT_ONLY, "stress", "--merge", b, a);
    snprintf(merged, sizeof merged, "%s", out);
    assert_exit(st, 1, "goshim stress --merge part2.json part1.json");
    char head[128];
    snprintf(head, sizeof head,
             "goshim stress: 20 runs (seeds from 1, -p 1, 2 files merged): %d "
             "failed\n\n| seed |",
             n);
    cr_assert(strncmp(merged, head, strlen(head)) == 0, "want '%s':\n%s", head, merged);
    table_rows(merged, rows[1], sizeof rows[1], seeds[1], sizeof seeds[1]);
    cr_assert_str_eq(seeds[1], seeds[0], "merged failing seeds %s, one run's %s", seeds[1],
                     seeds[0]);
    cr_assert_str_eq(rows[1], rows[0], "merged table:\n%s\none run's:\n%s", rows[1], rows[0]);
    cr_assert_str_eq(replay_block(merged, replays[1], sizeof replays[1]),
                     replay_block(whole, replays[0], sizeof replays[0]));
    remove_tree(dir);
}

/* goshim stress --json dir/name A1 A2 A3 A4 -- prog: a file to merge. */
static void stress_json(const char *dir, const char *name, const char *prog, const char *a1,
                        const char *a2, const char *a3, const char *a4)
{
    char path[128];
    int st;

    snprintf(path, sizeof path, "%s/%s", dir, name);
    st = GOSHIM(STDOUT_ONLY, "stress", "--json", path, a1, a2, a3, a4, "--", prog);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) <= 1, "stress --json %s: status %#x\n%s", name, st,
              out);
}

/* goshim stress --merge dir/f1 [dir/f2]: the exit status; stderr (or stdout) in out. */
static int merge(enum stream which, const char *dir, const char *f1, const char *f2)
{
    char p1[128], p2[128];

    snprintf(p1, sizeof p1, "%s/%s", dir, f1);
    snprintf(p2, sizeof p2, "%s/%s", dir, f2 ? f2 : "");
    return GOSHIM(which, "stress", "--merge", p1, f2 ? p2 : NULL);
}

/* A merge is refused (exit 2, one line saying why) for parts that do not belong together. */
Test(launcher, stress_merge_refuses_parts_that_do_not_belong, .timeout = 120)
{
    static const struct {
        const char *f1, *f2, *want;
    } bad[] = {
        {"a.json", "a.json", "a.json are both part 1/2 of seeds 1-4: give each part once"},
        {"a.json", "race.json",
         "race.json ran '" RACE "': the parts of one stress run one command"},
        {"a.json", "p2.json", "at -p 1 and "},
        {"a.json", "r2.json", "parts of different splits"},
        {"s3.json", "s5.json", "seed 5 is in both "},
        {"cut.json", NULL, "cut.json: not valid JSON: line "},
        {"gone.json", NULL,
         "gone.json.partial is there: the goshim stress writing it did not "
         "finish"},
    };
    const char *hello = TEST_PROGS_DIR "/prog_hello";
    char dir[64], path[128];
    int st;

    skip_if_sanitized();
    make_tmpdir(dir, sizeof dir);
    stress_json(dir, "a.json", hello, "--seeds", "1-4", "--shard", "1/2");
    stress_json(dir, "b.json", hello, "--seeds", "1-4", "--shard", "2/2");
    stress_json(dir, "race.json", RACE, "--seeds", "1-4", "--shard=2/2", "-j1");
    stress_json(dir, "p2.json", hello, "--seeds", "1-4", "--shard=2/2", "-p2");
    stress_json(dir, "r2.json", hello, "--seeds", "1-6", "--shard", "2/2");
    stress_json(dir, "s3.json", hello, "--seeds", "3-6", "-j1", "-p1");
    stress_json(dir, "s5.json", hello, "--seeds", "5-8", "-j1", "-p1");
    snprintf(path, sizeof path, "%s/cut.json", dir);
    write_file(path, "{\n  \"goshim_stress\": 1,\n  \"command\": [\"x\"", 0644);
    snprintf(path, sizeof path, "%s/gone.json.partial", dir);
    write_file(path, "{\n", 0644);

    st = merge(STDOUT_ONLY, dir, "b.json", "a.json");
    assert_exit(st, 0, "goshim stress --merge b.json a.json");
    cr_assert(strstr(out, "goshim stress: 4 runs (seeds from 1, -p 1, 2 files merged): no "
                          "failure\n"),
              "%s", out);
    st = merge(STDOUT_ONLY, dir, "a.json", NULL); /* half: nothing failed, but not all ran */
    assert_exit(st, 1, "goshim stress --merge a.json");
    cr_assert(strstr(out, "\nmissing: part 2/2 of seeds 1-4 (not among the files)\n"), "%s", out);
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        st = merge(STDERR_ONLY, dir, bad[k].f1, bad[k].f2);
        assert_exit(st, 2, bad[k].want);
        cr_assert(count_lines(out) == 1 && strncmp(out, "goshim stress --merge: ", 23) == 0 &&
                      strstr(out, bad[k].want),
                  "merge %s %s: want one line with '%s':\n%s", bad[k].f1,
                  bad[k].f2 ? bad[k].f2 : "", bad[k].want, out);
    }
    remove_tree(dir);
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

/* SIGTERM ends stress at once: the runs in flight (hangs here) are killed with it, and the
 * --json file is finished. */
Test(launcher, stress_interrupted_kills_its_runs, .timeout = 120)
{
    char dir[64], prog[PATH_MAX], line[256], json[128];
    int err[2], st;

    skip_if_sanitized();
    make_tmpdir(dir, sizeof dir);
    snprintf(json, sizeof json, "%s/stress.json", dir);
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
        execl(LAUNCHER, LAUNCHER, "stress", "-n", "4", "-j", "2", "--timeout", "600", "--json",
              json, "--", prog, "lockorder", (char *)NULL);
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
    /* --json's file is whole, says it is unfinished, and a merge of it says so too. */
    cr_assert(access(json, F_OK) == 0 && strcat(json, ".partial") && access(json, F_OK) != 0,
              "want the finished file and no .partial left");
    json[strlen(json) - 8] = '\0';
    cr_assert(strstr(read_file(json), "\"state\": \"interrupted\",\n  \"interrupted_by\": "
                                      "\"SIGTERM\""),
              "%s", read_file(json));
    st = GOSHIM(STDOUT_ONLY, "stress", "--merge", json);
    assert_exit(st, 1, "goshim stress --merge of an interrupted part");
    cr_assert(strstr(out, "no failure (interrupted)\nunfinished: ") &&
                  strstr(out, " ran 0 of its 4 seeds (interrupted by SIGTERM)\n"),
              "%s", out);
    remove_tree(dir);
}
