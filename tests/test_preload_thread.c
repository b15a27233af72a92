/*
 * Thread lifecycle under LD_PRELOAD: each program in tests/progs runs
 * natively and under libgoshim.so (with GOSHIM_STATS=1) and must print the
 * same and exit the same; the stats line proves its threads were Gs.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "tests/preload_helpers.h"

Test(preload_thread, lifecycle_same_as_native, .timeout = 60)
{
    same_as_native_in_order("prog_thread_basic", NULL, 30);
}

Test(preload_thread, exit_cancel_cleanup_same_as_native, .timeout = 60)
{
    same_as_native_in_order("prog_thread_exit", NULL, 4);
}

Test(preload_thread, errno_and_thread_locals_per_thread, .timeout = 120)
{
    same_as_native_in_order("prog_thread_tls", NULL, 9);
}

Test(preload_thread, disabled_runs_natively, .timeout = 60)
{
    static char out[1 << 14];
    int st = run_preloaded("prog_thread_basic", NULL, "GOSHIM_DISABLE=1 GOSHIM_STATS=1", out,
                           sizeof out);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d\n%s", st, out);
    cr_assert_null(strstr(out, "goshim stats:"), "GOSHIM_DISABLE=1 still started the runtime");
}

Test(preload_thread, cxx_thread_mutex_condvar_thread_local, .timeout = 60)
{
    same_as_native_in_order("prog_thread_cxx", NULL, 20);
}

Test(preload_thread, hundred_thousand_threads_blocked_at_once, .timeout = 300)
{
    static char out[1 << 14];
    char n[32];
    long want = test_scale(100000);
    snprintf(n, sizeof n, "%ld", want);
    char path[4096];
    char *const argv[] = {(char *)test_prog_path("prog_many_threads", path, sizeof path), n, NULL};
    int sp = run_preloaded("prog_many_threads", argv, NULL, out, sizeof out);
    cr_assert(WIFEXITED(sp) && WEXITSTATUS(sp) == 0, "under goshim: status %d\n%s", sp, out);
    char line[64];
    snprintf(line, sizeof line, "released and joined %ld threads", want);
    cr_assert(strstr(out, line), "under goshim: %s", out);
    /* Natively every thread takes a pid: this many cannot exist past
     * kernel.pid_max. Not run here (it would starve the tests running
     * beside it of pids); `make bench` measures it once. */
    FILE *f = fopen("/proc/sys/kernel/pid_max", "r");
    long pid_max = 0;
    if (f) {
        if (fscanf(f, "%ld", &pid_max) != 1)
            pid_max = 0;
        fclose(f);
    }
    cr_log_info("goshim ran %ld blocked threads; natively at most pid_max = %ld", want, pid_max);
}

/* Issue 14: a million threads blocked at once (GOSHIM_TEST_SCALE shrinks it
 * for the sanitizer runs only), each accounted for by the program itself;
 * the stats line says no thread was left over or made twice. */
Test(preload_thread, million_threads_blocked_at_once_every_one_accounted_for, .timeout = 600)
{
    static char out[1 << 14];
    char n[32];
    long want = test_scale(1000000);
    snprintf(n, sizeof n, "%ld", want);
    char path[4096];
    char *const argv[] = {(char *)test_prog_path("prog_million_threads", path, sizeof path), n,
                          NULL};
    int sp = run_preloaded("prog_million_threads", argv, "GOSHIM_STATS=1", out, sizeof out);
    cr_assert(WIFEXITED(sp) && WEXITSTATUS(sp) == 0, "under goshim: status %d\n%s", sp, out);
    char line[96];
    snprintf(line, sizeof line, "released and joined %ld threads, every one accounted for\n", want);
    cr_assert(strstr(out, line), "under goshim: %s", out);
    long gs = strip_stats(out);
    cr_assert_eq(gs, want + 1, "Gs created: %ld, want the %ld threads and main", gs, want);
}

Test(preload_thread, million_threads_program_checks_itself_natively, .timeout = 60)
{
    /* The program's own accounting, natively, at a size the kernel allows. */
    static char out[4096];
    char path[4096];
    char *const argv[] = {(char *)test_prog_path("prog_million_threads", path, sizeof path), "200",
                          NULL};
    int sn = run_native("prog_million_threads", argv, NULL, out, sizeof out);
    cr_assert(WIFEXITED(sn) && WEXITSTATUS(sn) == 0, "natively: status %d\n%s", sn, out);
    cr_assert_str_eq(out, "released and joined 200 threads, every one accounted for\n");
}

Test(preload_thread, exit_while_threads_run_or_wait, .timeout = 60)
{
    static char nat[4096], pre[4096];
    int sn = run_native("prog_exit_while_running", NULL, NULL, nat, sizeof nat);
    int sp = run_preloaded("prog_exit_while_running", NULL, NULL, pre, sizeof pre);
    cr_assert(WIFEXITED(sn) && WEXITSTATUS(sn) == 3, "natively: status %d\n%s", sn, nat);
    cr_assert(WIFEXITED(sp) && WEXITSTATUS(sp) == 3, "under goshim: status %d\n%s", sp, pre);
    cr_assert_str_eq(pre, nat);
}

