/*
 * Processes under LD_PRELOAD: fork from a threaded program (the child
 * keeps only the forking thread, on a runtime restarted around it), many
 * threads forking and exec'ing at once, system() beside running threads,
 * pthread_atfork order. tests/progs/prog_fork prints the same natively and
 * under goshim; a child that hangs because the runtime was not reset is
 * caught by the test's timeout.
 */
#include <criterion/criterion.h>

#include "tests/preload_helpers.h"

#define THREADS_OUT  "child exit status 3\nparent threads ok\n"
#define LASTEXIT_OUT "child exit status 0\nparent threads ok\n"
#define EXEC_OUT     "exec: 0 children failed, every child reported once: yes\n"
#define SYSTEM_OUT   "from system\nsystem status 5, counter advanced: yes\n"
#define SPAWN_OUT                                                                                  \
    "popen, posix_spawn and vfork from 8 threads: 8 ok\n"                                          \
    "daemon's parent exit 0; daemon: own session yes\n"
#define ATFORK_OUT "child saw BAef\nparent saw BAcd\n"
#define VFORK_CLOSE_OUT                                                                            \
    "vfork+close+exec from 8 threads: children ok yes, readers got every byte: yes\n"
#define VFORK_SIGACTION_OUT                                                                        \
    "handler still installed after the children: yes\n"                                            \
    "kill to itself ran the handler before it returned: every round\n"
#define VFORK_OTHERS_OUT                                                                           \
    "child exit 0; another thread ran meanwhile: yes; child's write seen: yes\n"

Test(preload_fork, natively, .timeout = 60)
{
    expect_native_prints("prog_fork", "threads", THREADS_OUT);
    expect_native_prints("prog_fork", "lastexit", LASTEXIT_OUT);
    expect_native_prints("prog_fork", "exec", EXEC_OUT);
    expect_native_prints("prog_fork", "system", SYSTEM_OUT);
    expect_native_prints("prog_fork", "spawn", SPAWN_OUT);
    expect_native_prints("prog_fork", "atfork", ATFORK_OUT);
    expect_native_prints("prog_vfork", "close", VFORK_CLOSE_OUT);
    expect_native_prints("prog_vfork", "others", VFORK_OTHERS_OUT);
}

/* The child makes 200 threads of its own; none of the parent's runs there. */
Test(preload_fork, child_of_a_thread_runs_threads, .timeout = 60)
{
    expect_prints_at_p1_and_p2("prog_fork", "threads", THREADS_OUT, 7);
}

/* The child's only thread calls pthread_exit: that ends the child, status 0. */
Test(preload_fork, child_ends_when_its_only_thread_exits, .timeout = 60)
{
    expect_preloaded_prints("prog_fork", "lastexit", "GOSHIM_PROCS=2", LASTEXIT_OUT, 7);
}

Test(preload_fork, many_threads_fork_and_exec_at_once, .timeout = 60)
{
    expect_preloaded_prints("prog_fork", "exec", "GOSHIM_PROCS=1", EXEC_OUT, 17);
    expect_preloaded_prints("prog_fork", "exec", NULL, EXEC_OUT, 17);
}

Test(preload_fork, system_beside_a_running_thread, .timeout = 60)
{
    expect_preloaded_prints("prog_fork", "system", "GOSHIM_PROCS=1", SYSTEM_OUT, 2);
}

Test(preload_fork, popen_posix_spawn_vfork_and_daemon, .timeout = 60)
{
    expect_preloaded_prints("prog_fork", "spawn", "GOSHIM_PROCS=1", SPAWN_OUT, 9);
    expect_preloaded_prints("prog_fork", "spawn", NULL, SPAWN_OUT, 9);
}

/* A vfork child's close is the child's own: 8 threads vfork, close the pipe another thread
 * reads and exec, 1000 rounds (GOSHIM_TEST_SCALE). Its close went through goshim's wrapper on
 * the parent's poller and woke the reader with EBADF. */
Test(preload_fork, vfork_child_close_leaves_the_parents_fds_alone, .timeout = 120)
{
    expect_prints_at_p1_and_p2("prog_vfork", "close", VFORK_CLOSE_OUT, 17);
}

