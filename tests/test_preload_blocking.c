/*
 * Blocking system calls under LD_PRELOAD hand their P to another M: with
 * a single P, a thread blocked in read() or waitpid() must not stop the
 * thread that will unblock it.
 */
#include <criterion/criterion.h>

#include "tests/preload_helpers.h"

Test(preload_blocking, blocked_thread_gives_up_its_p, .timeout = 60)
{
    same_as_native_in_order("prog_blocking", "GOSHIM_PROCS=1", 3);
}

Test(preload_blocking, wrapped_call_inside_a_handler_inside_a_wrapped_call, .timeout = 60)
{
    same_as_native_in_order("prog_signal_in_syscall", NULL, 2);
}

/* GOSHIM_MAXTHREADS caps the OS threads: at the cap goshim says so, and the
 * threads that wait for an OS thread still run once one comes back. */
Test(preload_blocking, thread_cap_is_reported_and_work_completes, .timeout = 60)
{
    static char out[1 << 14];
    int st = run_preloaded("prog_maxthreads", NULL, "GOSHIM_MAXTHREADS=2", out, sizeof out);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "prog_maxthreads failed (status %d):\n%s", st,
              out);
    cr_assert(strstr(out, "system x4: ok\n") != NULL, "wrong output:\n%s", out);
    cr_assert(strstr(out, "goshim: thread limit reached (2 OS threads, GOSHIM_MAXTHREADS)") != NULL,
              "no message at the thread cap:\n%s", out);
}

Test(preload_blocking, thread_cap_program_natively, .timeout = 60)
{
    same_as_native("prog_maxthreads", NULL, 5);
}

/* Raw private futexes through syscall() (Rust's std builds its locks so)
 * park the G: with one P, 8 threads contending need no other OS thread. */
static long stats_threads(const char *out)
{
    const char *p = strstr(out, "goshim stats: procs=");
    p = p ? strstr(p, " threads=") : NULL;
    return p ? atol(p + 9) : -1;
}

Test(preload_blocking, raw_futex_lock_parks_gs_one_p, .timeout = 60)
{
    static char out[1 << 14];
    int st =
        run_preloaded("prog_futex_lock", NULL, "GOSHIM_PROCS=1 GOSHIM_STATS=1", out, sizeof out);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "prog_futex_lock failed (status %d):\n%s", st,
              out);
    cr_assert(strstr(out, "futex lock: 8 x 20000 = 160000 ok\n") &&
                  strstr(out, "futex timed wait: timed out\n") &&
                  strstr(out, "futex event: woken\n"),
              "wrong output:\n%s", out);
    long threads = stats_threads(out), handoffs = stat_of(out, "handoffs");
    /* M0, the M maker's reserve (sched/mmaker.c), and one M each hand-off took (the output's
     * writes): on a loaded machine the next hand-off may come before the last one's M is
     * idle again, and take the reserve, which the maker makes anew (4 OS threads for 2). */
    long most = 2 + (handoffs > 1 ? handoffs : 1);
    cr_assert(threads >= 1 && threads <= most,
              "%ld OS threads (at most %ld) carried 9 threads contending on a futex with one P: "
              "waits held OS threads\n%s",
              threads, most, out);
}

Test(preload_blocking, raw_futex_lock_same_as_native, .timeout = 60)
{
    same_as_native_in_order("prog_futex_lock", "GOSHIM_PROCS=2", 9);
}

/*
 * A thread whose calls compute in the kernel (preads of a cached file, 256 KiB each) beside
 * one that spins, at one P. Each call holds its CPU natively: its P stays with it (sysmon
 * handed it to another M whenever a call outlasted a round: 214 hand-offs in 2,000 reads,
 * a thread more than the CPUs, and sysmon looking every 20 us); and the two take turns by
 * the reader's slice, calls included, as the kernel's (seldom seen running between its
 * calls, the reader kept its P until it was done once the hand-offs stopped).
 */
Test(preload_blocking, computing_calls_keep_their_p_and_take_turns, .timeout = 60)
{
    same_as_native("prog_file_reads", "GOSHIM_PROCS=1", 3);
    static char out[1 << 14];
    int st =
        run_preloaded("prog_file_reads", NULL, "GOSHIM_PROCS=1 GOSHIM_STATS=1", out, sizeof out);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "prog_file_reads: status %d\n%s", st, out);
    long handoffs = stat_of(out, "handoffs");
    cr_assert(handoffs >= 0 && handoffs <= 60,
              "%ld of 2,000 preads of a cached file had their P handed off\n%s", handoffs, out);
}

/*
 * The same at two Ps, each pread a millisecond's copying (1 MiB): a call of a G past its
 * cut was handed off once sysmon saw it in two rounds, computing or not; after each
 * hand-off sysmon looked every 20 us for a millisecond, its wake-ups kept the callers off
 * their CPUs, and their calls lasted the longer: 131, 153 and 292 hand-offs of 400 in 3
 * runs of 12 (rg's bad runs, 17 hand-offs and 389 rounds). A computing call keeps its P
 * until it has lasted a slice.
 */
