/*
 * Asynchronous preemption under LD_PRELOAD: sysmon signals (SIGURG unless
 * GOSHIM_PREEMPT_SIGNAL says otherwise) the OS thread of a task that has
 * run its slice without blocking - by default the kernel's base slice and
 * only while another task waits for its P, or a fixed GOSHIM_PREEMPT ms
 * (0 = off) - and the handler switches the task out when it and all its
 * callers are in application code. Each tests/progs/prog_preempt_* program
 * runs under libgoshim.so with GOSHIM_STATS=1 and must print exactly what
 * it prints natively (asserted as a literal string, and natively once per
 * program); the line
 *   goshim stats: preempt_requests=N preemptions=N preempt_refused=N preempt_handoffs=N
 * shows whether preemption happened (or, with GOSHIM_PREEMPT=0, did not).
 * A program that hangs because nothing preempts or hands off is caught by
 * the test's timeout.
 *
 * Every run walks with both unwinders (GOSHIM_PREEMPT_WALK=both: libgcc's
 * and libunwind's, each preemption, in turn first), unless the test names
 * one, or GOSHIM_TEST_WALK does (libgcc, libunwind: run the suite with one
 * alone); a preemption is made only if both find the stack safe, and no
 * walk may have found it otherwise with the other unwinder
 * (walk_verdicts_differ=0).
 */
#include <criterion/criterion.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/preload_helpers.h"

#define PP_OUT (1 << 16)

/*
 * The value of "name=" on the first "goshim stats:" line of out that has
 * it (" name=" as a whole word: preemptions= is not preempt_...), or -1.
 */
static long stat_value(const char *out, const char *name)
{
    char key[64];
    size_t klen = (size_t)snprintf(key, sizeof key, " %s=", name);

    for (const char *line = out; *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line + 1) : strlen(line);

        if (!strncmp(line, "goshim stats:", 13)) {
            for (const char *p = line; p + klen <= line + len; p++) {
                if (!memcmp(p, key, klen))
                    return strtol(p + klen, NULL, 10);
            }
        }
        line += len;
    }
    return -1;
}

/* The preemption counters of one preloaded run. */
struct pp_stats {
    long requests, done, refused, handoffs, cut, demoted;
    long to_global;       /* preempted Gs sent to the global queue rather than kept on their P */
    long wake;            /* of the cut slices, those cut at the wake cut (half a slice) */
    long ticks, tickcuts; /* the Ms' slice-timer signals, and the preemptions they began */
    long timerfail;       /* slice timers the kernel refused */
    long gate;            /* preemptions taken at the shim's gate, at a wrapped call */
    long rounds;          /* sysmon's looks */
};

/*
 * Run prog args under goshim with GOSHIM_STATS=1 plus env: it must exit 0
 * and print exactly want (the stats lines aside). Returns its counters
 * (asserting that the preemption stats line is there).
 */
static struct pp_stats pp_preloaded(const char *prog, const char *args, const char *env,
                                    const char *want)
{
    static char out[PP_OUT];
    struct pp_argv a;
    struct pp_stats s;
    char penv[256];
    int st;
    const char *walk = getenv("GOSHIM_TEST_WALK");

    snprintf(penv, sizeof penv, "GOSHIM_STATS=1 %s%s%s", env ? env : "",
             env && strstr(env, "GOSHIM_PREEMPT_WALK=") ? "" : " GOSHIM_PREEMPT_WALK=",
             env && strstr(env, "GOSHIM_PREEMPT_WALK=") ? ""
             : walk && *walk                            ? walk
                                                        : "both");
    st = run_preloaded(prog, pp_argv(&a, prog, args), penv, out, sizeof out);
    cr_assert(WIFEXITED(st), "%s %s under goshim (%s) died: status %d\n%s", prog, args ? args : "",
              penv, st, out);
    s.requests = stat_value(out, "preempt_requests");
    s.done = stat_value(out, "preemptions");
    s.refused = stat_value(out, "preempt_refused");
    s.handoffs = stat_value(out, "preempt_handoffs");
    s.cut = stat_value(out, "slices_cut");
    s.wake = stat_value(out, "wake_cuts");
    s.demoted = stat_value(out, "spinners_demoted");
    s.to_global = stat_value(out, "preempted_to_global");
    s.ticks = stat_value(out, "ticks");
    s.tickcuts = stat_value(out, "tick_cuts");
    s.timerfail = stat_value(out, "timer_fails");
    s.gate = stat_value(out, "preempt_gate");
    s.rounds = stat_value(out, "sysmon_rounds");
    long differ = stat_value(out, "walk_verdicts_differ");
    cr_assert_leq(differ, 0,
                  "%s %s under goshim (%s): %ld walks found the stack safe with one "
                  "unwinder and not with the other:\n%s",
                  prog, args ? args : "", penv, differ, out);
    cr_assert_eq(WEXITSTATUS(st), 0, "%s %s fails under goshim (%s):\n%s", prog, args ? args : "",
                 penv, out);
    cr_assert(s.requests >= 0 && s.done >= 0 && s.refused >= 0 && s.handoffs >= 0 && s.cut >= 0 &&
                  s.wake >= 0 && s.demoted >= 0 && s.to_global >= 0 && s.ticks >= 0 &&
                  s.tickcuts >= 0,
              "%s: no \"goshim stats: preempt_requests=... preemptions=... preempt_refused=... "
              "preempt_handoffs=... slices_cut=... wake_cuts=... spinners_demoted=... "
              "preempted_to_global=... "
              "ticks=... "
              "tick_cuts=...\" line under goshim (%s):\n%s",
              prog, penv, out);
    strip_stats(out);
    cr_assert_str_eq(out, want, "%s %s under goshim (%s)", prog, args ? args : "", penv);
    return s;
}

