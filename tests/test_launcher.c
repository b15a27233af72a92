/*
 * The goshim launcher (tools/goshim.c, built as build/goshim): argument
 * checking, --help and --version, and run (the environment it sets,
 * LD_PRELOAD, exit statuses as a shell gives them, finding the library).
 * compare, trace-plot and stress are in tests/test_launcher_tools.c.
 *
 * The launcher runs in a child, with stdout and stderr told apart by a
 * /bin/sh wrapper that sends one of them to /dev/null. Sanitizer builds
 * skip the tests that preload their libgoshim.so into a program, as the
 * preload suites are skipped there (see the Makefile's TEST_FILTER).
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/helpers.h"
#include "tests/launcher_helpers.h"

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
        {{"stress", "--shard", "0/2", "true"}, "--shard 0/2: K counts from 1 to N"},
        {{"stress", "--shard", "3/2", "true"}, "--shard 3/2: there is no part 3 of 2"},
        {{"stress", "--shard", "1/0", "true"}, "--shard wants K/N"},
        {{"stress", "--shard", "2", "true"}, "--shard wants K/N"},
        {{"stress", "--shard=1/2x", "true"}, "--shard wants K/N"},
        {{"stress", "--shard", "-1/2", "true"}, "--shard wants K/N"},
        {{"stress", "--shard", "1/101", "true"}, "101 parts of 100 seeds would leave some empty"},
        {{"stress", "--json=", "true"}, "--json wants a value"},
        {{"stress", "--json"}, "option '--json' needs a value"},
        {{"stress", "--merge"}, "--merge wants the files to merge"},
        {{"stress", "-n", "3", "--merge", "a.json"}, "--merge comes first and takes only files"},
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

/* --lean-tls puts glibc's no-spare-static-TLS tunables first in GLIBC_TUNABLES, the user's after. */
Test(launcher, lean_tls_sets_glibc_tunables_before_the_users, .timeout = 30)
{
    static const char lean[] = "glibc.rtld.optional_static_tls=0:glibc.rtld.nns=1";
    char want[256];
    int st;

    skip_if_sanitized();
    st = launch_env(STDOUT_ONLY, "GLIBC_TUNABLES=", NULL, "run", "--lean-tls", "--", "sh", "-c",
                    "echo \"$GLIBC_TUNABLES\"", NULL);
    assert_exit(st, 0, "goshim run --lean-tls");
    snprintf(want, sizeof want, "%s\n", lean);
    cr_assert_str_eq(out, want);

    st = launch_env(STDOUT_ONLY, "GLIBC_TUNABLES=glibc.malloc.tcache_count=0", NULL, "run",
                    "--lean-tls", "sh", "-c", "echo \"$GLIBC_TUNABLES\"", NULL);
    assert_exit(st, 0, "goshim run --lean-tls with GLIBC_TUNABLES set");
    snprintf(want, sizeof want, "%s:glibc.malloc.tcache_count=0\n", lean);
    cr_assert_str_eq(out, want);

    st = launch_env(STDOUT_ONLY, "GLIBC_TUNABLES=", NULL, "run", "sh", "-c",
                    "echo \"[$GLIBC_TUNABLES]\"", NULL);
    assert_exit(st, 0, "goshim run");
    cr_assert_str_eq(out, "[]\n", "without --lean-tls GLIBC_TUNABLES stays unset");
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
