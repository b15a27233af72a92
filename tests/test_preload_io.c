/*
 * Blocking calls under LD_PRELOAD: the netpoller (sockets and pipes park
 * the G, not the M), the hand-off of the P around calls that block in the
 * kernel, and timers. Each tests/progs program runs natively and under
 * libgoshim.so and must print the same (GOSHIM_STATS=1's line proves its
 * threads were Gs), with one P and with the default number. Where goshim
 * differs from Linux on purpose (close() wakes a blocked reader with
 * EBADF) the program runs under goshim only and the exact output is
 * asserted; the native run documents the difference.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/preload_helpers.h"

/*
 * How many "goshim stats:" lines in out name a G count (gs_created=), and
 * the first and the last count (strip_stats returns the last).
 */
static int stats_gs(const char *out, long *first, long *last)
{
    int n = 0;

    *first = *last = -1;
    for (const char *line = out; *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line + 1) : strlen(line);
        const char *p = strncmp(line, "goshim stats:", 13) ? NULL : strstr(line, "gs_created=");

        if (p && p < line + len) {
            *last = atol(p + 11);
            if (n++ == 0)
                *first = *last;
        }
        line += len;
    }
    return n;
}

/*
 * The G counts a preloaded run printed: the last one (the program's own
 * process prints its GOSHIM_STATS line at exit) must be at least min_gs.
 * With min_child_gs > 0 the program also runs a child process under goshim
 * and reaps it before exiting (prog_net_echo's clients): then there must be
 * exactly two G counts, the child's first, with at least min_child_gs.
 */
static void net_check_gs(const char *prog, const char *out, long min_gs, long min_child_gs)
{
    long first, last;
    int n = stats_gs(out, &first, &last);

    cr_assert_gt(n, 0, "%s: no \"goshim stats:\" line with gs_created= under goshim", prog);
    if (min_child_gs > 0) {
        cr_assert_eq(n, 2, "%s: want 2 G counts (child and parent process), got %d", prog, n);
        cr_assert_geq(first, min_child_gs, "%s: only %ld Gs ran in the child process", prog, first);
    }
    cr_assert_geq(last, min_gs, "%s: only %ld Gs ran under goshim", prog, last);
}

/*
 * compare_with_native (tests/preload_helpers.h) with arguments: prog args
 * runs natively and under goshim with GOSHIM_STATS=1 plus env; both must
 * exit 0 and print the same (sorted: in any line order), and at least
 * min_gs Gs must have run (min_child_gs: see net_check_gs).
 */
static void net_compare_procs(const char *prog, const char *args, const char *env, long min_gs,
                              int sorted, long min_child_gs)
{
    static char nat[1 << 16], pre[1 << 16];
    struct pp_argv a;
    char penv[256];
    int sn, sp;

    snprintf(penv, sizeof penv, "GOSHIM_STATS=1 %s", env ? env : "");
    sn = run_native(prog, pp_argv(&a, prog, args), NULL, nat, sizeof nat);
    sp = run_preloaded(prog, pp_argv(&a, prog, args), penv, pre, sizeof pre);
    cr_assert(WIFEXITED(sn), "%s %s natively: status %d\n%s", prog, args ? args : "", sn, nat);
    cr_assert_eq(WEXITSTATUS(sn), 0, "%s %s fails natively:\n%s", prog, args ? args : "", nat);
    cr_assert(WIFEXITED(sp), "%s %s under goshim (%s) died: status %d\n%s", prog, args ? args : "",
              penv, sp, pre);
    cr_assert_eq(WEXITSTATUS(sp), 0, "%s %s fails under goshim (%s):\n%s", prog, args ? args : "",
                 penv, pre);
    net_check_gs(prog, pre, min_gs, min_child_gs);
    strip_stats(pre);
    if (sorted) {
        sort_lines(nat);
        sort_lines(pre);
    }
    cr_assert_str_eq(pre, nat, "%s %s prints differently under goshim (%s)", prog, args ? args : "",
                     penv);
}

static void net_compare(const char *prog, const char *args, const char *env, long min_gs,
                        int sorted)
{
    net_compare_procs(prog, args, env, min_gs, sorted, 0);
}