/* Run prog args natively: it must exit 0 and print exactly want. */
static void pp_native(const char *prog, const char *args, const char *want)
{
    expect_native_prints(prog, args, want);
}

/* ---- a thread that never makes a call gives way --------------------------------- */

#define SPIN_ADVANCED     "counter advanced while spinning\n"
#define SPIN_NOT_ADVANCED "counter did not advance while spinning\n"
/* Iterations of the spinner: many slices' worth, well within the test's timeout. */
#define SPIN_BOUND "1500000000"

Test(preload_preempt, spin_natively, .timeout = 60)
{
    pp_native("prog_preempt_spin", NULL, SPIN_ADVANCED);
    pp_native("prog_preempt_spin", SPIN_BOUND, SPIN_ADVANCED);
}

/*
 * A sleeper beside a spinner that makes no call, at one P with a fixed slice: each time the
 * spinner is preempted, by signal, the sleeper its timer readied runs. The request also
 * stood at the M's gate, and the sleeper (from runnext, the P's schedtick unchanged) took
 * it at its next call, nanosleep: back behind the spinner for another slice, 24 ms late for
 * a 1 ms sleep at GOSHIM_PREEMPT=10, 4 ms at 2 (a gate preemption for nearly every sleep).
 * The spinner makes no call: a gate preemption can only be the sleeper's.
 */
Test(preload_preempt, a_served_request_is_not_taken_again_at_the_next_gs_call, .timeout = 60)
{
    static char out[PP_OUT];
    struct pp_argv a;
    int st = run_preloaded("pbench_preempt_latency", pp_argv(&a, "pbench_preempt_latency", "30"),
                           "GOSHIM_PROCS=1 GOSHIM_PREEMPT=2 GOSHIM_STATS=1", out, sizeof out);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0 && strstr(out, "spinner_ran=yes"),
              "status %d\n%s", st, out);
    long gate = stat_of(out, "preempt_gate"), done = stat_of(out, "preemptions");
    cr_assert(done >= 1, "the spinner was never preempted?\n%s", out);
    cr_assert(gate >= 0 && gate <= 3, "%ld of %ld preemptions at a gate of the sleeper\n%s", gate,
              done, out);
}

/* With one P the counter advances only if the spinner is preempted (once a slice). */
Test(preload_preempt, spin_advances_one_p, .timeout = 60)
{
    struct pp_stats s = pp_preloaded("prog_preempt_spin", NULL, "GOSHIM_PROCS=1", SPIN_ADVANCED);

    cr_assert_geq(s.done, 1, "the spinner advanced without a preemption?");
    cr_assert_geq(s.requests + s.tickcuts, s.done,
                  "more preemptions (%ld) than sysmon's requests (%ld) and slice-timer cuts (%ld)",
                  s.done, s.requests, s.tickcuts);
}

/* A thread that creates another and computes is cut by sysmon after its
 * own slice though the new one waits in its runnext alone (which would
 * inherit the slice, as Go's runnext does). Without that rule only the
 * slice timers let it in, at the kernel's tick: no sysmon request at all
 * (seen). Under load sysmon's look comes even sooner than the timer's,
 * which counts the M's CPU time. */
Test(preload_preempt, creator_that_spins_is_cut_for_its_new_thread_one_p, .timeout = 60)
{
    static const char want[] = "new thread ran while its creator spun: 10 rounds\n";
    struct pp_stats s = pp_preloaded("prog_spin_after_create", "10", "GOSHIM_PROCS=1", want);

    cr_assert_geq(s.requests, 1, "no creator was asked to yield (slice-timer cuts: %ld)",
                  s.tickcuts);
}

