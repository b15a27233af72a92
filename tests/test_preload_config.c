/*
 * goshim's own lines on stderr, said once: a malformed GOSHIM_ variable once
 * per process tree (a shell script is many processes, each inheriting the
 * variable), the thread limit once per process and only when a running
 * thread's work truly waits for an OS thread.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "tests/preload_helpers.h"

static char out[1 << 16];

static int count(const char *text, const char *what)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, what)); p++)
        n++;
    return n;
}

/* A shell running three preloaded programs: its status, with the output in out. */
static int shell(const char *script, const char *env)
{
    char *argv[] = {"/bin/bash", "-c", (char *)script, NULL};
    return run_exec("/bin/bash", argv, env, test_preload_value(), out, sizeof out);
}

Test(preload_config, bad_variable_reported_once_per_process_tree, .timeout = 60)
{
    char script[16384], hello[4096];
    test_prog_path("prog_hello", hello, sizeof hello);
    snprintf(script, sizeof script, "%s && %s && x=$(%s) && echo \"$x\" | tail -1", hello, hello,
             hello);
    int st = shell(script, "GOSHIM_STACK=1");
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %#x\n%s", st, out);
    cr_assert_eq(count(out, "done\n"), 3, "%s", out);
    cr_assert_eq(count(out, "goshim: GOSHIM_STACK=1 is not valid: want a size of at least"), 1,
                 "want the line once for the whole tree:\n%s", out);

    /* A child with a different value says so again. */
    snprintf(script, sizeof script, "%s && GOSHIM_STACK=2 %s", hello, hello);
    st = shell(script, "GOSHIM_STACK=1");
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %#x\n%s", st, out);
    cr_assert_eq(count(out, "goshim: GOSHIM_STACK=1 is not valid"), 1, "%s", out);
    cr_assert_eq(count(out, "goshim: GOSHIM_STACK=2 is not valid"), 1, "%s", out);
}

Test(preload_config, thread_limit_said_once_and_only_when_work_waits, .timeout = 60)
{
    /* Three spinners and a worker, two Ps, one OS thread: the second P's work waits for an
     * OS thread for as long as the worker runs: said once. (prog_hello's threads print and
     * end before the maker, on the other CPU, has woken to try: no line, rightly, as often
     * as not.) */
    static char *const argv[] = {"prog_spinners", "3", NULL};
    int st =
        run_preloaded("prog_spinners", argv, "GOSHIM_MAXTHREADS=1 GOSHIM_PROCS=2", out, sizeof out);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0 && strstr(out, "3 spinners stopped"),
              "status %#x\n%s", st, out);
    cr_assert_eq(count(out, "goshim: thread limit reached (1 OS threads"), 1, "%s", out);

    /* A shell's command substitutions: nothing ever waits for a second OS thread. */
    st = shell("a=$(echo one) && b=$(echo two | cat) && echo $a $b",
               "GOSHIM_MAXTHREADS=1 GOSHIM_PROCS=2");
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %#x\n%s", st, out);
    cr_assert_str_eq(out, "one two\n");
}