/*
 * Run prog args under goshim only (GOSHIM_STATS=1 plus env): it must exit
 * 0, print exactly want, and run at least min_gs Gs (min_child_gs: see
 * net_check_gs).
 */
static void net_preloaded_prints_procs(const char *prog, const char *args, const char *env,
                                       long min_gs, const char *want, long min_child_gs)
{
    static char out[1 << 16];
    char penv[256];

    run_preloaded_ok(prog, args, env, penv, sizeof penv, out, sizeof out);
    net_check_gs(prog, out, min_gs, min_child_gs);
    strip_stats(out);
    cr_assert_str_eq(out, want, "%s %s under goshim (%s)", prog, args ? args : "", penv);
}

static void net_preloaded_prints(const char *prog, const char *args, const char *env, long min_gs,
                                 const char *want)
{
    net_preloaded_prints_procs(prog, args, env, min_gs, want, 0);
}

/* ---- TCP echo, thread per connection ------------------------------------------------ */

/*
 * prog_net_echo serves from this process and runs its clients in a second
 * one (fork + exec of itself, LD_PRELOAD inherited), so each needs only n +
 * a few descriptors: 10,000 connections fit a 20,000 RLIMIT_NOFILE. Both
 * print a stats line; the client's comes first (the server prints its own
 * after reaping the client). The server ran main + the acceptor + n
 * connection threads as Gs (n + 2: more than the client's main + n
 * clients, so the last line cannot be the client's); the client n + 1.
 */
static void echo_under_goshim(long n, long bytes, const char *env)
{
    char args[64], want[128];

    snprintf(args, sizeof args, "%ld %ld", n, bytes);
    snprintf(want, sizeof want, "connections=%ld bytes=%ld ok\n", n, n * bytes);
    net_preloaded_prints_procs("prog_net_echo", args, env, n + 2, want, n + 1);
}

Test(preload_io, echo_10000_connections_under_goshim, .timeout = 300)
{
    echo_under_goshim(test_scale(10000), 4096, NULL);
}

Test(preload_io, echo_10000_connections_one_p, .timeout = 300)
{
    echo_under_goshim(test_scale(10000), 1024, "GOSHIM_PROCS=1");
}

Test(preload_io, echo_same_as_native, .timeout = 120)
{
    long n = test_scale(200);
    char args[64];

    snprintf(args, sizeof args, "%ld 100000", n);
    net_compare_procs("prog_net_echo", args, NULL, n + 2, 0, n + 1);
}

Test(preload_io, echo_same_as_native_one_p, .timeout = 120)
{
    long n = test_scale(200);
    char args[64];

    snprintf(args, sizeof args, "%ld 100000", n);
    net_compare_procs("prog_net_echo", args, "GOSHIM_PROCS=1", n + 2, 0, n + 1);
}

/* ---- pipes and accept ------------------------------------------------------------- */

Test(preload_io, pipe_pingpong_one_p, .timeout = 120)
{
    char args[32];

    snprintf(args, sizeof args, "%ld", test_scale(10000));
    net_compare("prog_pipe_pingpong", args, "GOSHIM_PROCS=1", 3, 0);
}

Test(preload_io, pipe_pingpong, .timeout = 120)
{
    char args[32];

    snprintf(args, sizeof args, "%ld", test_scale(10000));
    net_compare("prog_pipe_pingpong", args, NULL, 3, 0);
}

Test(preload_io, accept_storm_1000_clients, .timeout = 120)
{
    long k = test_scale(1000);
    char args[32];

    snprintf(args, sizeof args, "%ld", k);
    net_compare("prog_accept_storm", args, NULL, k + 2, 0);
}

Test(preload_io, accept_storm_one_p, .timeout = 120)
{
    long k = test_scale(1000);
    char args[32];

    snprintf(args, sizeof args, "%ld", k);
    net_compare("prog_accept_storm", args, "GOSHIM_PROCS=1", k + 2, 0);
}

/* ---- close() of a descriptor a thread is blocked on: goshim wakes it -------------- */

Test(preload_io, close_wakes_blocked_reader_with_ebadf, .timeout = 60)
{
    net_preloaded_prints("prog_close_wakes", NULL, NULL, 3, "read: EBADF\nrecv: EBADF\n");
}

