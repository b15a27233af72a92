/*
 * Shared by the LD_PRELOAD suites (tests/test_preload_*.c): run a
 * tests/progs program natively and under libgoshim.so with GOSHIM_STATS=1
 * and compare. Everything is static inline so a suite may use only part.
 */
#ifndef GOSHIM_TESTS_PRELOAD_HELPERS_H
#define GOSHIM_TESTS_PRELOAD_HELPERS_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/helpers.h"

/* Remove the "goshim stats:" lines from out; return the G count they name (-1 if none). */
static inline long strip_stats(char *out)
{
    long gs = -1;
    char *line = out, *dst = out;

    while (*line) {
        char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line + 1) : strlen(line);

        if (!strncmp(line, "goshim stats:", 13)) {
            char *p = strstr(line, "gs_created=");
            if (p && p < line + len)
                gs = atol(p + 11);
        } else {
            memmove(dst, line, len);
            dst += len;
        }
        line += len;
    }
    *dst = '\0';
    return gs;
}

/* stat_of returns the number after " name=" in out (a "goshim stats:" field), or -1. */
static inline long stat_of(const char *out, const char *name)
{
    char key[64];
    snprintf(key, sizeof key, " %s=", name);
    const char *p = strstr(out, key);
    return p ? atol(p + strlen(key)) : -1;
}

/*
 * Run prog natively and preloaded (with env, e.g. "GOSHIM_PROCS=1", or NULL,
 * added to GOSHIM_STATS=1): both must exit 0 and print the same, in the same
 * order unless sorted (then line order is ignored), and at least min_gs Gs
 * must have run under goshim.
 */
static inline void compare_with_native(const char *prog, const char *env, long min_gs, int sorted)
{
    static char nat[1 << 16], pre[1 << 16];
    char penv[256];
    int sn, sp;
    long gs;

    snprintf(penv, sizeof penv, "GOSHIM_STATS=1 %s", env ? env : "");
    sn = run_native(prog, NULL, NULL, nat, sizeof nat);
    sp = run_preloaded(prog, NULL, penv, pre, sizeof pre);
    gs = strip_stats(pre);
    cr_assert(WIFEXITED(sn), "%s natively: status %d\n%s", prog, sn, nat);
    cr_assert_eq(WEXITSTATUS(sn), 0, "%s fails natively:\n%s", prog, nat);
    cr_assert(WIFEXITED(sp), "%s under goshim (%s) died: status %d\n%s", prog, penv, sp, pre);
    cr_assert_eq(WEXITSTATUS(sp), 0, "%s fails under goshim (%s):\n%s", prog, penv, pre);
    if (sorted) {
        sort_lines(nat);
        sort_lines(pre);
    }
    cr_assert_str_eq(pre, nat, "%s prints differently under goshim (%s)", prog, penv);
    cr_assert_geq(gs, min_gs, "%s: only %ld Gs ran under goshim (stats line missing?)", prog, gs);
}

/* compare_with_native, ignoring the order of output lines (threads print in any order). */
static inline void same_as_native(const char *prog, const char *env, long min_gs)
{
    compare_with_native(prog, env, min_gs, 1);
}

/* compare_with_native, with output lines in the same order. */
static inline void same_as_native_in_order(const char *prog, const char *env, long min_gs)
{
    compare_with_native(prog, env, min_gs, 0);
}

#define PP_MAX_ARGS 8

/* argv for prog: its path, then the space-separated words of args (NULL: none). */
struct pp_argv {
    char path[4096];
    char words[256];
    char *argv[PP_MAX_ARGS + 2];
};

static inline char *const *pp_argv(struct pp_argv *a, const char *prog, const char *args)
{
    int n = 0;
    char *save = NULL;

    a->argv[n++] = (char *)test_prog_path(prog, a->path, sizeof a->path);
    snprintf(a->words, sizeof a->words, "%s", args ? args : "");
    for (char *w = strtok_r(a->words, " ", &save); w && n <= PP_MAX_ARGS;
         w = strtok_r(NULL, " ", &save))
        a->argv[n++] = w;
    a->argv[n] = NULL;
    return a->argv;
}

