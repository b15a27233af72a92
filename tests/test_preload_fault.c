/*
 * Fault injection under LD_PRELOAD (GOSHIM_FAULT, sched/fault.c): for each
 * kind, the program sees what the kernel or glibc could give it - its
 * native output, or pthread_create's EAGAIN - with one line from goshim
 * saying what failed, and never a crash, a hang or lost output. A
 * malformed list names its bad item and the program runs without faults.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "tests/preload_helpers.h"

#define OUT (1 << 16)

/* Take goshim's own lines out of out; return how many said an injected failure. */
static int strip_goshim(char *out)
{
    int injected = 0;
    char *line = out, *dst = out;
    while (*line) {
        char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line + 1) : strlen(line);
        if (!strncmp(line, "goshim", 6)) {
            injected += memmem(line, len, "[injected by GOSHIM_FAULT]", 26) != NULL;
        } else {
            memmove(dst, line, len);
            dst += len;
        }
        line += len;
    }
    *dst = '\0';
    return injected;
}

/* prog args under goshim with env: it must exit 0; out gets its output without goshim's
 * lines; returns the count of injected-failure lines. */
static int fault_run(const char *prog, const char *args, const char *env, char *out)
{
    struct pp_argv a;
    int st = run_preloaded(prog, pp_argv(&a, prog, args), env, out, OUT);
    cr_assert(WIFEXITED(st), "%s %s (%s) died: status %d\n%s", prog, args ? args : "", env, st,
              out);
    cr_assert_eq(WEXITSTATUS(st), 0, "%s %s (%s) failed:\n%s", prog, args ? args : "", env, out);
    return strip_goshim(out);
}

/* prog args under env prints as natively (line order ignored); returns the injected lines. */
static int fault_same_as_native(const char *prog, const char *args, const char *env)
{
    static char nat[OUT], pre[OUT];
    struct pp_argv a;
    int st = run_native(prog, pp_argv(&a, prog, args), NULL, nat, sizeof nat);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s natively: status %d\n%s", prog, st, nat);
    int n = fault_run(prog, args, env, pre);
    sort_lines(nat);
    sort_lines(pre);
    cr_assert_str_eq(pre, nat, "%s %s prints differently under goshim (%s)", prog, args ? args : "",
                     env);
    return n;
}

/* prog_fault_create's counts, from its stderr line. */
static void created(const char *out, int *made, int *eagain)
{
    const char *p = strstr(out, "created=");
    cr_assert(p && sscanf(p, "created=%d eagain=%d", made, eagain) == 2, "no counts in:\n%s", out);
}

static void create_all_fail(const char *args, const char *env)
{
    static char out[OUT];
    int made, eagain;
    int n = fault_run("prog_fault_create", args, env, out);
    created(out, &made, &eagain);
    cr_assert(made == 0 && eagain == 16, "%s %s: %d created, %d EAGAIN, want 0 and 16\n%s", env,
              args, made, eagain, out);
    cr_assert_eq(n, 1, "%s: %d lines about the injected failure, want 1", env, n);
}

/* The default stack is bound with the TCB at pthread_create; a 32 KiB one too small for a
 * TCB, and every stack in errno mode, were mapped when the thread first ran, where a
 * refused mapping aborted the process. */
Test(preload_fault, stack_always_is_eagain, .timeout = 60)
{
    create_all_fail("16", "GOSHIM_PROCS=1 GOSHIM_FAULT=stack:1");
    create_all_fail("16", "GOSHIM_PROCS=2 GOSHIM_FAULT=stack:1");
    create_all_fail("16 small", "GOSHIM_PROCS=2 GOSHIM_FAULT=stack:1");
    create_all_fail("16", "GOSHIM_PROCS=2 GOSHIM_TLS=errno GOSHIM_FAULT=stack:1");
}

Test(preload_fault, stack_one_in_three, .timeout = 60)
{
    static char out[OUT];
    int made, eagain;
    fault_run("prog_fault_create", "64 small", "GOSHIM_PROCS=2 GOSHIM_FAULT=stack:1/3,seed:7", out);
    created(out, &made, &eagain);
    cr_assert(made + eagain == 64 && made > 0 && eagain > 0, "%d created, %d EAGAIN\n%s", made,
              eagain, out);
}

/* seed 3 refuses the first four Ms: the thread blocked in flock holds the only M, and the
 * sleeper's timer waited for an M that nobody tried to make again. */
Test(preload_fault, m_refused_is_made_again, .timeout = 60)
{
    int n = fault_same_as_native("prog_fault_blocked", NULL,
                                 "GOSHIM_PROCS=1 GOSHIM_FAULT=m:1/2,seed:3");
    cr_assert_eq(n, 1, "%d lines about the injected failure, want 1", n);
    fault_same_as_native("prog_fault_blocked", NULL, "GOSHIM_PROCS=2 GOSHIM_FAULT=m:1/2,seed:3");
    fault_same_as_native("prog_thread_basic", NULL, "GOSHIM_PROCS=2 GOSHIM_FAULT=m:1");
}

/* Without a poller, a partly done blocking write went back short, and accept on a
 * listening socket goshim had made non-blocking said EAGAIN. */