Test(preload_io, close_wakes_blocked_reader_one_p, .timeout = 60)
{
    net_preloaded_prints("prog_close_wakes", NULL, "GOSHIM_PROCS=1", 3,
                         "read: EBADF\nrecv: EBADF\n");
}

/* The documented difference: natively the reader stays blocked until EOF. */
Test(preload_io, close_natively_leaves_reader_blocked, .timeout = 60)
{
    static char out[4096];
    int st = run_native("prog_close_wakes", NULL, NULL, out, sizeof out);

    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "natively: status %d\n%s", st, out);
    cr_assert_str_eq(out, "read: EOF after writer closed\nrecv: EOF after writer closed\n");
}

/* ---- non-blocking descriptors, signals, poll family --------------------------------- */

Test(preload_io, nonblocking_fds_keep_eagain, .timeout = 60)
{
    net_compare("prog_nonblock", NULL, NULL, 3, 0);
}

Test(preload_io, nonblocking_fds_keep_eagain_one_p, .timeout = 60)
{
    net_compare("prog_nonblock", NULL, "GOSHIM_PROCS=1", 3, 0);
}

Test(preload_io, signals_interrupt_blocking_calls, .timeout = 60)
{
    net_compare("prog_eintr", NULL, NULL, 6, 0);
}

Test(preload_io, signals_interrupt_blocking_calls_one_p, .timeout = 60)
{
    net_compare("prog_eintr", NULL, "GOSHIM_PROCS=1", 6, 0);
}

/* poll, select and epoll_wait with nothing ready, in a thread goshim keeps preempting:
 * never EINTR without a handler of the program's. A preemption request that landed in two
 * zero-timeout checks in a row ended the call with EINTR (prog_fork_fdlock's churn threads
 * under load; most runs at one P before the fix). */
Test(preload_io, polls_are_not_cut_short_by_goshims_own_signals, .timeout = 60)
{
    const char *want = "zero-timeout and 1 ms polls: no EINTR\n";
    expect_native_prints("prog_poll_preempted", NULL, want);
    expect_prints_at_p1_and_p2("prog_poll_preempted", NULL, want, 2);
}

/* At one P with a thread spinning, only sysmon's poll readies a reader woken every 2 ms.
 * A poll that readied a G counted as a busy round and put sysmon back to 20 us sleeps for
 * the next 50 rounds: about 22 rounds a millisecond here, a wake-up every 45 us that
 * nobody needed (mariadb's server spent a sixth of its CPU time in sysmon). Now about 2. */
Test(preload_io, a_reader_readied_by_sysmons_poll_leaves_it_asleep, .timeout = 60)
{
    static char out[1 << 14];
    char penv[128];
    run_preloaded_ok("prog_poll_busy", NULL, "GOSHIM_PROCS=1", penv, sizeof penv, out, sizeof out);
    const char *r = strstr(out, "\nran_ms=");
    cr_assert(strstr(out, "reader woke for the writer: ok\n") && r, "wrong output:\n%s", out);
    long ran = atol(r + 8), rounds = stat_of(out, "sysmon_rounds");
    cr_assert(ran > 0 && rounds > 0, "no run time or no sysmon_rounds:\n%s", out);
    cr_assert_lt(rounds, 8 * ran, "sysmon woke %ld times in %ld ms (at most 8 a ms wanted):\n%s",
                 rounds, ran, out);
}

/* writev/sendmsg over many tries, MSG_WAITALL, SO_SNDTIMEO, a writev cut short by a
 * signal (its partial count), the fortified read and recv. */
Test(preload_io, io_edges_as_natively, .timeout = 60)
{
    net_compare("prog_io_edges", NULL, NULL, 6, 0);
}

Test(preload_io, io_edges_as_natively_one_p, .timeout = 60)
{
    net_compare("prog_io_edges", NULL, "GOSHIM_PROCS=1", 6, 0);
}

Test(preload_io, poll_select_epoll_across_threads, .timeout = 60)
{
    net_compare("prog_poll_select", NULL, NULL, 40, 0);
}

Test(preload_io, poll_select_epoll_across_threads_one_p, .timeout = 60)
{
    net_compare("prog_poll_select", NULL, "GOSHIM_PROCS=1", 40, 0);
}

/* ---- timers: every timed wait ends on time, alone and all at once ------------------ */