/* Run prog args natively: it must exit 0 and print exactly want. */
static inline void expect_native_prints(const char *prog, const char *args, const char *want)
{
    static char out[1 << 16];
    struct pp_argv a;
    int st = run_native(prog, pp_argv(&a, prog, args), NULL, out, sizeof out);

    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s %s natively: status %d\n%s", prog,
              args ? args : "", st, out);
    cr_assert(strcmp(out, want) == 0, "%s %s natively printed:\n%s\ninstead of:\n%s", prog,
              args ? args : "", out, want);
}

/*
 * Run prog args under goshim with GOSHIM_STATS=1 plus env (or NULL) into
 * out (stats lines kept); it must exit 0. penv gets the environment used.
 */
static inline void run_preloaded_ok(const char *prog, const char *args, const char *env, char *penv,
                                    size_t penvlen, char *out, size_t outlen)
{
    struct pp_argv a;

    snprintf(penv, penvlen, "GOSHIM_STATS=1 %s", env ? env : "");
    int st = run_preloaded(prog, pp_argv(&a, prog, args), penv, out, outlen);
    cr_assert(WIFEXITED(st), "%s %s under goshim (%s) died: status %d\n%s", prog, args ? args : "",
              penv, st, out);
    cr_assert_eq(WEXITSTATUS(st), 0, "%s %s fails under goshim (%s):\n%s", prog, args ? args : "",
                 penv, out);
}

/* Run prog args under goshim as run_preloaded_ok does (preload), or natively: either way
 * it must exit 0; out gets what it printed. */
static inline void run_either_ok(const char *prog, const char *args, bool preload, const char *env,
                                 char *out, size_t outlen)
{
    char penv[256];
    struct pp_argv a;
    if (preload) {
        run_preloaded_ok(prog, args, env, penv, sizeof penv, out, outlen);
        return;
    }
    int st = run_native(prog, pp_argv(&a, prog, args), NULL, out, outlen);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s %s natively: status %d\n%s", prog,
              args ? args : "", st, out);
}

/*
 * Run prog args under goshim with GOSHIM_STATS=1 plus env (or NULL): it
 * must exit 0, print exactly want once the stats lines are removed, and
 * have run at least min_gs Gs.
 */
static inline void expect_preloaded_prints(const char *prog, const char *args, const char *env,
                                           const char *want, long min_gs)
{
    static char out[1 << 16];
    char penv[256];

    run_preloaded_ok(prog, args, env, penv, sizeof penv, out, sizeof out);
    long gs = strip_stats(out);
    cr_assert_str_eq(out, want, "%s %s under goshim (%s) printed:\n%s\nnot:\n%s", prog,
                     args ? args : "", penv, out, want);
    cr_assert_geq(gs, min_gs, "%s %s: only %ld Gs ran under goshim (stats line missing?)", prog,
                  args ? args : "", gs);
}

/* The same at one P and at two: the cases where threads share the only P, and where
 * they run in parallel and migrate. */
static inline void expect_prints_at_p1_and_p2(const char *prog, const char *args, const char *want,
                                              long min_gs)
{
    expect_preloaded_prints(prog, args, "GOSHIM_PROCS=1", want, min_gs);
    expect_preloaded_prints(prog, args, "GOSHIM_PROCS=2", want, min_gs);
}

/*
 * The same for a program that makes no thread (or a mode of one): under goshim's default
 * start (GOSHIM_START=thread) it runs natively, so this starts the runtime at load, to
 * test goshim's path of a process of one thread (a fork child of a threaded program takes
 * it).
 */
static inline void expect_one_thread_prints_at_p1_and_p2(const char *prog, const char *args,
                                                         const char *want)
{
    expect_preloaded_prints(prog, args, "GOSHIM_START=now GOSHIM_PROCS=1", want, 1);
    expect_preloaded_prints(prog, args, "GOSHIM_START=now GOSHIM_PROCS=2", want, 1);
}

#endif