/* A program's first two threads, made at once as the runtime starts, spin until each has
 * seen the other: with preemption off only the second P lets them meet. The runtime starts
 * at the first pthread_create, so the other P's M is often still on its way then; each
 * run is a fresh process (a race of the start), natively first. */
Test(preload_thread, first_threads_made_at_the_start_use_both_ps, .timeout = 300)
{
    static const char want[] = "both threads ran at once\n";
    expect_native_prints("prog_start_pair", NULL, want);
    for (int i = 0; i < 20; i++)
        expect_preloaded_prints("prog_start_pair", NULL, "GOSHIM_PROCS=2 GOSHIM_PREEMPT=0", want,
                                3);
}

/* glibc's C11 functions call its internal pthread code: the shim maps them
 * back onto Gs (with one P, a C11 wait that blocked the M would hang). */
Test(preload_thread, c11_threads_are_gs, .timeout = 60)
{
    same_as_native_in_order("prog_c11_threads", "GOSHIM_PROCS=1", 4);
}

/* GOSHIM_TLS=errno: Gs share their M's TCB, so keys live in the thread record. */
Test(preload_thread, lifecycle_in_errno_mode, .timeout = 60)
{
    static char out[1 << 16];
    int st = run_preloaded("prog_thread_basic", NULL, "GOSHIM_TLS=errno", out, sizeof out);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d:\n%s", st, out);
    cr_assert(strstr(out, "all passed"), "%s", out);
    cr_assert(strstr(out, "GOSHIM_TLS=errno mode"), "the mode is announced:\n%s", out);
}

/* PTHREAD_CANCEL_ASYNCHRONOUS: cancelled while blocked on a mutex, or while spinning
 * without calls (acted on where it is preempted); redis's killIOThreads hung without it. */
Test(preload_thread, async_cancel_blocked_or_spinning, .timeout = 60)
{
    const char *want = "cancel 0, join 0, PTHREAD_CANCELED: yes\n";
    expect_native_prints("prog_async_cancel", "mutex", want);
    expect_native_prints("prog_async_cancel", "spin", want);
    expect_prints_at_p1_and_p2("prog_async_cancel", "mutex", want, 2);
    expect_prints_at_p1_and_p2("prog_async_cancel", "spin", want, 2);
}

/* A second join of a joined thread went to glibc's join on a freed TCB and hung for ever;
 * ESRCH for join and detach, as natively. */
Test(preload_thread, join_and_detach_of_a_joined_thread_give_esrch, .timeout = 60)
{
    const char *want = "second join: ESRCH; detach after join: ESRCH\n";
    expect_native_prints("prog_thread_facts", "joined", want);
    expect_prints_at_p1_and_p2("prog_thread_facts", "joined", want, 2);
}

/* Thread CPU-time clocks measure the thread, not its OS thread (issue 13): a spinner and a
 * sleeper differ widely by their own clocks, by getrusage(RUSAGE_THREAD) and by the clock
 * ids another thread reads (pthread_getcpuclockid's clock was EINVAL: the fake tid); a new
 * thread starts below its creator. "late": nothing asked before the threads ran (their
 * time then comes from the TSC stamps of the switch path); "early": main asks first. */
Test(preload_thread, cpu_clocks_measure_the_thread, .timeout = 60)
{
    const char *want = "own clocks: spinner and sleeper differ widely: yes\n"
                       "getrusage(RUSAGE_THREAD): differ widely: yes\n"
                       "pthread_getcpuclockid of another thread reads that thread's time: yes\n"
                       "a new thread's clock starts below its creator's: yes\n"
                       "clock_getres of a thread's clock: 0 s 1 ns\n";
    expect_native_prints("prog_cputime", "late", want);
    expect_native_prints("prog_cputime", "early", want);
    expect_prints_at_p1_and_p2("prog_cputime", "late", want, 4);
    expect_prints_at_p1_and_p2("prog_cputime", "early", want, 4);
}

/* Issue 27: gettid() was the OS thread's (16 live threads reported 2 ids), so the calls that
 * take a tid acted on an M and whatever it ran: each thread has its own now, the main
 * thread's is the pid, and tgkill, tkill, sched_{set,get}affinity, sched_{set,get}scheduler,
 * sched_{set,get}param and {set,get}priority(PRIO_PROCESS) take it, also through syscall(). */
Test(preload_thread, gettid_was_the_os_threads, .timeout = 120)
{
    same_as_native_in_order("prog_tid", NULL, 17);
    same_as_native_in_order("prog_tid", "GOSHIM_PROCS=1", 17);
}

