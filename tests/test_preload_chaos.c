/*
 * Chaos mode under LD_PRELOAD (GOSHIM_CHAOS=SEED): the seed is announced,
 * the same seed gives the same schedule with one P, different seeds give
 * different ones, and the check-then-act race of prog_chaos_race - which
 * ordinary schedules never show - fails under some seed and fails again
 * every time that seed is replayed.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "tests/preload_helpers.h"

#define OUT (1 << 14)

/* Run prog (args) under goshim at P=1 with GOSHIM_CHAOS=seed (negative: none); out gets
 * its output without the chaos announcement, which must be there when a seed is given.
 * Timed preemption is off (GOSHIM_PREEMPT=0): a replay is the same schedule only where the
 * program's own progress decides the switches, and a slice sysmon judges by CPU time on a
 * loaded host is not that (a CI run of 8d6919e replayed seed 7 differently once). Without a
 * seed the ordinary schedule the seeds are compared with is then the same every run, where a
 * slice tick landing between prog_chaos_race's check and act showed the race now and then. */
static int chaos_run(const char *prog, const char *args, long seed, char *out)
{
    char env[96], banner[128];
    struct pp_argv a;
    if (seed >= 0)
        snprintf(env, sizeof env, "GOSHIM_PROCS=1 GOSHIM_PREEMPT=0 GOSHIM_CHAOS=%ld", seed);
    else
        snprintf(env, sizeof env, "GOSHIM_PROCS=1 GOSHIM_PREEMPT=0");
    int st = run_preloaded(prog, pp_argv(&a, prog, args), env, out, OUT);
    cr_assert(WIFEXITED(st), "%s (%s) died: status %d\n%s", prog, env, st, out);
    if (seed >= 0) {
        int n = snprintf(banner, sizeof banner,
                         "goshim: chaos mode, seed %ld (GOSHIM_CHAOS=%ld replays this schedule)\n",
                         seed, seed);
        char *at = strstr(out, banner);
        cr_assert(at, "%s (%s): no chaos announcement:\n%s", prog, env, out);
        memmove(at, at + n, strlen(at + n) + 1);
    }
    return WEXITSTATUS(st);
}

Test(preload_chaos, same_seed_same_schedule_at_one_p, .timeout = 120)
{
    static char first[OUT], again[OUT], other[OUT];
    cr_assert_eq(chaos_run("prog_chaos_order", NULL, 7, first), 0, "%s", first);
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(chaos_run("prog_chaos_order", NULL, 7, again), 0, "%s", again);
        cr_assert_str_eq(again, first, "seed 7 replayed a different schedule");
    }
    int differ = 0;
    for (long seed = 1; seed <= 5; seed++) {
        cr_assert_eq(chaos_run("prog_chaos_order", NULL, seed, other), 0, "%s", other);
        differ += strcmp(other, first) != 0;
    }
    cr_assert_geq(differ, 4, "seeds 1-5 gave the schedule of seed 7 %d times", 5 - differ);
}

Test(preload_chaos, finds_the_race_and_replays_it, .timeout = 120)
{
    static char out[OUT], again[OUT];
    cr_assert_eq(chaos_run("prog_chaos_race", "20", -1, out), 0, "without chaos:\n%s", out);
    cr_assert_str_eq(out, "balance ok\n");
    long found = -1;
    for (long seed = 1; seed <= 20 && found < 0; seed++)
        if (chaos_run("prog_chaos_race", NULL, seed, out) == 1)
            found = seed;
    cr_assert_geq(found, 1, "no seed of 1-20 made the race show");
    cr_assert_str_eq(out, "overdrawn: balance -100 in round 1\n");
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(chaos_run("prog_chaos_race", NULL, found, again), 1,
                     "seed %ld did not replay the failure:\n%s", found, again);
        cr_assert_str_eq(again, out);
    }
}

Test(preload_chaos, a_bad_seed_is_reported_and_chaos_stays_off, .timeout = 30)
{
    static char out[OUT];
    struct pp_argv a;
    int st = run_preloaded("prog_chaos_race", pp_argv(&a, "prog_chaos_race", "20"),
                           "GOSHIM_PROCS=1 GOSHIM_PREEMPT=0 GOSHIM_CHAOS=12ab", out, OUT);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d\n%s", st, out);
    cr_assert(strstr(out, "goshim: GOSHIM_CHAOS=12ab is not valid"), "%s", out);
    cr_assert_null(strstr(out, "chaos mode"), "%s", out);
}
