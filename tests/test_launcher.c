/*
 * The goshim launcher (tools/goshim.c, built as build/goshim): argument
 * checking, --help and --version, run (the environment it sets, LD_PRELOAD,
 * exit statuses as a shell gives them, finding the library), compare (the
 * Markdown table, the files of --out, loud exit-status differences) and
 * trace-plot (real and hand-written traces, garbage).
 *
 * The launcher runs in a child, with stdout and stderr told apart by a
 * /bin/sh wrapper that sends one of them to /dev/null. Sanitizer builds
 * skip the tests that preload their libgoshim.so into a program, as the
 * preload suites are skipped there (see the Makefile's TEST_FILTER).
 */
#include <criterion/criterion.h>
#include <ftw.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>

#include "tests/helpers.h"

#define LAUNCHER GOSHIM_BUILD_DIR "/goshim"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define skip_if_sanitized()                                                                        \
    cr_skip_test("preloads this build's sanitized libgoshim.so into a program; the preload "       \
                 "suites do not run under ASan/TSan either")
#else
#define skip_if_sanitized()                                                                        \
    do {                                                                                           \
    } while (0)
#endif

/* Which of the launcher's streams a launch captures. */
enum stream { BOTH, STDOUT_ONLY, STDERR_ONLY };

static char out[1 << 16];

/*
 * launch runs `goshim ARGS...` (NULL-terminated) in a child, with env_extra
 * and preload as run_exec takes them, capturing the chosen streams into
 * out. Returns the wait status.
 */
static int launch_v(enum stream which, const char *env_extra, const char *preload, va_list ap)
{
    static const char *const redirect[] = {
        [BOTH] = "exec \"$@\"",
        [STDOUT_ONLY] = "exec \"$@\" 2>/dev/null",
        [STDERR_ONLY] = "exec \"$@\" >/dev/null",
    };
    char *argv[64];
    int n = 0;

    cr_assert(access(LAUNCHER, X_OK) == 0, "%s is not built: run make", LAUNCHER);
    argv[n++] = "/bin/sh";
    argv[n++] = "-c";
    argv[n++] = (char *)redirect[which];
    argv[n++] = "sh";
    argv[n++] = LAUNCHER;
    for (char *a; (a = va_arg(ap, char *)) != NULL;) {
        cr_assert(n < 63, "too many arguments");
        argv[n++] = a;
    }
    argv[n] = NULL;
    return run_exec("/bin/sh", argv, env_extra, preload, out, sizeof out);
}

static int launch(enum stream which, ...)
{
    va_list ap;
    int st;

    va_start(ap, which);
    st = launch_v(which, NULL, NULL, ap);
    va_end(ap);
    return st;
}

static int launch_env(enum stream which, const char *env_extra, const char *preload, ...)
{
    va_list ap;
    int st;

    va_start(ap, preload);
    st = launch_v(which, env_extra, preload, ap);
    va_end(ap);
    return st;
}

#define GOSHIM(which, ...) launch(which, __VA_ARGS__, (char *)NULL)

static void assert_exit(int st, int code, const char *what)
{
    cr_assert(WIFEXITED(st), "%s: not an exit: status %#x\n%s", what, st, out);
    cr_assert_eq(WEXITSTATUS(st), code, "%s: exit %d, want %d\n%s", what, WEXITSTATUS(st), code,
                 out);
}

static size_t count_lines(const char *s)
{
    size_t n = 0;

    for (; *s; s++)
        n += *s == '\n';
    return n;
}

static int count_words(const char *s, const char *word)
{
    int n = 0;

    for (; (s = strstr(s, word)) != NULL; s++)
        n++;
    return n;
}