Test(preload_preempt, spin_advances_one_p_fractional_slice, .timeout = 60)
{
    struct pp_stats s =
        pp_preloaded("prog_preempt_spin", NULL, "GOSHIM_PROCS=1 GOSHIM_PREEMPT=0.5", SPIN_ADVANCED);

    cr_assert_geq(s.done, 1, "the spinner advanced without a preemption?");
}

/* At the default P count, as many spinners as CPUs (goshim's default
 * Ps are the usable CPUs, never more) leave the counter no P: it advances
 * only because they are preempted. */
Test(preload_preempt, spin_advances_default_procs, .timeout = 60)
{
    char args[64];
    snprintf(args, sizeof args, "0 %ld", sysconf(_SC_NPROCESSORS_ONLN));
    pp_native("prog_preempt_spin", args, SPIN_ADVANCED);
    struct pp_stats s = pp_preloaded("prog_preempt_spin", args, NULL, SPIN_ADVANCED);

    cr_assert_geq(s.done, 1, "the counter advanced beside %s spinners without a preemption?",
                  args + 2);
}

/* The signal is configurable: SIGUSR2 (12) instead of SIGURG. */
Test(preload_preempt, spin_advances_with_another_signal, .timeout = 60)
{
    struct pp_stats s =
        pp_preloaded("prog_preempt_spin", NULL,
                     "GOSHIM_PROCS=1 GOSHIM_PREEMPT=1 GOSHIM_PREEMPT_SIGNAL=12", SPIN_ADVANCED);

    cr_assert_geq(s.done, 1, "the spinner advanced without a preemption?");
}

/* GOSHIM_PREEMPT=0: with one P nothing else runs while the spinner spins. */
Test(preload_preempt, spin_without_preemption_does_not_advance, .timeout = 60)
{
    struct pp_stats s = pp_preloaded("prog_preempt_spin", SPIN_BOUND,
                                     "GOSHIM_PROCS=1 GOSHIM_PREEMPT=0", SPIN_NOT_ADVANCED);

    cr_assert_eq(s.requests, 0, "GOSHIM_PREEMPT=0, yet %ld preemption requests", s.requests);
    cr_assert_eq(s.done, 0, "GOSHIM_PREEMPT=0, yet %ld preemptions", s.done);
}

/* ---- every register survives -------------------------------------------------------- */

/* prog_preempt_regs 1: 3 threads, 20 rounds of ~50 ms each; main computes the references first. */
#define REGS_ARGS "1"
#define REGS_OK   "regs: 3 threads, 20 rounds each, all checksums match\n"

Test(preload_preempt, regs_natively, .timeout = 120)
{
    pp_native("prog_preempt_regs", REGS_ARGS, REGS_OK);
}

Test(preload_preempt, regs_one_p_preempt_1ms, .timeout = 120)
{
    struct pp_stats s =
        pp_preloaded("prog_preempt_regs", REGS_ARGS, "GOSHIM_PROCS=1 GOSHIM_PREEMPT=1", REGS_OK);

    cr_assert_geq(s.done, 1, "no preemption in ~6 s of computing at GOSHIM_PREEMPT=1");
}

/*
 * 0.2 ms: seconds of computing (the references in main alone, then the
 * threads). At least 1000 preemptions: well below what this slice gives,
 * above what a 10 ms slice gives, so it fails if the fractional slice is
 * not honoured.
 */
Test(preload_preempt, regs_one_p_preempt_0_2ms, .timeout = 120)
{
    struct pp_stats s =
        pp_preloaded("prog_preempt_regs", REGS_ARGS, "GOSHIM_PROCS=1 GOSHIM_PREEMPT=0.2", REGS_OK);

    cr_assert_geq(s.done, 1000, "only %ld preemptions at GOSHIM_PREEMPT=0.2 (requests %ld)", s.done,
                  s.requests);
}

Test(preload_preempt, regs_two_p_preempt_1ms, .timeout = 120)
{
    struct pp_stats s =
        pp_preloaded("prog_preempt_regs", REGS_ARGS, "GOSHIM_PROCS=2 GOSHIM_PREEMPT=1", REGS_OK);

    cr_assert_geq(s.done, 1, "no preemption in ~5 s of computing at GOSHIM_PREEMPT=1");
}

/* ---- never inside libc ------------------------------------------------------------ */

Test(preload_preempt, libc_natively, .timeout = 60)
{
    pp_native("prog_preempt_libc", NULL, "libc: ok\n");
}

/*
 * strict: with one P, the spinner must never run while the libc thread is
 * inside qsort's comparator (it would have been preempted with qsort's
 * frames on its stack). Requests that found the libc thread in libc are
 * refused; the spinner is preempted.
 */