/* 19 cases alone and in 19 threads; the mutex and join cases start one helper each time. */
Test(preload_io, timeouts_one_p, .timeout = 120)
{
    net_compare("prog_timeouts", NULL, "GOSHIM_PROCS=1", 1 + 2 + 19 + 2, 0);
}

Test(preload_io, timeouts_two_p, .timeout = 120)
{
    net_compare("prog_timeouts", NULL, "GOSHIM_PROCS=2", 1 + 2 + 19 + 2, 0);
}

/* ---- the P hand-off around calls that block in the kernel -------------------------- */

/* With one P, a reader blocked on a pipe must not stop the CPU-bound threads
 * whose completion releases it (else: a hang, caught by the timeout). */
Test(preload_io, blocked_reader_does_not_hold_the_only_p, .timeout = 60)
{
    net_compare("prog_blocking_file", "pipe", "GOSHIM_PROCS=1", 6, 0);
}

Test(preload_io, blocked_reader_default_procs, .timeout = 60)
{
    net_compare("prog_blocking_file", "pipe", NULL, 6, 0);
}

Test(preload_io, file_write_fsync_beside_cpu_threads_one_p, .timeout = 120)
{
    net_compare("prog_blocking_file", "fsync", "GOSHIM_PROCS=1", 6, 1);
}

/* What open() made is taken for a file without a look; a FIFO opened by path must still
 * time out in poll while empty, give EAGAIN once O_NONBLOCK, and a reader blocked in read()
 * on one must not hold the only P. */
Test(preload_io, opened_fds_keep_their_kind_one_p, .timeout = 60)
{
    net_compare("prog_opened_kinds", NULL, "GOSHIM_PROCS=1", 5, 0);
}

Test(preload_io, opened_fds_keep_their_kind, .timeout = 60)
{
    net_compare("prog_opened_kinds", NULL, NULL, 5, 0);
}

/* A program that opens and reads many files (ripgrep): goshim asks the kernel for the
 * kind of none of them (two system calls each, before). */
Test(preload_io, opened_files_are_not_classified, .timeout = 60)
{
    static char out[1 << 14];
    struct pp_argv a;
    int st = run_preloaded("prog_opened_kinds", pp_argv(&a, "prog_opened_kinds", "many 200"),
                           "GOSHIM_STATS=1", out, sizeof out);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "prog_opened_kinds many 200: status %d\n%s",
              st, out);
    cr_assert(strstr(out, "many: 200 files read\n"), "%s", out);
    const char *c = strstr(out, "fds_classified=");
    cr_assert(c, "no fds_classified in the stats:\n%s", out);
    cr_assert_lt(atol(c + 15), 20, "goshim classified %ld descriptors for 200 files read:\n%s",
                 atol(c + 15), out);
}

/* ---- a pipe written by a child that got its write end across exec ----------------- */

/* The reader polls, then reads the byte a child wrote (goshim issue 27 item 5). The child
 * started by posix_spawn or vfork + exec is no fork goshim sees: the pair stayed "own",
 * poll took the epoll edge the child's write raised, and the read that followed was
 * believed to find nothing and parked for an edge that never came. */
Test(preload_io, pipe_written_by_a_spawned_child, .timeout = 60)
{
    net_compare("prog_pipe_child_writer", "spawn", NULL, 11, 0);
    net_compare("prog_pipe_child_writer", "spawn", "GOSHIM_PROCS=1", 11, 0);
}

Test(preload_io, pipe_written_by_a_vforked_child, .timeout = 60)
{
    net_compare("prog_pipe_child_writer", "vfork", NULL, 11, 0);
    net_compare("prog_pipe_child_writer", "vfork", "GOSHIM_PROCS=1", 11, 0);
}

/*
 * tests/real/py_pool_exit.py METHOD with /usr/bin/python3 (Debian's; skipped without
 * it), natively and under goshim at the default P and at one: the same output, exit 0.
 * The pool's worker writes its result into a pipe the interpreter polls then reads; with
 * spawn and forkserver the worker is no fork goshim sees, and the exit hung for ever.
 */