/* A fresh directory under /tmp (in dir), removed by remove_tree. */
static void make_tmpdir(char *dir, size_t len)
{
    snprintf(dir, len, "/tmp/goshim-launcher-XXXXXX");
    cr_assert(mkdtemp(dir) != NULL, "mkdtemp: %s", strerror(errno));
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void remove_tree(const char *dir)
{
    nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void write_file(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");

    cr_assert(f != NULL, "%s: %s", path, strerror(errno));
    fputs(text, f);
    cr_assert(fclose(f) == 0, "%s: %s", path, strerror(errno));
    cr_assert(chmod(path, mode) == 0);
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

static void copy_file(const char *from, const char *to, mode_t mode)
{
    char buf[1 << 16];
    FILE *in = fopen(from, "rb"), *o = fopen(to, "wb");
    size_t n;

    cr_assert(in != NULL && o != NULL, "copy %s to %s: %s", from, to, strerror(errno));
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        cr_assert_eq(fwrite(buf, 1, n, o), n);
    fclose(in);
    cr_assert(fclose(o) == 0);
    cr_assert(chmod(to, mode) == 0);
}

/* `file PATH` says it is a PNG image. */
static void assert_png(const char *path)
{
    char *argv[] = {"file", "-b", (char *)path, NULL};
    int st = run_exec("/usr/bin/file", argv, NULL, NULL, out, sizeof out);

    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "file %s: status %#x\n%s", path, st, out);
    cr_assert(strncmp(out, "PNG image data", 14) == 0, "%s is not a PNG: %s", path, out);
}

/* ---- --help, --version, bad arguments ------------------------------------------------------ */

Test(launcher, help_goes_to_stdout, .timeout = 30)
{
    int st = GOSHIM(STDOUT_ONLY, "--help");

    assert_exit(st, 0, "goshim --help");
    cr_assert(strstr(out, "usage: goshim run") && strstr(out, "goshim compare") &&
                  strstr(out, "goshim trace-plot") && strstr(out, "--preempt MS"),
              "goshim --help should list every command and option:\n%s", out);
    st = GOSHIM(STDERR_ONLY, "--help");
    assert_exit(st, 0, "goshim --help");
    cr_assert_str_empty(out, "goshim --help wrote on stderr:\n%s", out);
    st = GOSHIM(STDOUT_ONLY, "run", "--help");
    assert_exit(st, 0, "goshim run --help");
    cr_assert(strstr(out, "usage: goshim run") && strstr(out, "GOSHIM_PROCS"), "%s", out);
}

Test(launcher, version, .timeout = 30)
{
    int st = GOSHIM(BOTH, "--version");

    assert_exit(st, 0, "goshim --version");
    cr_assert_str_eq(out, "goshim " GOSHIM_VERSION "\n");
}

/* Each case must exit 2 with "goshim CMD: <message naming want>" then the usage, on stderr only. */
Test(launcher, bad_arguments_exit_2_with_one_line_and_usage, .timeout = 60)
{
    static const struct {
        const char *args[6];
        const char *want; /* in the first line */
    } cases[] = {
        {{NULL}, "goshim: missing command"},
        {{"frobnicate"}, "goshim: unknown command 'frobnicate'"},
        {{"--frobnicate"}, "goshim: unknown option '--frobnicate'"},
        {{"run"}, "goshim run: missing command"},
        {{"run", "--"}, "goshim run: missing command"},
        {{"run", "-p", "0", "--", "true"}, "'0'"},
        {{"run", "-p", "1025", "true"}, "'1025'"},
        {{"run", "-p", "two", "true"}, "'two'"},
        {{"run", "-p3x", "true"}, "'3x'"},
        {{"run", "--procs= 2", "true"}, "' 2'"},
        {{"run", "-p"}, "option '-p' needs a value"},
        {{"run", "--trace"}, "option '--trace' needs a value"},
        {{"run", "--trace", "-5", "true"}, "'-5'"},
        {{"run", "--trace", "3600001", "true"}, "'3600001'"},
        {{"run", "--preempt", "abc", "true"}, "'abc'"},
        {{"run", "--preempt", "60000.5", "true"}, "'60000.5'"},
        {{"run", "--preempt", "0x10", "true"}, "'0x10'"},
        {{"run", "--chaos", "-1", "true"}, "'-1'"},
        {{"run", "--chaos", "18446744073709551616", "true"}, "'18446744073709551616'"},
        {{"run", "--stats=1", "true"}, "option '--stats' takes no value"},
        {{"run", "--bogus", "true"}, "goshim run: unknown option '--bogus'"},
        {{"compare", "-n", "0", "true"}, "goshim compare: -n"},
        {{"compare", "--runs=x", "true"}, "'x'"},
        {{"compare", "-p", "0", "true"}, "'0'"},
        {{"compare"}, "goshim compare: missing command"},
        {{"trace-plot"}, "goshim trace-plot: missing FILE"},
        {{"trace-plot", "a", "b"}, "one FILE only"},
        {{"trace-plot", "a", "-o"}, "option '-o' needs a value"},
        {{"stress"}, "goshim stress: missing command"},
        {{"stress", "-n", "0", "true"}, "goshim stress: -n"},
        {{"stress", "--seeds", "5-1", "true"}, "'5-1'"},
        {{"stress", "--seeds", "7", "true"}, "'7'"},
        {{"stress", "--seeds", "1-3", "-n4", "true"}, "-n 4"},
        {{"stress", "-j", "0", "true"}, "'0'"},
        {{"stress", "-p", "1025", "true"}, "'1025'"},
        {{"stress", "--timeout", "0", "true"}, "'0'"},
        {{"stress", "--stop-after", "x", "true"}, "'x'"},
        {{"stress", "--check"}, "option '--check' needs a value"},
        {{"stress", "--bogus", "true"}, "goshim stress: unknown option '--bogus'"},
    };

    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const char *const *a = cases[k].args;
        char what[256], *nl;
        int st;

        snprintf(what, sizeof what, "goshim %s %s %s %s %s", a[0] ? a[0] : "", a[1] ? a[1] : "",
                 a[2] ? a[2] : "", a[3] ? a[3] : "", a[4] ? a[4] : "");
        st = GOSHIM(STDOUT_ONLY, a[0], a[1], a[2], a[3], a[4]);
        assert_exit(st, 2, what);
        cr_assert_str_empty(out, "%s wrote on stdout:\n%s", what, out);

        st = GOSHIM(STDERR_ONLY, a[0], a[1], a[2], a[3], a[4]);
        assert_exit(st, 2, what);
        nl = strchr(out, '\n');
        cr_assert(nl != NULL, "%s: no message", what);
        *nl = '\0';
        cr_assert(strncmp(out, "goshim", 6) == 0 && strstr(out, cases[k].want),
                  "%s: first line should name '%s': %s", what, cases[k].want, out);
        cr_assert(strstr(nl + 1, "usage: goshim"), "%s: no usage after the message:\n%s", what,
                  nl + 1);
    }
}

/* ---- run --------------------------------------------------------------------------------- */

Test(launcher, p_sets_goshim_procs, .timeout = 30)
{
    int st;

    skip_if_sanitized();
    st = GOSHIM(STDOUT_ONLY, "run", "-p", "3", "--", "sh", "-c", "echo $GOSHIM_PROCS");
    assert_exit(st, 0, "goshim run -p 3");
    cr_assert_str_eq(out, "3\n");
}

Test(launcher, options_set_their_variables, .timeout = 30)
{
    static const char script[] =
        "echo \"P=$GOSHIM_PROCS T=$GOSHIM_SCHEDTRACE D=$GOSHIM_SCHEDDETAIL "
        "S=$GOSHIM_STATS C=$GOSHIM_CHAOS R=$GOSHIM_PREEMPT\"";
    int st;

    skip_if_sanitized();
    st = GOSHIM(STDOUT_ONLY, "run", "-p", "3", "--trace", "1000", "--detail", "--stats", "--chaos",
                "42", "--preempt", "2.5", "--", "sh", "-c", script);
    assert_exit(st, 0, "goshim run with every option");
    cr_assert_str_eq(out, "P=3 T=1000 D=1 S=1 C=42 R=2.5\n");

    /* --name=value and -pN forms; options end at the command, whose own options stay its own. */
    st = GOSHIM(STDOUT_ONLY, "run", "-p4", "--trace=50", "--preempt=0", "sh", "-c", script);
    assert_exit(st, 0, "goshim run -p4 --trace=50");
    cr_assert_str_eq(out, "P=4 T=50 D= S= C= R=0\n");
}

Test(launcher, ld_preload_gets_the_library_first, .timeout = 30)
{
    char lib[PATH_MAX], want[PATH_MAX + 64];
    int st;

    skip_if_sanitized();
    cr_assert(realpath(TEST_LIBGOSHIM, lib) != NULL, "%s: %s", TEST_LIBGOSHIM, strerror(errno));
    st = launch_env(STDOUT_ONLY, NULL, NULL, "run", "sh", "-c", "echo \"$LD_PRELOAD\"", NULL);
    assert_exit(st, 0, "goshim run without LD_PRELOAD");
    snprintf(want, sizeof want, "%s\n", lib);
    cr_assert_str_eq(out, want);

    st =
        launch_env(STDOUT_ONLY, NULL, "libm.so.6", "run", "sh", "-c", "echo \"$LD_PRELOAD\"", NULL);
    assert_exit(st, 0, "goshim run with LD_PRELOAD=libm.so.6");
    snprintf(want, sizeof want, "%s:libm.so.6\n", lib);
    cr_assert_str_eq(out, want);
}

Test(launcher, exit_status_is_the_commands, .timeout = 30)
{
    int st;

    skip_if_sanitized();
    st = GOSHIM(BOTH, "run", "--", "sh", "-c", "exit 7");
    assert_exit(st, 7, "goshim run -- sh -c 'exit 7'");
    st = GOSHIM(BOTH, "run", "--", "true");
    assert_exit(st, 0, "goshim run -- true");
    st = GOSHIM(BOTH, "run", "--", "sh", "-c", "kill -TERM $$");
    cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM,
              "a command killed by SIGTERM should kill goshim so: status %#x\n%s", st, out);
}