static void libc_strict(const char *env)
{
    /* Without the hand-off of a G refused too long (GOSHIM_PREEMPT_HANDOFF=0:
     * it would let the libc thread run beside the spinner, P-less, which
     * strict cannot tell from a preemption inside the comparator). */
    char e[160];
    snprintf(e, sizeof e, "GOSHIM_PROCS=1 GOSHIM_PREEMPT_HANDOFF=0 %s", env);
    struct pp_stats s = pp_preloaded("prog_preempt_libc", "strict", e, "libc: ok\n");

    cr_assert_gt(s.refused, 0, "no request was refused (preemptions %ld, requests %ld)", s.done,
                 s.requests);
    cr_assert_gt(s.done, 0, "no preemption (refused %ld, requests %ld)", s.refused, s.requests);
}

Test(preload_preempt, libc_one_p, .timeout = 90)
{
    libc_strict("");
}

/* ---- a raw blocking system call does not keep the only P ----------------------------- */

#define FUTEX_OK "worker: result 0xc5b9c5c86ecea0f3\nwaiter: woken\nfutex: ok\n"

Test(preload_preempt, futex_natively, .timeout = 60)
{
    pp_native("prog_preempt_futex", NULL, FUTEX_OK);
}

Test(preload_preempt, futex_one_p, .timeout = 60)
{
    pp_preloaded("prog_preempt_futex", NULL, "GOSHIM_PROCS=1", FUTEX_OK);
}

/* ---- the program's own SIGURG handler ------------------------------------------------ */

#define SIGURG_OK "sigurg: app handler ran 100 times\n"

Test(preload_preempt, sigurg_natively, .timeout = 60)
{
    pp_native("prog_preempt_sigurg", NULL, SIGURG_OK);
}

/* Spinners preempted by goshim's SIGURG every ~1 ms while main raises its own. */
Test(preload_preempt, sigurg_app_handler_one_p, .timeout = 60)
{
    struct pp_stats s =
        pp_preloaded("prog_preempt_sigurg", NULL, "GOSHIM_PROCS=1 GOSHIM_PREEMPT=1", SIGURG_OK);

    cr_assert_geq(s.done, 1, "main ran again between its signals without a preemption?");
}

Test(preload_preempt, sigurg_app_handler_default_slice, .timeout = 60)
{
    struct pp_stats s = pp_preloaded("prog_preempt_sigurg", NULL, "GOSHIM_PROCS=1", SIGURG_OK);

    cr_assert_geq(s.done, 1, "main ran again between its signals without a preemption?");
}

Test(preload_preempt, sigurg_app_handler_two_p, .timeout = 60)
{
    pp_preloaded("prog_preempt_sigurg", NULL, "GOSHIM_PROCS=2 GOSHIM_PREEMPT=1", SIGURG_OK);
}

/* ---- a G that stays away from goshim does not keep the only P ------------------------ */

Test(preload_preempt, stuck_natively, .timeout = 60)
{
    pp_native("prog_preempt_stuck", "qsort", "qsort: counter advanced while sorting\n");
    pp_native("prog_preempt_stuck", "asm", "asm futex: woken\n");
}

/* Refused again and again (qsort's frames are on its stack): its P is
 * handed to another M, where the counter runs, while it sorts on. The
 * hand-off is on by default. */
Test(preload_preempt, stuck_in_libc_hands_off_its_p, .timeout = 90)
{
    struct pp_stats s = pp_preloaded("prog_preempt_stuck", "qsort", "GOSHIM_PROCS=1",
                                     "qsort: counter advanced while sorting\n");
    cr_assert_geq(s.handoffs, 1, "no hand-off (requests %ld, refused %ld)", s.requests, s.refused);
}

/* GOSHIM_PREEMPT_HANDOFF=0 really turns the hand-off off: with one P the
 * counter cannot run before the sort ends. */
Test(preload_preempt, stuck_in_libc_without_handoff, .timeout = 90)
{
    struct pp_stats s =
        pp_preloaded("prog_preempt_stuck", "qsort", "GOSHIM_PROCS=1 GOSHIM_PREEMPT_HANDOFF=0",
                     "qsort: counter did not advance while sorting\n");
    cr_assert_eq(s.handoffs, 0);
}

/* Blocked in a futex system call made by an inline syscall instruction:
 * the other thread still runs (the G is preempted where the call returns,
 * or its P handed off). */
Test(preload_preempt, stuck_in_raw_syscall_instruction_one_p, .timeout = 60)
{
    struct pp_stats s =
        pp_preloaded("prog_preempt_stuck", "asm", "GOSHIM_PROCS=1", "asm futex: woken\n");
    cr_assert_geq(s.done + s.handoffs, 1, "neither a preemption nor a hand-off");
}

/* ---- the kernel's slice policy (the default) ---------------------------------------- */