/* While a vfork child waits before its exec, the parent's P goes on running other threads
 * (at one P too); the child's nanosleep is the kernel's, not a park of the parent's G (that
 * hung at GOSHIM_PROCS=1). */
Test(preload_fork, vfork_parent_waits_and_other_threads_run, .timeout = 60)
{
    expect_prints_at_p1_and_p2("prog_vfork", "others", VFORK_OTHERS_OUT, 2);
}

/* A vfork child's sigaction is the child's own (Python's _posixsubprocess resets every handler
 * in the child): it cleared the parent's record of its handlers, sigaction then reported
 * goshim's dispatcher, and kill to itself left the signal to the kernel, whose thread ran the
 * handler late (issue 27 item 6: test_multiprocessing_fork "interrupted by signal SIGINT"). */
Test(preload_fork, vfork_child_sigaction_leaves_the_parents_handlers_alone, .timeout = 60)
{
    expect_native_prints("prog_vfork_sigaction", NULL, VFORK_SIGACTION_OUT);
    expect_preloaded_prints("prog_vfork_sigaction", NULL, NULL, VFORK_SIGACTION_OUT, 2);
    expect_preloaded_prints("prog_vfork_sigaction", NULL, "GOSHIM_PROCS=1", VFORK_SIGACTION_OUT, 2);
}

/* Handlers in POSIX order, on the forking thread's TLS. */
Test(preload_fork, atfork_handlers_in_order_on_the_forking_thread, .timeout = 60)
{
    expect_preloaded_prints("prog_fork", "atfork", NULL, ATFORK_OUT, 2);
}

/* ---- programs goshim leaves alone ------------------------------------------------------ */

/* Under goshim started at load (by default a program is looked at when it makes its first
 * thread: one that makes them with clone never does): the one "staying off" line naming
 * why, no stats (the runtime never ran), and otherwise exactly the native output. */
static void stays_off(const char *prog, const char *why, const char *want)
{
    static char out[1 << 16];
    char expect[512];
    struct pp_argv a;

    expect_native_prints(prog, NULL, want);
    int st = run_preloaded(prog, pp_argv(&a, prog, NULL), "GOSHIM_STATS=1 GOSHIM_START=now", out,
                           sizeof out);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s under goshim: status %d\n%s", prog, st,
              out);
    cr_assert_eq(strip_stats(out), -1, "%s: goshim ran (stats printed) instead of staying off",
                 prog);
    snprintf(expect, sizeof expect,
             "goshim: the program %s: staying off, the program runs natively\n%s", why, want);
    sort_lines(out);
    sort_lines(expect);
    cr_assert_str_eq(out, expect, "%s under goshim", prog);
}

Test(preload_fork, a_program_with_a_go_runtime_runs_natively, .timeout = 30)
{
    stays_off("prog_go_like", "contains a Go runtime (cgo)", "go-like program ran: 42\n");
}

Test(preload_fork, a_program_making_threads_with_clone_runs_natively, .timeout = 30)
{
    stays_off("prog_clone_thread",
              "makes its threads with clone(), not pthread_create (such threads cannot run beside "
              "goshim)",
              "clone thread ran: 42\n");
}

/* A thread forks; the child locks a process-shared errorcheck mutex: the parent thread's
 * timed lock must time out. It got EDEADLK: the child's thread kept its parent's fake tid. */
Test(preload_fork, fork_child_thread_has_a_tid_of_its_own, .timeout = 60)
{
    const char *want = "timed lock of the mutex the fork child holds: ETIMEDOUT\n";
    expect_native_prints("prog_thread_facts", "forktid", want);
    expect_prints_at_p1_and_p2("prog_thread_facts", "forktid", want, 2);
}

/* seteuid in the child of a threaded parent hung: the child's restarted helper threads
 * inherited the M's GS base and cleared the M's set*id mark instead of their own. */
Test(preload_fork, setxid_in_a_fork_child_of_a_threaded_parent, .timeout = 60)
{
    const char *want = "seteuid in the fork child: returned 0\n";
    expect_native_prints("prog_thread_facts", "forksetxid", want);
    expect_prints_at_p1_and_p2("prog_thread_facts", "forksetxid", want, 3);
}