Test(launcher, stats_prove_the_library_is_loaded, .timeout = 60)
{
    int st;

    skip_if_sanitized();
    st = GOSHIM(BOTH, "run", "--stats", "--", TEST_PROGS_DIR "/prog_hello");
    assert_exit(st, 0, "goshim run --stats prog_hello");
    cr_assert(strstr(out, "done\n"), "prog_hello did not finish:\n%s", out);
    cr_assert(strstr(out, "goshim stats: ") && strstr(out, "gs_created="),
              "--stats printed no counters: libgoshim.so was not loaded?\n%s", out);

    /* The counters come from the option, not from the library alone... */
    st = GOSHIM(BOTH, "run", "--", TEST_PROGS_DIR "/prog_hello");
    assert_exit(st, 0, "goshim run prog_hello");
    cr_assert_null(strstr(out, "goshim stats:"), "no --stats, yet counters:\n%s", out);
    /* ...and the option's variable does nothing without the launcher. */
    st = run_native("prog_hello", NULL, "GOSHIM_STATS=1", out, sizeof out);
    assert_exit(st, 0, "prog_hello natively");
    cr_assert_null(strstr(out, "goshim stats:"), "counters without the library:\n%s", out);
}

Test(launcher, command_not_found_127_not_executable_126, .timeout = 30)
{
    char dir[64], path[128];
    int st;

    st = GOSHIM(STDERR_ONLY, "run", "--", "goshim-test-no-such-command");
    assert_exit(st, 127, "goshim run of a missing command");
    cr_assert_str_eq(out, "goshim run: goshim-test-no-such-command: command not found\n");

    st = GOSHIM(STDERR_ONLY, "run", "/nonexistent/goshim-test");
    assert_exit(st, 127, "goshim run of a missing path");
    cr_assert_str_eq(out, "goshim run: /nonexistent/goshim-test: No such file or directory\n");

    make_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/not-executable", dir);
    write_file(path, "#!/bin/sh\nexit 0\n", 0644);
    st = GOSHIM(STDERR_ONLY, "run", "--", path);
    remove_tree(dir);
    assert_exit(st, 126, "goshim run of a file without x permission");
    cr_assert(strstr(out, "Permission denied") && count_lines(out) == 1, "%s", out);
}