#define SPINNERS_OK(n) "worker did 2000 units; " #n " spinners stopped\n"

Test(preload_preempt, spinners_natively, .timeout = 60)
{
    pp_native("prog_spinners", "3", SPINNERS_OK(3));
    pp_native("prog_spinners", "0", SPINNERS_OK(0));
}

/*
 * Three spinners and a worker on one P: the worker finishes (it runs at all
 * only because spinners are preempted), slices are cut short because the
 * worker waits, and the spinners, preempted with no call in between, are
 * sent behind it.
 */
static void spinners_yield(const char *env)
{
    struct pp_stats s = pp_preloaded("prog_spinners", "3", env, SPINNERS_OK(3));

    cr_assert_geq(s.cut, 1, "no slice was cut short for the waiting worker (%s; preemptions %ld)",
                  env, s.done);
    cr_assert_geq(s.demoted, 1, "no spinner was demoted (%s; preemptions %ld, cut %ld)", env,
                  s.done, s.cut);
    /* At one P (at two the slice timers rotate them, seldom sysmon), once preempted, a
     * spinner is cut at the wake cut for the worker (cut_for). */
    if (strstr(env, "PROCS=1"))
        cr_assert_geq(s.wake, 1,
                      "no spinner's slice was cut at the wake cut for the woken worker (%s; "
                      "cut %ld)",
                      env, s.cut);
    cr_assert_leq(s.demoted, s.done, "more demotions (%ld) than preemptions (%ld)", s.demoted,
                  s.done);
}

Test(preload_preempt, spinners_yield_to_the_worker_one_p, .timeout = 60)
{
    spinners_yield("GOSHIM_PROCS=1");
}

Test(preload_preempt, spinners_yield_to_the_worker_two_p, .timeout = 60)
{
    spinners_yield("GOSHIM_PROCS=2");
}

#define WAKE_CUT_ROUNDS 200
#define WAKE_CUT_OK     "worker did 200 bursts; ticker woke\n"

Test(preload_preempt, wake_cut_natively, .timeout = 60)
{
    pp_native("prog_wake_cut", "200 500", WAKE_CUT_OK);
}

/*
 * A thread whose bursts (0.5 ms) end in a sleep of its own, beside a ticker that wakes
 * every 0.2 ms, at one P (a 0.7 ms slice): its slices are not cut at the wake cut, half
 * the slice, for the ticker, as the kernel leaves a task it has just picked its slice;
 * only one whose last run ended in a preemption is (the spinners above). Cut at half the
 * slice whenever a woken thread waited, such a thread took 1.10x native's time in
 * mariadb's query threads; here nearly every burst was cut.
 */
Test(preload_preempt, threads_that_wait_of_their_own_keep_their_slice_one_p, .timeout = 60)
{
    struct pp_stats s = pp_preloaded("prog_wake_cut", "200 500", "GOSHIM_PROCS=1", WAKE_CUT_OK);

    cr_assert_leq(s.wake, WAKE_CUT_ROUNDS / 10,
                  "%ld of %d bursts were cut at the wake cut (%ld slices cut in all)", s.wake,
                  WAKE_CUT_ROUNDS, s.cut);
}

/*
 * Threads preempted while nothing waits in the global queue stay behind the
 * others of their P, on its CPU's caches, as the kernel rotates tasks on
 * their CPU: here nothing ever readies a thread from outside a P, so none
 * should go there. Sent to the global queue, each spinner ran next on
 * whichever P looked first (lbzip2's decoders: 1.4x native's CPU time).
 */
Test(preload_preempt, preempted_threads_stay_on_their_p, .timeout = 60)
{
    struct pp_stats s = pp_preloaded("prog_spinners", "3", "GOSHIM_PROCS=2", SPINNERS_OK(3));

    cr_assert_geq(s.done, 2, "fewer than 2 preemptions (%ld): nothing to judge", s.done);
    cr_assert_leq(4 * s.to_global, s.done,
                  "%ld of %ld preempted threads went to the global queue, with nothing waiting "
                  "there",
                  s.to_global, s.done);
}

/*
 * A worker and one spinner on two Ps: nobody waits, no call to retake, so sysmon has
 * nothing to look at. It begins as after an idle spell (sysmon.c); it began at 20 us a look
 * for its first 50 rounds, a wake-up each (some 20 us of CPU on a virtual machine), 71-74
 * rounds in this run of a few milliseconds, where now 17-24 in 170 ms. Past its backoff it
 * still looks every 10 ms while a G runs, so a run the machine's load stretches looks more:
 * 60-70 rounds in 630-673 ms beside three more copies, 66 in the suite's two jobs once,
 * over a fixed bound of 60. The bound grows with the run: 40 and one per 10 ms.
 */