/* The children of a main thread that ran on another OS thread than its first all kept the
 * parent's tid in its TCB (glibc forks on the M's own, where the kernel writes the new
 * tid): a process-shared errorcheck mutex held by one child gave the next EDEADLK
 * (pthread_cond_broadcast/2-3 and five other Open POSIX cond tests). */
Test(preload_fork, fork_children_of_main_shared_a_tid, .timeout = 120)
{
    const char *want = "pshared: the second child waited for the first's mutex: every time\n";
    expect_native_prints("prog_fork", "pshared", want);
    expect_prints_at_p1_and_p2("prog_fork", "pshared", want, 2);
}

/* A fork child's runtime is reset when the child first needs it: each first act (a
 * handler that posts and locks, a timed wait, a fork, a yield and a sleep, a spawn) finds
 * it whole, with the parent's threads waiting, timing out, contending and yielding at the
 * fork. */
Test(preload_fork, child_finds_the_runtime_whole_whatever_it_does_first, .timeout = 240)
{
    const char *want = "children that found the runtime whole: 64 of 64\n";
    expect_native_prints("prog_fork_first", NULL, want);
    expect_prints_at_p1_and_p2("prog_fork_first", NULL, want, 7);
}

/* A thread forked on the main thread's OS thread (M0) while main ran on another: glibc forked
 * on M0's own descriptor, the main thread's, and the forking thread's malloc state replaced
 * the one main was using, then was zeroed under it (main's cache lost, two threads on one
 * cache for a moment). Not at one P, where main cannot run during the fork. The children
 * make threads that fork: glibc must list the forking M's own descriptor, and not hand its
 * stack to a new thread (they hang if it does). */
Test(preload_fork, a_fork_leaves_the_main_threads_malloc_state_alone, .timeout = 120)
{
    const char *want = "main's cache changed under it: 0 times\n"
                       "children that ran threads: 300 of 300\n";
    expect_native_prints("prog_fork_tcache", NULL, want);
    /* No preemption: one between main's free and its malloc may move main to another M's
     * cache, under load (1 run of 3 full suites, session 24): not the fork's doing. */
    expect_preloaded_prints("prog_fork_tcache", NULL, "GOSHIM_PROCS=2 GOSHIM_PREEMPT=0", want, 2);
}

/* fork while other threads make, poll and close descriptors; the child closes every
 * descriptor with close_range, as GLib's g_spawn does (its spawn-multithreaded test hung
 * under load). The child waited for a descriptor's lock that a thread of the parent held
 * at the fork. */
Test(preload_fork, child_closes_descriptors_whatever_the_parent_threads_held, .timeout = 240)
{
    const char *want = "children that closed their descriptors: 300 of 300\n";
    expect_native_prints("prog_fork_fdlock", NULL, want);
    expect_prints_at_p1_and_p2("prog_fork_fdlock", NULL, want, 4);
}

/* The child of a threaded parent is one thread again: it made goshim's three helper threads
 * at once (its /proc/self/status said 4), which cost a fork with threads alive three times
 * native's. They start when the child first needs them: its kill() to itself, a signal it
 * blocked, a sem_wait a handler ends and its first threads work from the first instruction. */
#define LONE_OUT                                                                                   \
    "child threads at start: 1\n"                                                                  \
    "kill to itself ran the handler before it returned: yes\n"                                     \
    "blocked signal pending: yes; handled when unblocked: yes\n"                                   \
    "sem_wait ended by a handler's post: yes\n"                                                    \
    "threads made in the child ran: yes\n"                                                         \
    "child exit 0\n"

Test(preload_fork, child_of_threads_is_one_thread_until_it_needs_more, .timeout = 60)
{
    expect_native_prints("prog_fork_lone", "signals", LONE_OUT);
    expect_prints_at_p1_and_p2("prog_fork_lone", "signals", LONE_OUT, 5);
    /* Preemption off: nothing to preempt either (its child made them at once). */
    expect_preloaded_prints("prog_fork_lone", "signals", "GOSHIM_PREEMPT=0", LONE_OUT, 5);
}

/* Python's multiprocessing hung here (test_multiprocessing_fork): a pool worker, forked by a
 * thread that is not main after another thread blocked SIGTERM once, never ended at the
 * pool's SIGTERM - its dispatcher posted the signal for the parent's main thread, which the
 * child does not have. */
