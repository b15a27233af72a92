/*
 * The G-aware futex (sched/gfutex.c) and the timers under it
 * (sched/timer.c): waits and wakes between Gs and plain threads, requeue,
 * timeouts racing with wakes, idle Ms that sleep exactly until a timer
 * (the timer heap's own tests: test_timer.c).
 * Criterion runs each test in its own process, so each starts the runtime
 * afresh. Times are asserted from below only (never "took less than").
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "sched/gfutex.h"
#include "sched/sched.h"
#include "sched/timer.h"
#include "tests/helpers.h"
#include "tests/rt_start.h"
#include "tests/wg.h"

#define MS 1000000LL
#define US 1000LL

static struct sched_wg wg;

static struct g *go(void (*fn)(void *), void *arg)
{
    int err;
    sched_wg_add(&wg, 1);
    struct g *gp = sched_spawn(fn, arg, NULL, &err);
    cr_assert_not_null(gp, "spawn failed: %d", err);
    return gp;
}

static long load(long *p)
{
    return __atomic_load_n(p, __ATOMIC_SEQ_CST);
}

/* Poll (from the test thread) until *p == want; the test's timeout bounds it. */
static void wait_until_eq(long *p, long want)
{
    while (load(p) != want)
        usleep(500);
}

static void wait_until_waiters(uint32_t *addr, int want)
{
    while (gfutex_nwaiters(addr) != want)
        usleep(500);
}

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

/* ---- value check -------------------------------------------------------- */

static uint32_t word;
static long results[64];
static long returned;

static void eagain_g(void *arg)
{
    (void)arg;
    results[0] = gfutex_wait(&word, 0, -1);
    results[1] = gfutex_wait(&word, 0, nanotime() + 1000 * MS);
    sched_wg_done(&wg);
}

Test(gfutex, wait_returns_eagain_when_value_differs, .timeout = 20)
{
    test_start_runtime(2);
    sched_wg_init(&wg);
    word = 1;
    go(eagain_g, NULL);
    sched_wg_wait(&wg);
    cr_assert_eq(results[0], EAGAIN, "G, untimed: %ld", results[0]);
    cr_assert_eq(results[1], EAGAIN, "G, timed: %ld", results[1]);
    cr_assert_eq(timers_next(), -1, "the timed wait's timer was removed");
    cr_assert_eq(gfutex_wait(&word, 0, -1), EAGAIN, "thread, untimed");
    cr_assert_eq(gfutex_wait(&word, 0, nanotime() + 1000 * MS), EAGAIN, "thread, timed");
    cr_assert_eq(gfutex_nwaiters(&word), 0);
}

/* ---- wake counts -------------------------------------------------------- */

static void waiter_g(void *arg)
{
    long i = (long)arg;
    results[i] = gfutex_wait(&word, 0, -1);
    __atomic_fetch_add(&returned, 1, __ATOMIC_SEQ_CST);
    sched_wg_done(&wg);
}

Test(gfutex, wake_one_wakes_exactly_one_then_wake_all_the_rest, .timeout = 30)
{
    enum { N = 8 };
    test_start_runtime(2);
    sched_wg_init(&wg);
    for (long i = 0; i < N; i++)
        go(waiter_g, (void *)i);
    wait_until_waiters(&word, N);
    cr_assert_eq(gfutex_wake(&word, 1), 1);
    wait_until_eq(&returned, 1);
    usleep(20000); /* give a wrongly woken second G time to show up */
    cr_assert_eq(load(&returned), 1, "wake(1) let %ld Gs go", load(&returned));
    cr_assert_eq(gfutex_nwaiters(&word), N - 1);
    cr_assert_eq(gfutex_wake(&word, INT_MAX), N - 1);
    sched_wg_wait(&wg);
    cr_assert_eq(load(&returned), N);
    for (int i = 0; i < N; i++)
        cr_assert_eq(results[i], 0, "waiter %d returned %ld", i, results[i]);
    cr_assert_eq(gfutex_wake(&word, INT_MAX), 0, "nobody left");
}

/* ---- timeouts ----------------------------------------------------------- */

