/*
 * Sleeps under LD_PRELOAD: same results as natively, and sleeping threads
 * are parked Gs: with one P, 100 threads sleeping at once need one M.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "tests/preload_helpers.h"

Test(preload_sleep, sleeps_same_as_native, .timeout = 60)
{
    same_as_native_in_order("prog_sleep", NULL, 101);
}

Test(preload_sleep, sleeping_threads_do_not_hold_ms, .timeout = 60)
{
    static char out[1 << 14];
    int st = run_preloaded("prog_sleep", NULL, "GOSHIM_PROCS=1 GOSHIM_STATS=1", out, sizeof out);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d:\n%s", st, out);
    long threads = stat_of(out, "threads");
    /* M0, the M maker's idle reserve, and its next one if it saw the reserve taken while
     * M0 was on its way to idle (sched/mmaker.c) */
    cr_assert(threads >= 1 && threads <= 3,
              "100 sleeping threads should need no OS thread beyond M0:\n%s", out);
}

/* Issue 27: sleep() cut short by a signal returns the unslept seconds truncated, as glibc's;
 * goshim rounded them (a 2 s sleep interrupted after 0.3 s returned 2, natively 1). */
Test(preload_sleep, interrupted_sleep_rounded_the_seconds_left, .timeout = 60)
{
    same_as_native_in_order("prog_sleep_signal", NULL, 4);
    same_as_native_in_order("prog_sleep_signal", "GOSHIM_PROCS=1", 4);
}

/* Issue 28: a sleep of the main thread while every other thread waits is the kernel's own
 * (a futex wait on the first OS thread, so a signal to the process reaches its handler as
 * natively); a pthread_cancel must still cut it short. */
Test(preload_sleep, cancel_cuts_the_main_threads_sleep_short, .timeout = 90)
{
    /* Which way goshim sleeps depends on a moment the program cannot see (a run without
     * the wake-up hung 15 times in 20): five runs. One P never sleeps in the kernel. */
    for (int i = 0; i < 5; i++)
        same_as_native_in_order("prog_sleep_main_cancel", "GOSHIM_PROCS=2", 2);
    same_as_native_in_order("prog_sleep_main_cancel", "GOSHIM_PROCS=1", 2);
}