static void python_pool_exits(const char *method)
{
    static char nat[1 << 16], pre[1 << 16];
    const char *py = "/usr/bin/python3";
    char *const argv[] = {(char *)py, GOSHIM_SRC_DIR "/tests/real/py_pool_exit.py", (char *)method,
                          NULL};
    const char *envs[] = {"GOSHIM_STATS=1", "GOSHIM_STATS=1 GOSHIM_PROCS=1"};

    if (access(py, X_OK) != 0)
        cr_skip_test("%s is not installed (Debian package python3)", py);
    int sn = run_exec(py, argv, NULL, NULL, nat, sizeof nat);
    cr_assert(WIFEXITED(sn) && WEXITSTATUS(sn) == 0, "py_pool_exit.py %s natively: status %d\n%s",
              method, sn, nat);
    for (size_t i = 0; i < sizeof envs / sizeof envs[0]; i++) {
        int sp = run_exec(py, argv, envs[i], test_preload_value(), pre, sizeof pre);
        cr_assert(WIFEXITED(sp) && WEXITSTATUS(sp) == 0,
                  "py_pool_exit.py %s under goshim (%s): status %d\n%s", method, envs[i], sp, pre);
        /* Each process prints its line (the resource tracker's may come last): the
         * interpreter's ran its main thread, the pool's manager and the queue's feeder. */
        long gs = 0;
        for (const char *p = strstr(pre, "gs_created="); p; p = strstr(p + 1, "gs_created="))
            gs = atol(p + 11) > gs ? atol(p + 11) : gs;
        strip_stats(pre);
        cr_assert_geq(gs, 3, "py_pool_exit.py %s: no process ran 3 Gs under goshim (%s)", method,
                      envs[i]);
        cr_assert_str_eq(pre, nat, "py_pool_exit.py %s prints differently under goshim (%s)",
                         method, envs[i]);
    }
}

Test(preload_io, python_spawn_process_pool_exits, .timeout = 120)
{
    python_pool_exits("spawn");
}

Test(preload_io, python_forkserver_process_pool_exits, .timeout = 120)
{
    python_pool_exits("forkserver");
}

/* A process with one thread makes its blocking calls as the kernel's: no park, no netpoll,
 * no other OS thread; at start-up, and again in a forked child of a threaded process. Once
 * a second thread exists, they park as ever. prog_lone's four children have one thread
 * each, and their counters come first, in order; the parent, whose second half has two
 * threads, comes last. */
Test(preload_io, one_thread_blocks_in_the_kernel_two_park, .timeout = 120)
{
    long n = test_scale(1000);
    char want[256];
    snprintf(want, sizeof want,
             "one thread: %ld round trips, three idle waits timed out, sleep cut short\n"
             "two threads: the reader woke, %ld round trips\n"
             "forked child: %ld round trips, sleep cut short\n",
             n, n, n);
    expect_native_prints("prog_lone", NULL, want);
    /* Started at load: the lone path of a running runtime (a fork child of a threaded
     * program's), not the native one of a process that never started it. */
    static const char *envs[] = {"GOSHIM_START=now GOSHIM_PROCS=1",
                                 "GOSHIM_START=now GOSHIM_PROCS=2"};
    for (int e = 0; e < 2; e++) {
        static char out[1 << 16];
        char penv[256];
        run_preloaded_ok("prog_lone", NULL, envs[e], penv, sizeof penv, out, sizeof out);
        const char *block[6];
        int nb = 0;
        for (const char *p = out; nb < 6 && (p = strstr(p, "goshim stats: procs=")); p++)
            block[nb++] = p;
        cr_assert_eq(nb, 5, "prog_lone (%s): %d processes printed counters, not 5:\n%s", penv, nb,
                     out);
        for (int i = 0; i < 4; i++) {
            cr_assert(stat_of(block[i], "netpoll_parks") == 0 && stat_of(block[i], "parks") == 0 &&
                          stat_of(block[i], "threads") == 1,
                      "prog_lone (%s): child %d, with one thread, parked or made an OS thread:\n%s",
                      penv, i + 1, out);
        }
        cr_assert_gt(stat_of(block[4], "netpoll_parks"), 0,
                     "prog_lone (%s): with two threads, no read waited on the netpoller:\n%s", penv,
                     out);
        strip_stats(out);
        cr_assert_str_eq(out, want, "prog_lone under goshim (%s)", penv);
    }
}