static int64_t deadlines[64], woke_at[64];

static void timed_g(void *arg)
{
    long i = (long)arg;
    results[i] = gfutex_wait(&word, 0, deadlines[i]);
    woke_at[i] = nanotime();
    sched_wg_done(&wg);
}

Test(gfutex, timed_wait_times_out_not_before_its_deadline, .timeout = 30)
{
    enum { N = 6 };
    test_start_runtime(2);
    sched_wg_init(&wg);
    int64_t now = nanotime();
    for (long i = 0; i < N; i++) {
        deadlines[i] = now + (N - i) * 15 * MS;
        go(timed_g, (void *)i);
    }
    sched_wg_wait(&wg);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(results[i], ETIMEDOUT, "G %d returned %ld", i, results[i]);
        cr_assert_geq(woke_at[i], deadlines[i], "G %d woke %lld ns early", i,
                      (long long)(deadlines[i] - woke_at[i]));
    }
    /* A plain thread: the kernel futex with the same deadline semantics. */
    int64_t d = nanotime() + 20 * MS;
    cr_assert_eq(gfutex_wait(&word, 0, d), ETIMEDOUT);
    cr_assert_geq(nanotime(), d);
    cr_assert_eq(gfutex_wait(&word, 0, 0), ETIMEDOUT, "a past deadline");
    cr_assert_eq(timers_next(), -1);
}

static void sleeper_g(void *arg)
{
    long rounds = (long)arg;
    for (long i = 0; i < rounds; i++) {
        deadlines[i] = nanotime() + 50 * MS;
        results[i] = gfutex_wait(&word, 0, deadlines[i]);
        woke_at[i] = nanotime();
    }
    sched_wg_done(&wg);
}

/* One G waits with a timeout while every other M is idle: only the idle
 * M's timed sleep can wake it, and it must not spin meanwhile. */
static void idle_m_sleeps_until_timer(int nprocs)
{
    enum { ROUNDS = 3 };
    test_start_runtime(nprocs);
    sched_wg_init(&wg);
    double cpu0 = cpu_seconds();
    int64_t t0 = nanotime();
    go(sleeper_g, (void *)(long)ROUNDS);
    sched_wg_wait(&wg);
    double elapsed = (double)(nanotime() - t0) / 1e9, cpu = cpu_seconds() - cpu0;
    for (int i = 0; i < ROUNDS; i++) {
        cr_assert_eq(results[i], ETIMEDOUT, "round %d returned %ld", i, results[i]);
        cr_assert_geq(woke_at[i], deadlines[i], "round %d woke early", i);
    }
    cr_assert_lt(cpu, elapsed / 2, "idle Ms spun: %.3f s of CPU in %.3f s", cpu, elapsed);
    /* And with no timer left, the Ms park for good. */
    cr_assert_eq(timers_next(), -1);
}

Test(gfutex, idle_m_sleeps_until_the_timer_p1, .timeout = 30)
{
    idle_m_sleeps_until_timer(1);
}

Test(gfutex, idle_m_sleeps_until_the_timer_p4, .timeout = 30)
{
    idle_m_sleeps_until_timer(4);
}

/* ---- wake racing with timeout ------------------------------------------- */

static long race_iters, race_woken, race_timedout, race_bad, race_wakes, race_done;

static void race_waiter(void *arg)
{
    long id = (long)arg;
    for (long i = 0; i < race_iters; i++) {
        int64_t d = nanotime() + (1 + (i + id) % 8) * US;
        int r = gfutex_wait(&word, 0, d);
        if (r == 0)
            __atomic_fetch_add(&race_woken, 1, __ATOMIC_SEQ_CST);
        else if (r == ETIMEDOUT)
            __atomic_fetch_add(&race_timedout, 1, __ATOMIC_SEQ_CST);
        else
            __atomic_fetch_add(&race_bad, 1, __ATOMIC_SEQ_CST);
    }
    __atomic_fetch_add(&race_done, 1, __ATOMIC_SEQ_CST);
    sched_wg_done(&wg);
}