Test(launcher, missing_library_exits_2, .timeout = 30)
{
    char dir[64], copy[128];
    int st;

    st = launch_env(STDERR_ONLY, "GOSHIM_LIB=/nonexistent/libgoshim.so", NULL, "run", "true", NULL);
    assert_exit(st, 2, "GOSHIM_LIB pointing nowhere");
    cr_assert(count_lines(out) == 1 && strstr(out, "GOSHIM_LIB=/nonexistent/libgoshim.so"),
              "want one line naming GOSHIM_LIB:\n%s", out);

    /* A launcher with no library beside it or in ../lib. */
    make_tmpdir(dir, sizeof dir);
    snprintf(copy, sizeof copy, "%s/goshim", dir);
    copy_file(LAUNCHER, copy, 0755);
    {
        char *argv[] = {"sh",   "-c", "unset GOSHIM_LIB; exec \"$@\" >/dev/null", "sh", copy, "run",
                        "true", NULL};

        st = run_exec("/bin/sh", argv, NULL, NULL, out, sizeof out);
    }
    remove_tree(dir);
    assert_exit(st, 2, "a launcher without its library");
    cr_assert(count_lines(out) == 1 && strstr(out, "libgoshim.so not found"),
              "want one line saying the library is missing:\n%s", out);
}

Test(launcher, installed_layout_finds_lib_beside_bin, .timeout = 60)
{
    char dir[64], bin[128], lib[128], launcher[160], want[256];
    int st;

    skip_if_sanitized();
    make_tmpdir(dir, sizeof dir);
    snprintf(bin, sizeof bin, "%s/bin", dir);
    snprintf(lib, sizeof lib, "%s/lib", dir);
    cr_assert(mkdir(bin, 0755) == 0 && mkdir(lib, 0755) == 0);
    snprintf(launcher, sizeof launcher, "%s/goshim", bin);
    copy_file(LAUNCHER, launcher, 0755);
    snprintf(want, sizeof want, "%s/libgoshim.so", lib);
    copy_file(TEST_LIBGOSHIM, want, 0755);
    {
        char *argv[] = {"sh",
                        "-c",
                        "unset GOSHIM_LIB; exec \"$@\"",
                        "sh",
                        launcher,
                        "run",
                        "--stats",
                        "sh",
                        "-c",
                        "echo \"$LD_PRELOAD\"; exec \"$0\"",
                        TEST_PROGS_DIR "/prog_hello",
                        NULL};

        st = run_exec("/bin/sh", argv, NULL, NULL, out, sizeof out);
    }
    remove_tree(dir);
    assert_exit(st, 0, "PREFIX/bin/goshim with PREFIX/lib/libgoshim.so");
    strcat(want, "\n");
    cr_assert(strncmp(out, want, strlen(want)) == 0, "LD_PRELOAD should be %s got:\n%s", want, out);
    cr_assert(strstr(out, "goshim stats:"), "the installed library did not load:\n%s", out);
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