Test(preload_fault, poller_never_made, .timeout = 120)
{
    static const char *const progs[] = {"prog_io_edges", "prog_net_echo", "prog_pipe_pingpong",
                                        "prog_poll_select", "prog_timeouts"};
    for (size_t i = 0; i < sizeof progs / sizeof progs[0]; i++) {
        int n = fault_same_as_native(progs[i], NULL, "GOSHIM_PROCS=1 GOSHIM_FAULT=poller:1");
        cr_assert_geq(n, 1, "%s: no line about the injected failure", progs[i]);
        fault_same_as_native(progs[i], NULL, "GOSHIM_PROCS=2 GOSHIM_FAULT=poller:1");
    }
    fault_same_as_native("prog_accept_storm", NULL,
                         "GOSHIM_PROCS=2 GOSHIM_FAULT=poller:1/2,seed:1");
}

/* Without a poller a recv with SO_RCVTIMEO is the kernel's, which any caught signal ends
 * with EINTR: SIGURG, ignored by the program but caught by goshim (its preemption signal),
 * did, and so could a preemption request sent just before the call (poller_never_made,
 * prog_timeouts, once under a loaded suite). */
Test(preload_fault, ignored_signal_does_not_cut_a_timed_recv_short, .timeout = 60)
{
    fault_same_as_native("prog_rcvtimeo_signal", NULL, "GOSHIM_PROCS=1 GOSHIM_FAULT=poller:1");
    fault_same_as_native("prog_rcvtimeo_signal", NULL, "GOSHIM_PROCS=2 GOSHIM_FAULT=poller:1");
}

/* Computing threads still take turns at one P: sysmon times the slices. */
Test(preload_fault, timer_never_made, .timeout = 60)
{
    static char nat[OUT];
    int st = run_native("prog_preempt_rotate", NULL, NULL, nat, sizeof nat);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0 && strstr(nat, "took turns"), "natively:\n%s",
              nat);
    int n =
        fault_same_as_native("prog_preempt_rotate", NULL, "GOSHIM_PROCS=1 GOSHIM_FAULT=timer:1");
    cr_assert_eq(n, 1, "%d lines about the injected failure, want 1", n);
}

/*
 * A refused slice timer is asked for again: RLIMIT_SIGPENDING counts the
 * signals of all the user's processes, so another program's burst refuses
 * a timer for a moment. Seed 1 refuses the first one. Before, one refusal
 * left the rotation of every P to sysmon for the rest of the run: not one
 * preemption began at a timer's tick again (0 or 1 of 160-245).
 */
Test(preload_fault, timer_refused_is_asked_again, .timeout = 60)
{
    static char nat[OUT], pre[OUT];
    static const char env[] = "GOSHIM_STATS=1 GOSHIM_PROCS=2 GOSHIM_FAULT=timer:1/2,seed:1";
    int st = run_native("prog_preempt_rotate", NULL, NULL, nat, sizeof nat);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0 && strstr(nat, "took turns"), "natively:\n%s",
              nat);
    struct pp_argv a;
    st = run_preloaded("prog_preempt_rotate", pp_argv(&a, "prog_preempt_rotate", NULL), env, pre,
                       OUT);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: status %d\n%s", env, st, pre);
    long refused = stat_of(pre, "timer_fails"), cuts = stat_of(pre, "tick_cuts");
    long done = stat_of(pre, "preemptions");
    cr_assert_geq(refused, 1, "%s: no slice timer refused:\n%s", env, pre);
    cr_assert_geq(2 * cuts, done, "%s: slice timers began %ld of %ld preemptions:\n%s", env, cuts,
                  done, pre);
    strip_goshim(pre);
    cr_assert_str_eq(pre, nat, "prog_preempt_rotate prints differently under goshim (%s)", env);
}

/* A refused bell is rung again: a thread that computes never calls into goshim to find
 * the signal marked, and one in pause() is woken only by the kernel. At one P the spinner
 * takes the mark itself when it resumes, and rings its own thread: refused, that bell went
 * to the router, which found the mark taken and dropped it (a hang, seed 1). */
Test(preload_fault, sigqueue_refused_is_sent_again, .timeout = 120)
{
    for (int seed = 1; seed <= 6; seed++) {
        char env[96];
        snprintf(env, sizeof env, "GOSHIM_PROCS=%d GOSHIM_FAULT=sigqueue:1/2,seed:%d", seed % 2 + 1,
                 (seed + 1) / 2);
        int n = fault_same_as_native("prog_fault_signal", NULL, env);
        cr_assert_eq(n, 1, "%s: %d lines about the injected failure, want 1", env, n);
    }
}

static void bad_spec(const char *spec, const char *part)
{
    static char out[OUT];
    char env[128], want[160];
    struct pp_argv a;
    snprintf(env, sizeof env, "GOSHIM_PROCS=2 GOSHIM_FAULT=%s", spec);
    int st =
        run_preloaded("prog_fault_create", pp_argv(&a, "prog_fault_create", "8"), env, out, OUT);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: status %d\n%s", env, st, out);
    snprintf(want, sizeof want, "goshim: GOSHIM_FAULT=%s is not valid: '%s'", spec, part);
    cr_assert(strstr(out, want), "%s: no message naming '%s':\n%s", env, part, out);
    cr_assert(strstr(out, "created=8 eagain=0"), "%s: faults were injected:\n%s", env, out);
    cr_assert_null(strstr(out, "injecting faults"), "%s: armed anyway:\n%s", env, out);
}

Test(preload_fault, bad_spec_is_named_and_ignored, .timeout = 60)
{
    bad_spec("stack:50", "stack:50");
    bad_spec("m:1/5,stak:1", "stak:1");
    bad_spec("timer:1,timer:1/2", "timer:1/2");
    bad_spec("seed:x,poller:1", "seed:x");
    bad_spec("sigqueue:1/0", "sigqueue:1/0");
}