static void race_waker(void *arg)
{
    long nwaiters = (long)arg;
    for (long i = 0; load(&race_done) < nwaiters; i++) {
        __atomic_fetch_add(&race_wakes, gfutex_wake(&word, 1), __ATOMIC_SEQ_CST);
        if (i % 64 == 0)
            sched_goyield();
    }
    sched_wg_done(&wg);
}

Test(gfutex, wake_racing_timeout_readies_once_and_loses_nobody, .timeout = 120)
{
    enum { WAITERS = 2 };
    test_start_runtime(2);
    sched_wg_init(&wg);
    race_iters = test_scale(10000);
    for (long i = 0; i < WAITERS; i++)
        go(race_waiter, (void *)i);
    go(race_waker, (void *)(long)WAITERS);
    sched_wg_wait(&wg);
    cr_log_info("woken %ld, timed out %ld", race_woken, race_timedout);
    cr_assert_eq(race_bad, 0);
    cr_assert_eq(race_woken + race_timedout, WAITERS * race_iters);
    cr_assert_eq(race_wakes, race_woken, "wake counted %ld, waiters saw %ld wakeups", race_wakes,
                 race_woken);
    cr_assert_eq(gfutex_nwaiters(&word), 0);
    cr_assert_eq(timers_next(), -1, "no timer left behind");
}

/* ---- threads and Gs ----------------------------------------------------- */

static long wake_result;

static void waker_of_thread(void *arg)
{
    (void)arg;
    uint32_t dummy = 0;
    long n;
    /* wake(1) reports 1 only once the thread sleeps in the kernel. */
    while ((n = gfutex_wake(&word, 1)) == 0)
        gfutex_wait(&dummy, 0, nanotime() + 200 * US);
    wake_result = n;
    sched_wg_done(&wg);
}

Test(gfutex, thread_waiter_is_woken_by_a_g, .timeout = 30)
{
    test_start_runtime(2);
    sched_wg_init(&wg);
    go(waker_of_thread, NULL);
    int r = gfutex_wait(&word, 0, -1);
    sched_wg_wait(&wg);
    cr_assert_eq(r, 0);
    cr_assert_eq(wake_result, 1);
}

Test(gfutex, g_waiter_is_woken_by_a_thread, .timeout = 30)
{
    test_start_runtime(2);
    sched_wg_init(&wg);
    go(waiter_g, (void *)0L);
    int n;
    while ((n = gfutex_wake(&word, 1)) == 0)
        usleep(500);
    sched_wg_wait(&wg);
    cr_assert_eq(n, 1);
    cr_assert_eq(results[0], 0);
    cr_assert_eq(returned, 1);
}

/* A three-state futex mutex (Drepper) on gfutex, taken by Gs and the
 * test thread at once: no lost wakeup, no lost increment. */
static uint32_t mtx;
static long counter, mtx_rounds;