/* The same in GOSHIM_TLS=errno mode, where the Gs share their M's TCB (and its tid field). */
Test(preload_thread, gettid_was_the_os_threads_in_errno_mode, .timeout = 60)
{
    static char nat[1 << 14], pre[1 << 14];
    int sn = run_native("prog_tid", NULL, NULL, nat, sizeof nat);
    int sp = run_preloaded("prog_tid", NULL, "GOSHIM_TLS=errno", pre, sizeof pre);
    cr_assert(WIFEXITED(sn) && WEXITSTATUS(sn) == 0, "natively: status %d\n%s", sn, nat);
    cr_assert(WIFEXITED(sp) && WEXITSTATUS(sp) == 0, "under goshim: status %d\n%s", sp, pre);
    char *body = strchr(pre, '\n'); /* after the line that announces the mode */
    cr_assert(!strncmp(pre, "goshim: GOSHIM_TLS=errno mode", 29) && body, "%s", pre);
    cr_assert_str_eq(body + 1, nat, "prog_tid prints differently in errno mode:\n%s\nnatively:\n%s",
                     pre, nat);
}

/* The runtime starts at the first pthread_create (GOSHIM_START=thread): before it the
 * process has its one OS thread and no descriptor of goshim's, as natively (started at
 * load: 4 threads); what main held through glibc then (a mutex, a recursive one twice, an
 * rwlock of each kind) a thread of goshim's waits for and gets once main lets go. */
Test(preload_thread, runtime_starts_at_the_first_thread_with_what_main_held, .timeout = 60)
{
    static char nat[1 << 12];
    struct pp_argv a;
    int st = run_native("prog_lazy_start", pp_argv(&a, "prog_lazy_start", "held"), NULL, nat,
                        sizeof nat);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "natively: status %d\n%s", st, nat);
    cr_assert(strstr(nat, "before the first thread: 1 thread, descriptors 0 1 2"), "%s", nat);
    expect_prints_at_p1_and_p2("prog_lazy_start", "held", nat, 2);
}

/* Fork handlers the program registers before its first thread run where they would if the
 * runtime had been there from the start: the prepare handler on the forking thread's TLS
 * (it saw 0: it ran on its OS thread's own TCB, after goshim's), and the child's after the
 * runtime's reset (it died creating a thread: "gopark: not on a G"), because goshim's
 * handlers are registered at load whatever the start. */
Test(preload_thread, fork_handlers_registered_before_the_first_thread_run_in_order, .timeout = 60)
{
    const char *want =
        "prepare saw the forking thread's value: 7; child's handler made a thread: yes\n";
    expect_native_prints("prog_lazy_start", "atfork", want);
    expect_prints_at_p1_and_p2("prog_lazy_start", "atfork", want, 2);
}

/* prog_thread_retire THREADS ROUNDS FORKS, natively and at P=1 and P=2: its lines. */
static void expect_threads_retire(int nthreads, int rounds, int forks)
{
    char want[1024], args[64];
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int limit = 8 + 2 * (int)(cpus > 0 ? cpus : 1);
    size_t len = 0;
    for (int r = 1; r <= rounds; r++)
        len += (size_t)snprintf(want + len, sizeof want - len,
                                "round %d: %d threads blocked in the kernel, then at most %d OS "
                                "threads\n",
                                r, nthreads, limit);
    snprintf(want + len, sizeof want - len, "fork child: ran, exited 0\n");
    snprintf(args, sizeof args, "%d %d %d", nthreads, rounds, forks);
    expect_native_prints("prog_thread_retire", args, want);
    expect_prints_at_p1_and_p2("prog_thread_retire", args, want, nthreads + 1);
}

/* Threads that blocked in the kernel (each on an M) leave no surplus OS threads behind once
 * they are done, round after round, and a fork child after them runs. */
Test(preload_thread, os_threads_of_blocked_threads_retire, .timeout = 180)
{
    expect_threads_retire(100, 2, 1);
}

/* A thousand of them, then a hundred fork children made at once, each alive until the
 * last is made: the Open POSIX Test Suite's pthread_cond_broadcast 1-2, which hung when
 * each ending M waited for the one that ended before it (one OS thread ended at a time,
 * and each fork, about a second, copied the rest). */
Test(preload_thread, a_fork_burst_after_a_thousand_blocked_threads_runs, .timeout = 120)
{
    expect_threads_retire(1000, 1, 100);
}

/* The main thread's stack that pthread_getattr_np gives is glibc's own answer, with the
 * usual stack limit, a small and a large one, and none (glibc's way, then). */
Test(preload_thread, main_stack_as_glibc_gives_it, .timeout = 60)
{
    static const char *const modes[] = {"check", "limit 2048", "limit 65536", "limit 0"};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        expect_native_prints("prog_main_stack", modes[i], "main stack: as glibc's\n");
        expect_preloaded_prints("prog_main_stack", modes[i], NULL, "main stack: as glibc's\n", 1);
    }
}