Test(preload_fork, sigterm_ends_a_child_forked_by_a_thread, .timeout = 60)
{
    expect_native_prints("prog_fork_lone", "term", "child signal Terminated\n");
    expect_prints_at_p1_and_p2("prog_fork_lone", "term", "child signal Terminated\n", 6);
}

/* Run prog_fork_lone mode preloaded with env: it exits 0 and its output holds each of want. */
static void expect_lone_holds(const char *mode, const char *env, const char *const want[])
{
    static char out[1 << 16];
    struct pp_argv a;
    int st =
        run_preloaded("prog_fork_lone", pp_argv(&a, "prog_fork_lone", mode), env, out, sizeof out);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "prog_fork_lone %s (%s): status %d\n%s", mode,
              env, st, out);
    for (int i = 0; want[i]; i++)
        cr_assert(strstr(out, want[i]), "prog_fork_lone %s (%s) did not print \"%s\":\n%s", mode,
                  env, want[i], out);
}

/* Such a child that deadlocks at once, before any helper ran: still reported (its park
 * starts sysmon); and a SIGQUIT to it while it computes still dumps its thread and ends it
 * with status 2, with no sysmon to do it. */
Test(preload_fork, child_of_threads_reports_deadlock_and_sigquit, .timeout = 60)
{
    const char *const parked[] = {"all threads are asleep - deadlock!", "child exit 2\n", NULL};
    const char *const quit[] = {"SIGQUIT: quit\n", "thread 1 (main)", "child exit 2\n", NULL};
    expect_lone_holds("parked", "GOSHIM_DEADLOCK=abort", parked);
    expect_lone_holds("parked", "GOSHIM_DEADLOCK=abort GOSHIM_PROCS=1", parked);
    expect_lone_holds("quit", NULL, quit);
    expect_lone_holds("quit", "GOSHIM_PROCS=1", quit);
}

/* prog_fork_pages's "faults per fork" figure, run natively (env NULL) or preloaded: the
 * least of three runs (a run whose stack frames straddle one more page, or whose main thread
 * moved to another OS thread, writes a page or two more a fork). */
static double fork_page_faults_once(const char *env)
{
    static char out[1 << 16];
    run_either_ok("prog_fork_pages", "300", env != NULL, env, out, sizeof out);
    const char *p = strstr(out, "faults per fork: ");
    cr_assert(p, "prog_fork_pages (%s) printed no figure:\n%s", env ? env : "natively", out);
    return atof(p + strlen("faults per fork: "));
}

static double fork_page_faults(const char *env)
{
    double least = fork_page_faults_once(env);
    for (int i = 0; i < 2; i++) {
        double f = fork_page_faults_once(env);
        least = f < least ? f : least;
    }
    return least;
}

/* A parent that forks beside waiting threads writes, after each fork, the pages glibc's fork
 * and waitpid write, plus one of goshim's (its M's, which P0's, the main G's and the count of
 * kept Ps share): each page written after a fork is a copy while the child lives, and a
 * fault of tens of microseconds on a guest that shadows page tables. It wrote three more:
 * the kept-P count's (sched's), a signal-check word on the main thread's record each call,
 * and sysmon's pages at each of its rounds, ten milliseconds apart while the parent waited
 * in waitpid (4.0-6.0 faults a fork above native's, against 1.0-1.5 after, the least of three
 * runs). At one P too: the call kept its P only while another P was idle, and at one P
 * none is, so each waitpid handed its P off and took it back, under sched.lock. */
Test(preload_fork, a_forking_parent_writes_few_pages_of_goshims, .timeout = 60)
{
    double native = fork_page_faults(NULL);
    double p2 = fork_page_faults("GOSHIM_PROCS=2");
    double p1 = fork_page_faults("GOSHIM_PROCS=1");
    cr_assert_leq(p2, native + 2.5, "faults per fork: %.2f under goshim at P=2, %.2f natively", p2,
                  native);
    cr_assert_leq(p1, native + 2.5, "faults per fork: %.2f under goshim at P=1, %.2f natively", p1,
                  native);
}