Test(preload_blocking, computing_calls_past_the_cut_keep_their_p, .timeout = 120)
{
    static char out[1 << 14];
    char *const argv[] = {"prog_file_reads", "400", "1048576", NULL};
    for (int run = 0; run < 8; run++) {
        int st = run_preloaded("prog_file_reads", argv, "GOSHIM_PROCS=2 GOSHIM_STATS=1", out,
                               sizeof out);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "prog_file_reads: status %d\n%s", st, out);
        long handoffs = stat_of(out, "handoffs");
        cr_assert(handoffs >= 0 && handoffs <= 20,
                  "run %d: %ld of 400 preads of 1 MiB had their P handed off\n%s", run, handoffs,
                  out);
    }
}

/*
 * One fsync that sleeps in the kernel, its P retaken by sysmon, and nothing else to do: as
 * Go's sysmon, goshim's looked every 20 us for 50 rounds after a retake, 65-72 rounds in
 * all here, where the call's P had gone and nobody needed another look. Now sysmon starts
 * at 20 us again after a retake and doubles from the next round: 16-21.
 */
Test(preload_blocking, one_retake_costs_a_few_sysmon_rounds, .timeout = 60)
{
    static char out[1 << 14];
    char *const argv[] = {"prog_file_sync", "16", NULL};
    int retaken = 0;
    for (int run = 0; run < 3; run++) {
        int st =
            run_preloaded("prog_file_sync", argv, "GOSHIM_PROCS=1 GOSHIM_STATS=1", out, sizeof out);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0 && strstr(out, "synced 16 MiB\n"),
                  "prog_file_sync: status %d\n%s", st, out);
        long handoffs = stat_of(out, "handoffs"), rounds = stat_of(out, "sysmon_rounds");
        cr_assert(handoffs >= 0 && rounds >= 0, "no stats:\n%s", out);
        if (handoffs == 0)
            continue; /* the fsync did not sleep a round (a tmpfs /tmp) */
        retaken++;
        cr_assert(rounds <= 30 + 15 * handoffs,
                  "run %d: %ld sysmon rounds for %ld retakes in a process doing nothing else\n%s",
                  run, rounds, handoffs, out);
    }
    if (!retaken)
        cr_skip_test("no fsync slept a round here: nothing retaken, nothing to count");
}

/*
 * Threads blocked in the kernel (process-shared mutex and condition variable, which glibc
 * serves) each hold an OS thread: at one P, every waiter's hand-off asks the M maker for a
 * new one while the main thread and the waiters not started yet are queued. A new M that
 * reached the scheduler before its maker counted it coming was counted twice, and the ask
 * of the G it then served was dropped: its P stayed idle with the queue full, for good
 * (Open POSIX's pthread_cond_broadcast/1-2 hung so; this program hung in 8 runs of 20).
 */
Test(preload_blocking, kernel_waiters_get_their_os_threads_at_one_p, .timeout = 120)
{
    static char out[1 << 14];
    char *const argv[] = {"prog_shared_waiters", "2000", "1", NULL};
    for (int run = 0; run < 8; run++) {
        int st = run_preloaded("prog_shared_waiters", argv, "GOSHIM_PROCS=1", out, sizeof out);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0 &&
                      strcmp(out, "2000 waiters x 1 rounds woken\n") == 0,
                  "prog_shared_waiters 2000 1 at one P, run %d: status %d\n%s", run, st, out);
    }
}

/*
 * A program whose malloc takes a pthread mutex, as jemalloc's does (redis): goshim
 * makes its OS threads with glibc's pthread_create, which calls that malloc, and
 * spawning calls it too (the TCB's DTV). Before the M maker, the scheduler context
 * took itself for the G it had left and aborted ("gopark: not on a G": redis in the
 * soak, 4 runs in 150 at P=2), and under chaos (a thread switched out with the lock
 * held) the process hung in thread-making at one P. Each run must finish as natively.
 */
Test(preload_blocking, program_malloc_lock_meets_thread_making, .timeout = 120)
{
    same_as_native("prog_malloc_lock", "GOSHIM_PROCS=1", 5);
    same_as_native("prog_malloc_lock", "GOSHIM_PROCS=2", 5);
    static char out[1 << 14];
    char *const argv[] = {"prog_malloc_lock", "8", NULL};
    for (int procs = 1; procs <= 2; procs++)
        for (int seed = 1; seed <= 6; seed++) {
            char env[64];
            snprintf(env, sizeof env, "GOSHIM_PROCS=%d GOSHIM_CHAOS=%d", procs, seed);
            int st = run_preloaded("prog_malloc_lock", argv, env, out, sizeof out);
            cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0 && strstr(out, " workers joined\n"),
                      "prog_malloc_lock 8 under %s: status %d\n%s", env, st, out);
        }
}