static void mtx_lock(void)
{
    uint32_t c = 0;
    if (__atomic_compare_exchange_n(&mtx, &c, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
        return;
    if (c != 2)
        c = __atomic_exchange_n(&mtx, 2, __ATOMIC_ACQUIRE);
    while (c != 0) {
        gfutex_wait(&mtx, 2, -1);
        c = __atomic_exchange_n(&mtx, 2, __ATOMIC_ACQUIRE);
    }
}

static void mtx_unlock(void)
{
    if (__atomic_exchange_n(&mtx, 0, __ATOMIC_RELEASE) == 2)
        gfutex_wake(&mtx, 1);
}

static void mtx_worker(void *arg)
{
    (void)arg;
    for (long i = 0; i < mtx_rounds; i++) {
        mtx_lock();
        counter++;
        if (i % 16 == 0)
            sched_goyield(); /* hold it across a switch: others must park */
        mtx_unlock();
    }
    sched_wg_done(&wg);
}

Test(gfutex, mutex_built_on_it_excludes_gs_and_threads, .timeout = 120)
{
    enum { NG = 8 };
    test_start_runtime(2);
    sched_wg_init(&wg);
    mtx_rounds = test_scale(20000);
    for (int i = 0; i < NG; i++)
        go(mtx_worker, NULL);
    for (long i = 0; i < mtx_rounds; i++) {
        mtx_lock();
        counter++;
        mtx_unlock();
    }
    sched_wg_wait(&wg);
    cr_assert_eq(counter, (NG + 1) * mtx_rounds);
}

/* A mutex as above at one P, each G's wait handed off from its P between its look at that P
 * and its acquirem, as sysmon may (it found the M asleep in the kernel a moment before). Once
 * acquirem found no P idle to take back (another M runs the P's next G), gopark waited for
 * one holding the bucket lock, and that G waited in the same lock for good. */
static bool always(struct m *mp)
{
    (void)mp;
    return true;
}

static long handoffs, workers_left;

/* Always runnable: a hand-off's P goes to another M at once (startm), none stays idle. */
static void yielder(void *arg)
{
    (void)arg;
    while (load(&workers_left) > 0)
        sched_goyield();
    sched_wg_done(&wg);
}

/* mtx_worker's rounds until HANDOFFS waits were handed off: what it added goes to *arg. */
enum { HANDOFFS = 40 };

static void counted_worker(void *arg)
{
    long i;
    for (i = 0; load(&handoffs) < HANDOFFS; i++) {
        mtx_lock();
        counter++;
        if (i % 16 == 0)
            sched_goyield();
        mtx_unlock();
    }
    __atomic_add_fetch((long *)arg, i, __ATOMIC_SEQ_CST);
    __atomic_sub_fetch(&workers_left, 1, __ATOMIC_SEQ_CST);
    sched_wg_done(&wg);
}

/* What sysmon does in two rounds, at every other wait: the hand-off, then the retake of the
 * P (to another M). */
static long waits;

static void hand_my_p_off(void)
{
    struct m *mp = getm();
    if (__atomic_fetch_add(&waits, 1, __ATOMIC_RELAXED) % 2 || !sched_handoff_asleep(mp, always))
        return;
    __atomic_add_fetch(&handoffs, 1, __ATOMIC_RELAXED);
    struct p *pp = mp->oldp;
    uint32_t st = Psyscall;
    if (__atomic_compare_exchange_n(&pp->status, &st, Pidle, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE)) {
        __atomic_add_fetch(&pp->syscalltick, 1, __ATOMIC_RELEASE);
        handoffp(pp);
    }
}

Test(gfutex, a_waiter_handed_off_before_it_parks_takes_a_p_back, .timeout = 30)
{
    enum { NG = 4 };
    static long rounds;
    test_start_runtime(1);
    sched_wg_init(&wg);
    gfutex_test_before_acquirem = hand_my_p_off;
    workers_left = NG;
    for (int i = 0; i < NG; i++)
        go(counted_worker, &rounds);
    for (int i = 0; i < 2; i++)
        go(yielder, NULL);
    sched_wg_wait(&wg);
    gfutex_test_before_acquirem = NULL;
    cr_assert_eq(counter, load(&rounds));
    cr_assert_geq(load(&handoffs), HANDOFFS);
    cr_log_info("%ld hand-offs, %ld rounds", load(&handoffs), load(&rounds));
}

/* ---- requeue ------------------------------------------------------------ */

static uint32_t words[256];

static long rq_bad;

static void rq_waiter(void *arg)
{
    uint32_t *a = arg;
    if (gfutex_wait(a, 0, -1) != 0)
        __atomic_fetch_add(&rq_bad, 1, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&returned, 1, __ATOMIC_SEQ_CST);
    sched_wg_done(&wg);
}

static void requeue_moves(uint32_t *a, uint32_t *b)
{
    enum { N = 6 };
    returned = 0;
    sched_wg_init(&wg);
    for (int i = 0; i < N; i++)
        go(rq_waiter, a);
    wait_until_waiters(a, N);
    cr_assert_eq(gfutex_requeue(a, 1, 1, b, INT_MAX), -EAGAIN, "*a != val");
    cr_assert_eq(gfutex_requeue(a, 0, 1, a, INT_MAX), -EINVAL, "a == a2");
    cr_assert_eq(gfutex_requeue(a, 0, 1, b, INT_MAX), N, "1 woken + N-1 moved");
    wait_until_eq(&returned, 1);
    cr_assert_eq(gfutex_nwaiters(a), 0);
    cr_assert_eq(gfutex_nwaiters(b), N - 1);
    cr_assert_eq(gfutex_wake(a, INT_MAX), 0, "nobody waits on a any more");
    usleep(10000);
    cr_assert_eq(load(&returned), 1, "requeued waiters stay asleep");
    cr_assert_eq(gfutex_requeue(b, 0, 0, a, 2), 2, "move 2 back, wake none");
    cr_assert_eq(gfutex_wake(b, INT_MAX), N - 3);
    cr_assert_eq(gfutex_wake(a, INT_MAX), 2);
    sched_wg_wait(&wg);
    cr_assert_eq(load(&returned), N);
    cr_assert_eq(load(&rq_bad), 0, "a requeued waiter did not return 0");
}

/* Two words of pool[0..n) that hash to the same bucket (*same) and two that
 * do not; found through the table, not assumed. */
static void pick_words(uint32_t *pool, int n, uint32_t **same, uint32_t **other)
{
    same[0] = other[0] = &pool[0];
    same[1] = other[1] = NULL;
    for (int i = 1; i < n && (!same[1] || !other[1]); i++) {
        bool eq = gfutex_test_bucket(&pool[i]) == gfutex_test_bucket(&pool[0]);
        if (eq && !same[1])
            same[1] = &pool[i];
        if (!eq && !other[1])
            other[1] = &pool[i];
    }
    cr_assert(same[1] && other[1], "no two words share a bucket among %d", n);
}

static uint32_t pool[1 << 14];

Test(gfutex, requeue_moves_waiters_to_another_word, .timeout = 30)
{
    test_start_runtime(2);
    uint32_t *same[2], *other[2];
    pick_words(pool, 1 << 14, same, other);
    requeue_moves(other[0], other[1]); /* different buckets */
    requeue_moves(same[0], same[1]);   /* the same bucket */
}

/* ---- many addresses per bucket ---------------------------------------------- */

/* Waiter number i of fifo_addr[i]: records the order it returned in. */
enum { FIFO_ADDRS = 6, FIFO_PER = 5, FIFO_N = FIFO_ADDRS * FIFO_PER };
static uint32_t *fifo_addr[FIFO_N];
static long fifo_order[FIFO_N], fifo_seq, fifo_done;

static void fifo_waiter(void *arg)
{
    long i = (long)arg;
    results[i] = gfutex_wait(fifo_addr[i], 0, -1);
    long o = __atomic_add_fetch(&fifo_seq, 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&fifo_order[i], o, __ATOMIC_RELEASE);
    __atomic_add_fetch(&fifo_done, 1, __ATOMIC_SEQ_CST); /* results and fifo_order are set */
    sched_wg_done(&wg);
}

/* Start waiter i and wait until it is queued: the queue order is then known. */
static void fifo_start(long i)
{
    int before = gfutex_nwaiters(fifo_addr[i]);
    go(fifo_waiter, (void *)i);
    wait_until_waiters(fifo_addr[i], before + 1);
}

/* The waiter numbers on addr, in queue order (the order they were started). */
static int fifo_of(uint32_t *addr, long *out)
{
    int n = 0;
    for (long i = 0; i < FIFO_N; i++)
        if (fifo_addr[i] == addr)
            out[n++] = i;
    return n;
}

/* Wake addr one waiter at a time; each must be the oldest one left on addr. */
static void wake_in_order(uint32_t *addr, const long *idx, int n)
{
    for (int k = 0; k < n; k++) {
        long seq = load(&fifo_done);
        cr_assert_eq(gfutex_wake(addr, 1), 1);
        wait_until_eq(&fifo_done, seq + 1);
        cr_assert_eq(load(&fifo_order[idx[k]]), seq + 1,
                     "wake %d of %p readied another waiter than waiter %ld, the oldest", k,
                     (void *)addr, idx[k]);
        cr_assert_eq(results[idx[k]], 0);
    }
}

Test(gfutex, many_addresses_per_bucket_wake_the_right_waiter_in_fifo_order, .timeout = 60)
{
    test_start_runtime(2);
    sched_wg_init(&wg);
    /* FIFO_ADDRS words of one bucket, waited on interleaved. */
    uint32_t *same[FIFO_ADDRS];
    int n = 0;
    unsigned long b0 = gfutex_test_bucket(&pool[0]);
    for (int i = 0; i < (1 << 14) && n < FIFO_ADDRS; i++)
        if (gfutex_test_bucket(&pool[i]) == b0)
            same[n++] = &pool[i];
    cr_assert_eq(n, FIFO_ADDRS, "only %d words of one bucket", n);
    for (long i = 0; i < FIFO_N; i++) {
        fifo_addr[i] = same[i % FIFO_ADDRS];
        fifo_start(i);
    }
    for (int a = 0; a < FIFO_ADDRS; a++)
        cr_assert_eq(gfutex_nwaiters(same[a]), FIFO_PER);
    /* Wake the addresses in another order than they were queued in. */
    long idx[FIFO_N];
    for (int a = FIFO_ADDRS - 1; a >= 0; a--) {
        int k = fifo_of(same[a], idx);
        cr_assert_eq(k, FIFO_PER);
        wake_in_order(same[a], idx, 2);
        for (int o = 0; o < FIFO_ADDRS; o++)
            cr_assert_eq(gfutex_nwaiters(same[o]),
                         o < a    ? FIFO_PER
                         : o == a ? FIFO_PER - 2
                                  : 0,
                         "address %d after 2 wakes of address %d", o, a);
        cr_assert_eq(gfutex_wake(same[a], INT_MAX), FIFO_PER - 2);
        wait_until_eq(&fifo_done, (long)(FIFO_ADDRS - a) * FIFO_PER);
    }
    sched_wg_wait(&wg);
    cr_assert_eq(load(&fifo_done), FIFO_N);
}

Test(gfutex, requeue_across_buckets_keeps_fifo_behind_the_waiters_there, .timeout = 60)
{
    test_start_runtime(2);
    sched_wg_init(&wg);
    uint32_t *same[2], *other[2];
    pick_words(pool, 1 << 14, same, other);
    uint32_t *a = other[0], *b = other[1]; /* different buckets */
    uint32_t *a2 = same[1];                /* shares a's bucket */
    /* 0..4 wait on a, 5..9 on b, 10..14 on a2 (a's bucket, untouched). */
    for (long i = 0; i < 15; i++) {
        fifo_addr[i] = i < 5 ? a : i < 10 ? b : a2;
        fifo_start(i);
    }
    cr_assert_eq(gfutex_requeue(a, 0, 1, b, 3), 4, "wake 1 + move 3");
    wait_until_eq(&fifo_done, 1);
    cr_assert_eq(load(&fifo_order[0]), 1, "a's oldest waiter is the one woken");
    cr_assert_eq(gfutex_nwaiters(a), 1);
    cr_assert_eq(gfutex_nwaiters(b), 8);
    cr_assert_eq(gfutex_nwaiters(a2), 5, "the other word of a's bucket is left alone");
    for (long i = 1; i < 4; i++)
        fifo_addr[i] = b;
    /* b: its own 5..9 first, then the moved 1, 2, 3, in their order. */
    long order[] = {5, 6, 7, 8, 9, 1, 2, 3};
    wake_in_order(b, order, 8);
    long rest[] = {4};
    wake_in_order(a, rest, 1);
    long order2[] = {10, 11, 12, 13, 14};
    wake_in_order(a2, order2, 5);
    sched_wg_wait(&wg);
}

/* ---- the table grows ------------------------------------------------------------ */

enum { GROW_N = 2000 };
static uint32_t grow_words[GROW_N];
static long grow_ret[GROW_N], grow_woken;
static int64_t grow_deadline;

static void grow_waiter(void *arg)
{
    long i = (long)arg;
    grow_ret[i] = gfutex_wait(&grow_words[i], 0, i % 4 == 3 ? grow_deadline : -1);
    __atomic_fetch_add(&grow_woken, 1, __ATOMIC_SEQ_CST);
    sched_wg_done(&wg);
}

Test(gfutex, table_grows_with_addresses_and_keeps_every_waiter, .timeout = 60)
{
    test_start_runtime(2);
    sched_wg_init(&wg);
    unsigned long b0 = gfutex_test_buckets();
    grow_deadline = nanotime() + 1500 * MS; /* the timed ones wait across the growing */
    for (long i = 0; i < GROW_N; i++)
        go(grow_waiter, (void *)i);
    for (long i = 0; i < GROW_N; i++)
        if (i % 4 != 3)
            wait_until_waiters(&grow_words[i], 1);
    unsigned long b1 = gfutex_test_buckets();
    cr_assert_geq(b1 * 2, GROW_N, "%d addresses, %lu buckets (was %lu)", GROW_N, b1, b0);
    /* Each wake finds exactly its own word's waiter; every 4th times out. */
    for (long i = 0; i < GROW_N; i++)
        if (i % 4 != 3)
            cr_assert_eq(gfutex_wake(&grow_words[i], INT_MAX), 1, "word %ld", i);
    sched_wg_wait(&wg);
    for (long i = 0; i < GROW_N; i++)
        cr_assert_eq(grow_ret[i], i % 4 == 3 ? ETIMEDOUT : 0, "waiter %ld: %ld", i, grow_ret[i]);
    for (long i = 0; i < GROW_N; i++)
        cr_assert_eq(gfutex_nwaiters(&grow_words[i]), 0);
}

static void rq_timed(void *arg)
{
    uint32_t *a = arg;
    deadlines[0] = nanotime() + 40 * MS;
    results[0] = gfutex_wait(a, 0, deadlines[0]);
    woke_at[0] = nanotime();
    sched_wg_done(&wg);
}

Test(gfutex, requeued_waiter_still_times_out, .timeout = 30)
{
    test_start_runtime(2);
    sched_wg_init(&wg);
    go(rq_timed, &words[0]);
    wait_until_waiters(&words[0], 1);
    cr_assert_eq(gfutex_requeue(&words[0], 0, 0, &words[1], 1), 1);
    sched_wg_wait(&wg);
    cr_assert_eq(results[0], ETIMEDOUT);
    cr_assert_geq(woke_at[0], deadlines[0]);
    cr_assert_eq(gfutex_nwaiters(&words[1]), 0);
}

/* ---- deadlines ---------------------------------------------------------- */

Test(gfutex, deadline_conversion, .timeout = 10)
{
    int64_t d;
    cr_assert_eq(gfutex_deadline(CLOCK_MONOTONIC, &(struct timespec){1, 5}, &d), 0);
    cr_assert_eq(d, 1000000005LL);
    cr_assert_eq(gfutex_deadline(CLOCK_MONOTONIC, &(struct timespec){1, 1000000000}, &d), EINVAL);
    cr_assert_eq(gfutex_deadline(CLOCK_MONOTONIC, &(struct timespec){1, -1}, &d), EINVAL);
    cr_assert_eq(gfutex_deadline(CLOCK_PROCESS_CPUTIME_ID, &(struct timespec){1, 0}, &d), EINVAL);
    cr_assert_eq(gfutex_deadline(CLOCK_REALTIME, &(struct timespec){-5, 0}, &d), 0);
    cr_assert_eq(d, 0, "the past is already expired");
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    rt.tv_sec += 10;
    int64_t mono = nanotime();
    cr_assert_eq(gfutex_deadline(CLOCK_REALTIME, &rt, &d), 0);
    cr_assert(d > mono + 9000 * MS && d < mono + 11000 * MS, "10 s ahead, got %lld",
              (long long)(d - mono));
    cr_assert_eq(gfutex_deadline(CLOCK_REALTIME, &(struct timespec){INT64_MAX, 0}, &d), 0);
    cr_assert_eq(d, INT64_MAX, "unreachable: no deadline");
}
