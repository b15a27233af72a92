/*
 * Synchronisation under LD_PRELOAD: each tests/progs/prog_sync_* program
 * runs natively and under libgoshim.so (with GOSHIM_STATS=1, whose line
 * proves the threads were Gs) and must exit 0 both ways and print the
 * same. The contended, spinlock and cond programs run once more with a
 * single P, where a holder and its waiters share one M.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "tests/helpers.h"

/* Remove the "goshim stats:" lines from out; return the G count they name (-1 if none). */
static long strip_stats(char *out)
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

static void same_as_native(const char *prog, const char *env, long min_gs)
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
    sort_lines(nat);
    sort_lines(pre);
    cr_assert_str_eq(pre, nat, "%s prints differently under goshim (%s)", prog, penv);
    cr_assert_geq(gs, min_gs, "%s: only %ld Gs ran under goshim (stats line missing?)", prog, gs);
}

Test(preload_sync, mutex_kinds_initializers_errors, .timeout = 120)
{
    same_as_native("prog_sync_mutex", NULL, 50);
}

Test(preload_sync, mutex_contended_64_threads, .timeout = 120)
{
    same_as_native("prog_sync_contended", NULL, 128);
}

Test(preload_sync, mutex_contended_one_p, .timeout = 120)
{
    same_as_native("prog_sync_contended", "GOSHIM_PROCS=1", 128);
}

Test(preload_sync, cond_pingpong_timeouts_broadcast, .timeout = 120)
{
    same_as_native("prog_sync_cond", NULL, 60);
}

Test(preload_sync, cond_one_p, .timeout = 120)
{
    same_as_native("prog_sync_cond", "GOSHIM_PROCS=1", 60);
}

Test(preload_sync, rwlock_kinds_preference_errors, .timeout = 120)
{
    same_as_native("prog_sync_rwlock", NULL, 40);
}

Test(preload_sync, barrier_serial_thread_each_round, .timeout = 120)
{
    same_as_native("prog_sync_barrier", NULL, 16);
}

Test(preload_sync, spinlock_8_threads, .timeout = 120)
{
    same_as_native("prog_sync_spin", NULL, 8);
}

Test(preload_sync, spinlock_one_p, .timeout = 120)
{
    same_as_native("prog_sync_spin", "GOSHIM_PROCS=1", 8);
}

Test(preload_sync, semaphores_counts_timeouts, .timeout = 120)
{
    same_as_native("prog_sync_sem", NULL, 16);
}

/* sem_post in a handler that may interrupt an M inside the scheduler (see shim/sem.c). */
/*
 * Disabled until sem_post has a signal-safe wake path: a handler that posts
 * while its own M holds the futex bucket lock (between a G's park and the
 * commit on g0) or sched.lock deadlocks. It hung once in ten stress runs.
 * The fix (Go's acquirem: a per-M "in the runtime" count that makes a
 * signal-context wake defer to another thread) is open work of issue 3.
 */
Test(preload_sync, sem_post_from_signal_handler, .timeout = 120, .disabled = true)
{
    same_as_native("prog_sync_sem_signal", NULL, 2);
}
