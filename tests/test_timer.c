/*
 * The timer heap (sched/timer.c): run by hand in deadline order, removal,
 * the next due time; with the runtime, idle Ms that wake for each timer in
 * order, and a timer deleted before it fires never called. Times are
 * asserted from below only (never "took less than").
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "sched/sched.h"
#include "sched/timer.h"
#include "tests/rt_start.h"
#include "tests/wg.h"

#define MS 1000000LL

static struct sched_wg wg;

/* ---- timers ------------------------------------------------------------- */

enum { NT = 200 };
static struct timer tm[NT];
static long fired[NT], nslot, nfired, fired_early;

static void record(void *arg)
{
    long i = (long)arg;
    if (nanotime() < tm[i].when)
        __atomic_fetch_add(&fired_early, 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&fired[__atomic_fetch_add(&nslot, 1, __ATOMIC_SEQ_CST)], i, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&nfired, 1, __ATOMIC_SEQ_CST); /* after the slot is written */
}

static void shuffle(long *perm, long n)
{
    for (long i = 0; i < n; i++)
        perm[i] = i;
    for (long i = n - 1; i > 0; i--) {
        long j = rand() % (i + 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

/* The heap alone, run by hand (no runtime): order, removal, next. */
Test(timer, timers_run_expired_in_deadline_order, .timeout = 10)
{
    long perm[NT];
    srand(42);
    shuffle(perm, NT);
    for (long k = 0; k < NT; k++) {
        long i = perm[k];
        tm[i] = (struct timer){.when = 1000 + i * 10, .f = record, .arg = (void *)i};
        timer_add(&tm[i]);
    }
    for (long i = 1; i < NT; i += 7)
        cr_assert(timer_del(&tm[i]), "timer %ld was pending", i);
    cr_assert_eq(timers_next(), 1000);
    int64_t next = timers_run(1000 + 100 * 10);
    cr_assert_eq(next, 1000 + 101 * 10, "the next one: %lld", (long long)next);
    next = timers_run(INT64_MAX);
    cr_assert_eq(next, -1);
    cr_assert_eq(timers_next(), -1);
    long expect = 0;
    for (long k = 0; k < nfired; k++, expect++) {
        if (expect % 7 == 1)
            expect++;
        cr_assert_eq(fired[k], expect, "position %ld: timer %ld", k, fired[k]);
    }
    cr_assert_eq(nfired, NT - (NT + 5) / 7);
    for (long i = 1; i < NT; i += 7)
        cr_assert_not(timer_del(&tm[i]), "already deleted");
    cr_assert_not(timer_del(&tm[0]), "already fired");
}

static void nop_g(void *arg)
{
    (void)arg;
    sched_wg_done(&wg);
}

/* With the runtime: idle Ms wake up for each timer, in deadline order. The
 * timers are all armed before the runtime starts (so none can run before
 * the last is added); the first M, once its G is done, finds them. */
Test(timer, timers_fire_in_deadline_order, .timeout = 30)
{
    enum { N = 40 };
    long perm[N];
    srand(7);
    shuffle(perm, N);
    int64_t base = nanotime() + 5 * MS;
    for (long k = 0; k < N; k++) {
        long i = perm[k];
        tm[i] = (struct timer){.when = base + i * 2 * MS, .f = record, .arg = (void *)i};
        timer_add(&tm[i]);
    }
    test_start_runtime(1); /* one P: one M runs timers at a time, so order is observable */
    sched_wg_init(&wg);
    sched_wg_add(&wg, 1);
    int err;
    cr_assert_not_null(sched_spawn(nop_g, NULL, NULL, &err), "spawn failed: %d", err);
    sched_wg_wait(&wg);
    while (__atomic_load_n(&nfired, __ATOMIC_SEQ_CST) != N)
        usleep(500);
    for (long k = 0; k < N; k++)
        cr_assert_eq(fired[k], k, "position %ld: timer %ld", k, fired[k]);
    cr_assert_eq(fired_early, 0);
}

static long flag1, flag2;

static void set_flag(void *arg)
{
    __atomic_store_n((long *)arg, 1, __ATOMIC_SEQ_CST);
}

Test(timer, timer_del_before_firing_prevents_the_call, .timeout = 30)
{
    test_start_runtime(2);
    int64_t now = nanotime();
    /* Far enough ahead that a slow sanitizer run on a busy machine deletes t1 in time. */
    struct timer t1 = {.when = now + 1000 * MS, .f = set_flag, .arg = &flag1};
    struct timer t2 = {.when = now + 1030 * MS, .f = set_flag, .arg = &flag2};
    timer_add(&t1);
    timer_add(&t2);
    cr_assert(timer_del(&t1));
    while (__atomic_load_n(&flag2, __ATOMIC_SEQ_CST) != 1)
        usleep(500);
    cr_assert_geq(nanotime(), t2.when);
    cr_assert_eq(__atomic_load_n(&flag1, __ATOMIC_SEQ_CST), 0, "a deleted timer fired");
    cr_assert_not(timer_del(&t2), "t2 already fired");
    cr_assert_not(timer_del(&t1));
    usleep(10000);
    cr_assert_eq(__atomic_load_n(&flag1, __ATOMIC_SEQ_CST), 0);
}