Test(preload_preempt, sysmon_begins_without_a_burst_of_looks, .timeout = 60)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct pp_stats s = pp_preloaded("prog_spinners", "1", "GOSHIM_PROCS=2", SPINNERS_OK(1));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    long most = 40 + ms / 10;
    cr_assert_geq(s.rounds, 1, "no sysmon_rounds in the stats");
    cr_assert_lt(s.rounds, most, "sysmon looked %ld times in %ld ms with nothing to serve (%ld)",
                 s.rounds, ms, most);
}

/* Alone (the main thread, the only one), a CPU-bound thread is never preempted. */
Test(preload_preempt, lone_thread_never_preempted, .timeout = 60)
{
    const char *envs[] = {"GOSHIM_START=now GOSHIM_PROCS=1", "GOSHIM_START=now GOSHIM_PROCS=2",
                          "GOSHIM_START=now GOSHIM_PROCS=2 GOSHIM_PREEMPT=kernel"};
    for (size_t i = 0; i < sizeof envs / sizeof envs[0]; i++) {
        struct pp_stats s = pp_preloaded("prog_spinners", "0", envs[i], SPINNERS_OK(0));
        cr_assert_eq(s.requests, 0, "%s: %ld preemption requests with nobody waiting", envs[i],
                     s.requests);
        cr_assert_eq(s.cut, 0, "%s: %ld slices cut with nobody waiting", envs[i], s.cut);
        cr_assert_eq(s.tickcuts, 0, "%s: %ld slice-timer preemptions with nobody waiting", envs[i],
                     s.tickcuts);
    }
}

/* A fixed GOSHIM_PREEMPT keeps Go's rule: the lone thread is preempted too. */
Test(preload_preempt, fixed_slice_preempts_a_lone_thread, .timeout = 60)
{
    struct pp_stats s = pp_preloaded(
        "prog_spinners", "0", "GOSHIM_START=now GOSHIM_PROCS=1 GOSHIM_PREEMPT=1", SPINNERS_OK(0));
    cr_assert_geq(s.requests, 1, "no preemption request at a fixed 1 ms slice");
    cr_assert_eq(s.cut, 0, "a fixed slice counted %ld slices cut for waiters", s.cut);
    cr_assert_eq(s.ticks, 0, "a fixed slice is sysmon's: yet %ld slice-timer signals", s.ticks);
}

/* ---- threads that only compute take turns at the tick, by their Ms' own timers -------- */

static const char *rotate_expected(void)
{
    static char want[256];
    if (!want[0]) {
        char out[256];
        int st = run_native("prog_preempt_rotate", NULL, NULL, out, sizeof out);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "prog_preempt_rotate fails natively:\n%s",
                  out);
        cr_assert(strstr(out, "took turns"), "natively the three threads did not overlap:\n%s",
                  out);
        snprintf(want, sizeof want, "%s", out);
    }
    return want;
}

/*
 * More computing threads than Ps: they take turns (all three overlap in
 * time), and the preemptions come from the Ms' CPU-time slice timers, at
 * the kernel's tick, not from sysmon's signals (each of which costs a
 * wake-up and a cross-CPU interrupt). sysmon may ask while the threads
 * are new (woken waiters get the base slice) or on a loaded machine; the
 * timers must have done most.
 */
static void rotate(const char *args, const char *env)
{
    struct pp_stats s = pp_preloaded("prog_preempt_rotate", args, env, rotate_expected());
    cr_assert_geq(s.tickcuts, 1,
                  "%s: no preemption by a slice timer (%ld signals; %ld timers refused; sysmon "
                  "asked %ld times, handed %ld Ps off)",
                  env, s.ticks, s.timerfail, s.requests, s.handoffs);
    cr_assert_geq(2 * s.tickcuts, s.done,
                  "%s: slice timers began %ld of %ld preemptions; sysmon asked %ld times, handed "
                  "%ld Ps off (%ld timers refused)",
                  env, s.tickcuts, s.done, s.requests, s.handoffs, s.timerfail);
}

Test(preload_preempt, computing_threads_rotate_by_slice_timers_one_p, .timeout = 60)
{
    rotate(NULL, "GOSHIM_PROCS=1");
}

Test(preload_preempt, computing_threads_rotate_by_slice_timers_two_p, .timeout = 60)
{
    rotate(NULL, "GOSHIM_PROCS=2");
}

/*
 * The same walked by libunwind alone: its steps take its cache's lock (sigprocmask,
 * pthread_mutex_lock), goshim's wrappers, on the preempted thread. Counted as the thread's
 * own calls, they made every spinner look like a thread that makes calls, a waiter sysmon
 * serves at the base slice: 1,800 of sysmon's cuts a run and no slice-timer preemption.
 */
