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

#include "tests/preload_helpers.h"

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

/* A process signal for a thread spinning in pthread_spin_lock runs its handler there (it
 * was left pending in 7-8 rounds of 10, the Open POSIX pthread_spin_lock/1-1 hang). Natively
 * first: the program itself must pass. */
Test(preload_sync, signal_reaches_a_thread_spinning_for_the_lock, .timeout = 120)
{
    static const char want[] = "handler ran while the thread spun: 20 of 20 rounds\n";
    expect_native_prints("prog_spin_signal", "20", want);
    expect_prints_at_p1_and_p2("prog_spin_signal", "20", want, 21);
}

Test(preload_sync, semaphores_counts_timeouts, .timeout = 120)
{
    same_as_native("prog_sync_sem", NULL, 16);
}

/* sem_post in a handler that may interrupt an M inside the scheduler: the
 * wake must be deferred (gfutex_wake_async), or it deadlocks. */
Test(preload_sync, sem_post_from_signal_handler, .timeout = 120)
{
    same_as_native("prog_sync_sem_signal", NULL, 2);
}

/* Objects that glibc used before goshim started (a library constructor, as GObject's) and
 * left idle in its own states — a rwlock in its write phase, a barrier's counters after full
 * rounds — must be free and idle to goshim (issue 27: GType's rwlock hung the program). */
Test(preload_sync, objects_glibc_left_idle_before_start_up, .timeout = 120)
{
    same_as_native_in_order("prog_sync_handover", NULL, 100);
}

Test(preload_sync, objects_glibc_left_idle_one_p, .timeout = 120)
{
    same_as_native_in_order("prog_sync_handover", "GOSHIM_PROCS=1", 100);
}

/* Issue 28 item 2: a contended mutex lets no waiter starve. Eight threads (and 64) take one
 * mutex over and over; each goes on until every one has taken it 20,000 times (scaled), so
 * the last waits its turns while the others keep it busy: a lock where a woken waiter can
 * lose every race never ends (the timeout fails the test). */
Test(preload_sync, contended_mutex_starves_no_waiter, .timeout = 120)
{
    const char *want8 =
        "8 threads: each took the mutex 20000 times while the others kept taking it: yes\n";
    const char *want64 =
        "64 threads: each took the mutex 2000 times while the others kept taking it: yes\n";
    expect_native_prints("prog_mutex_fair", "8 20000", want8);
    expect_prints_at_p1_and_p2("prog_mutex_fair", "8 20000", want8, 9);
    expect_native_prints("prog_mutex_fair", "64 2000", want64);
    expect_prints_at_p1_and_p2("prog_mutex_fair", "64 2000", want64, 65);
}