Test(preload_preempt, computing_threads_rotate_by_slice_timers_libunwind_walk, .timeout = 60)
{
    rotate(NULL, "GOSHIM_PROCS=1 GOSHIM_PREEMPT_WALK=libunwind");
}

/* Threads that compute and make a call now and then (a write every 50,000 steps) take turns
 * too, on one P and on two. */
Test(preload_preempt, threads_making_calls_take_turns, .timeout = 60)
{
    const char *envs[] = {"GOSHIM_PROCS=1", "GOSHIM_PROCS=2"};
    for (size_t i = 0; i < sizeof envs / sizeof envs[0]; i++) {
        struct pp_stats s =
            pp_preloaded("prog_preempt_rotate", "calls", envs[i], rotate_expected());
        cr_assert_geq(s.done, 1, "%s: the threads took turns without a preemption", envs[i]);
    }
}

/*
 * Threads that compute and read a file now and then compute: file work waits for nobody
 * (goshim_active_file, shim/shim.h), so their slice timers rotate them at the kernel's tick,
 * and sysmon does not cut their slices short for one another as for threads woken or making
 * calls on descriptors that wait (rg -j4, whose threads work through files: 1.11x native's
 * time when each read made its thread such a call-maker).
 */
Test(preload_preempt, threads_doing_file_work_rotate_by_slice_timers, .timeout = 60)
{
    rotate("files", "GOSHIM_PROCS=1");
    rotate("files", "GOSHIM_PROCS=2");
}

/* Timers are not inherited by fork: the child's M makes its own. */
Test(preload_preempt, computing_threads_rotate_in_a_fork_child, .timeout = 60)
{
    rotate("fork", "GOSHIM_PROCS=1");
}

/* ---- code no unwinder can walk -------------------------------------------------------- */

#define JIT_OK "jit thread stopped after the worker's 200 units\n"

Test(preload_preempt, jit_natively, .timeout = 60)
{
    pp_native("prog_jit_spin", NULL, JIT_OK);
}

/* A loop in generated code never passes the walk: its P is handed off, so
 * the worker runs on the only P and ends the loop. */
static void jit_handed_off(const char *env)
{
    struct pp_stats s = pp_preloaded("prog_jit_spin", NULL, env, JIT_OK);
    cr_assert_geq(s.handoffs, 1, "%s: the JIT spinner's P was not handed off (refused %ld)", env,
                  s.refused);
}

Test(preload_preempt, jit_spinner_hands_off_one_p, .timeout = 60)
{
    jit_handed_off("GOSHIM_PROCS=1");
}

Test(preload_preempt, jit_spinner_hands_off_fixed_slice, .timeout = 60)
{
    jit_handed_off("GOSHIM_PROCS=1 GOSHIM_PREEMPT=10");
}

/* ---- each unwinder alone (GOSHIM_PREEMPT_WALK=libgcc, =libunwind) ------------------ */

static const char *const walkers[] = {"libgcc", "libunwind"};

/* Their verdicts are the same: a spinner is preempted, a thread inside qsort's
 * comparator is not (strict checks it never is). */
Test(preload_preempt, each_walk_preempts_a_spinner, .timeout = 60)
{
    for (size_t i = 0; i < 2; i++) {
        char env[96];
        snprintf(env, sizeof env, "GOSHIM_PROCS=1 GOSHIM_PREEMPT_WALK=%s", walkers[i]);
        struct pp_stats s = pp_preloaded("prog_preempt_spin", NULL, env, SPIN_ADVANCED);
        cr_assert_geq(s.done, 1, "%s: the spinner advanced without a preemption?", env);
    }
}

Test(preload_preempt, each_walk_refuses_inside_libc, .timeout = 120)
{
    for (size_t i = 0; i < 2; i++) {
        char env[64];
        snprintf(env, sizeof env, "GOSHIM_PREEMPT_WALK=%s", walkers[i]);
        libc_strict(env);
    }
}

/* ---- stacks the walk must refuse or pass ---------------------------------------------- */

#define WALK_OK "walk: ok\n"

Test(preload_preempt, walk_natively, .timeout = 60)
{
    pp_native("prog_preempt_walk", "jit", WALK_OK);
    pp_native("prog_preempt_walk", "signal", WALK_OK);
    pp_native("prog_preempt_walk", "deep:100", WALK_OK);
    pp_native("prog_preempt_walk", "deep:300", WALK_OK);
}

/*
 * One P, without the hand-off: the subject is preempted between its rounds
 * (so the watcher runs), never inside its context (strict; refused) or
 * also inside it (seen), with each unwinder alone and with both.
 */
static void walk_case(const char *args, bool refuse)
{
    static const char *const walks[] = {"libgcc", "libunwind", "both"};
    for (size_t i = 0; i < 3; i++) {
        char env[128];
        snprintf(env, sizeof env, "GOSHIM_PROCS=1 GOSHIM_PREEMPT_HANDOFF=0 GOSHIM_PREEMPT_WALK=%s",
                 walks[i]);
        struct pp_stats s = pp_preloaded("prog_preempt_walk", args, env, WALK_OK);
        cr_assert_gt(s.done, 0, "%s (%s): no preemption (refused %ld)", args, env, s.refused);
        if (refuse)
            cr_assert_gt(s.refused, 0, "%s (%s): nothing refused (preemptions %ld)", args, env,
                         s.done);
    }
}

/* Generated code without unwind information below the computing callback. */
Test(preload_preempt, walk_refuses_a_jit_frame, .timeout = 120)
{
    walk_case("jit strict", true);
}

/* A signal handler: the signal frame (libc's restorer) below it. */
Test(preload_preempt, walk_refuses_a_signal_frame, .timeout = 120)
{
    walk_case("signal strict", true);
}

/* Deeper than the walk goes (256 frames): refused. */
Test(preload_preempt, walk_refuses_a_recursion_deeper_than_it_goes, .timeout = 120)
{
    walk_case("deep:300 strict", true);
}

/* 100 frames of the program's own: passed, and preempted there. */
Test(preload_preempt, walk_passes_a_deep_recursion, .timeout = 120)
{
    walk_case("deep:100 seen", false);
}

/* ---- a thread looping between libc and goshim does not keep the only P --------------- */

#define LIBC_LOOP_OK "main woke 5 times while the looper ran\n"

Test(preload_preempt, libc_loop_natively, .timeout = 60)
{
    pp_native("prog_libc_loop", NULL, LIBC_LOOP_OK);
}

/* Refused in libc, it yields at its next wrapped call (its gate), or its P is handed off
 * and, back at its next wrapped call, it goes behind main, whose sleep is due (else it would
 * hang here). */
Test(preload_preempt, libc_loop_lets_a_sleeper_wake_one_p, .timeout = 60)
{
    struct pp_stats s = pp_preloaded("prog_libc_loop", NULL, "GOSHIM_PROCS=1", LIBC_LOOP_OK);
    cr_assert_geq(s.handoffs + s.gate, 1,
                  "main woke without the looper yielding at a call or a hand-off of its P?");
}

/* A looper whose wrapped calls are system calls (sysmon sees them) is asked to yield at its
 * next one, a safe point, with no signal, walk or refusal: gate preemptions. Before, its
 * signals landed in libc, refused, until its P was handed off. */
Test(preload_preempt, libc_loop_making_calls_yields_at_a_call_one_p, .timeout = 60)
{
    pp_native("prog_libc_loop", "5 read", LIBC_LOOP_OK);
    struct pp_stats s = pp_preloaded("prog_libc_loop", "5 read", "GOSHIM_PROCS=1", LIBC_LOOP_OK);
    cr_assert_geq(s.gate, 1, "the looper never yielded at a call (handoffs %ld, refused %ld)",
                  s.handoffs, s.refused);
    cr_assert_geq(s.requests + s.tickcuts, s.done, "more preemptions than were asked");
}

Test(preload_preempt, libc_loop_lets_a_sleeper_wake_fixed_slice, .timeout = 60)
{
    pp_preloaded("prog_libc_loop", NULL, "GOSHIM_PROCS=1 GOSHIM_PREEMPT=10", LIBC_LOOP_OK);
}

/*
 * A frame whose unwind info sends the walk to unmapped memory (node's V8 code did, and
 * its main thread died of SIGSEGV in libgcc: 5 runs in 60 of the soak at P=2): the fault
 * refuses that preemption (walk_faults counts it) and the program runs on, as natively.
 */
Test(preload_preempt, walk_that_faults_refuses, .timeout = 60)
{
    static char nat[1 << 12], out[1 << 14];
    int sn = run_native("prog_preempt_badcfi", NULL, NULL, nat, sizeof nat);
    cr_assert(WIFEXITED(sn) && WEXITSTATUS(sn) == 0, "natively: status %d\n%s", sn, nat);
    for (int i = 0; i < 2; i++) { /* walkers[]: libgcc, libunwind */
        char env[128];
        snprintf(env, sizeof env, "GOSHIM_PROCS=1 GOSHIM_STATS=1 GOSHIM_PREEMPT_WALK=%s",
                 walkers[i]);
        int st = run_preloaded("prog_preempt_badcfi", NULL, env, out, sizeof out);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0 && strstr(out, nat),
                  "under %s: status %d\n%s", env, st, out);
        long faults = stat_of(out, "walk_faults");
        cr_assert(faults >= (i == 0 ? 1 : 0), "under %s: walk_faults=%ld\n%s", env, faults, out);
    }
}
