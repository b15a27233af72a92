/*
 * Run-queue rules (docs/design.md, rules 1-3), tested on P
 * structures directly: no M runs, so every outcome is deterministic.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>

#include "sched/sched.h"

/* Test objects come from static pools: each test is its own process. */
static struct g gpool[2048];
static struct p ppool[8];
static int ngpool, nppool;

static struct g *mkg(uint64_t id)
{
    cr_assert_lt(ngpool, 2048);
    struct g *gp = &gpool[ngpool++];
    gp->goid = id;
    gp->atomicstatus = Grunnable;
    return gp;
}

static struct p *mkp(int id)
{
    cr_assert_lt(nppool, 8);
    struct p *pp = &ppool[nppool++];
    pp->id = id;
    pp->status = Prunning;
    sched.allp[id] = pp;
    return pp;
}

static void setup(void)
{
    sched.gomaxprocs = 2;
    sched_steal_order_init(2);
}

static int32_t globlen(void)
{
    int32_t n = 0;
    for (struct g *gp = sched.runq.head; gp; gp = gp->schedlink)
        n++;
    cr_assert_eq(n, sched.runqsize, "global list length %d, runqsize %d", n, sched.runqsize);
    return n;
}

Test(runq, local_queue_is_fifo, .init = setup, .timeout = 10)
{
    struct p *pp = mkp(0);
    bool inherit;
    for (uint64_t i = 0; i < 10; i++)
        runqput(pp, mkg(i), false);
    cr_assert_eq(runqlen(pp), 10);
    for (uint64_t i = 0; i < 10; i++) {
        struct g *gp = runqget(pp, &inherit);
        cr_assert(gp);
        cr_assert_eq(gp->goid, i);
        cr_assert(!inherit);
    }
    cr_assert_null(runqget(pp, &inherit));
}

Test(runq, newproc_goes_to_runnext_and_kicks_old_to_tail, .init = setup, .timeout = 10)
{
    struct p *pp = mkp(0);
    bool inherit;
    runqput(pp, mkg(1), false);
    runqput(pp, mkg(2), true);
    runqput(pp, mkg(3), true); /* 2 is kicked behind 1 */
    cr_assert_eq(pp->runnext->goid, 3);
    struct g *gp = runqget(pp, &inherit);
    cr_assert_eq(gp->goid, 3);
    cr_assert(inherit, "runnext inherits the time slice");
    cr_assert_eq(runqget(pp, &inherit)->goid, 1);
    cr_assert_eq(runqget(pp, &inherit)->goid, 2);
}

Test(runq, overflow_moves_half_plus_new_to_global, .init = setup, .timeout = 10)
{
    struct p *pp = mkp(0);
    for (uint64_t i = 0; i < RUNQ_SIZE; i++)
        runqput(pp, mkg(i), false);
    cr_assert_eq(runqlen(pp), RUNQ_SIZE);
    cr_assert_eq(sched.runqsize, 0);
    runqput(pp, mkg(1000), false);
    cr_assert_eq(globlen(), RUNQ_SIZE / 2 + 1, "half the ring plus the new G go global");
    cr_assert_eq(runqlen(pp), RUNQ_SIZE / 2);
    cr_assert_eq(pp->noverflow, 1);
    /* The oldest half went, in order, and the new G last. */
    uint64_t want = 0;
    struct g *gp = sched.runq.head;
    for (; gp->schedlink; gp = gp->schedlink)
        cr_assert_eq(gp->goid, want++);
    cr_assert_eq(gp->goid, 1000);
    bool inherit;
    cr_assert_eq(runqget(pp, &inherit)->goid, RUNQ_SIZE / 2,
                 "the local queue keeps the newer half");
}

Test(runq, steal_takes_half, .init = setup, .timeout = 10)
{
    struct p *thief = mkp(0), *victim = mkp(1);
    for (uint64_t i = 0; i < 10; i++)
        runqput(victim, mkg(i), false);
    struct g *gp = runqsteal(thief, victim, false);
    cr_assert(gp);
    cr_assert_eq(runqlen(victim), 5);
    cr_assert_eq(runqlen(thief), 4, "5 stolen: one returned, four queued");
    cr_assert_eq(gp->goid, 4, "the last stolen G is returned");
    cr_assert_eq(thief->nstolen, 5);
    /* Odd: 7 -> 4 stolen (n - n/2). */
    struct p *v2 = mkp(1);
    struct p *t2 = mkp(0);
    for (uint64_t i = 0; i < 7; i++)
        runqput(v2, mkg(i), false);
    runqsteal(t2, v2, false);
    cr_assert_eq(runqlen(v2), 3);
    cr_assert_eq(runqlen(t2), 3);
}

Test(runq, runnext_is_stolen_only_in_last_round, .init = setup, .timeout = 10)
{
    struct p *thief = mkp(0), *victim = mkp(1);
    static struct m mstatic = {.fastrand = 88172645463325252ULL};
    struct m *mp = &mstatic;
    struct g *only = mkg(42);
    runqput(victim, only, true);
    cr_assert_null(runqsteal(thief, victim, false), "no runnext steal outside the last round");
    int round = -1;
    struct g *gp = stealwork(mp, thief, &round);
    cr_assert_eq(gp, only);
    cr_assert_eq(round, STEAL_TRIES - 1, "stolen in round %d", round);
    cr_assert_null(victim->runnext);
    /* With ring work, the first round takes from the ring, not runnext. */
    runqput(victim, mkg(7), false);
    runqput(victim, mkg(8), true);
    gp = stealwork(mp, thief, &round);
    cr_assert_eq(round, 0);
    cr_assert_eq(gp->goid, 7);
    cr_assert_eq(victim->runnext->goid, 8);
}

Test(runq, global_batch_is_len_over_nprocs_plus_one_capped_at_128, .init = setup, .timeout = 10)
{
    struct p *pp = mkp(0);
    for (uint64_t i = 0; i < 100; i++)
        globrunqput(mkg(i));
    struct g *gp = globrunqget(pp, 0);
    cr_assert_eq(gp->goid, 0);
    cr_assert_eq(runqlen(pp), 100 / 2 + 1 - 1, "batch of 51: one returned, 50 queued");
    cr_assert_eq(sched.runqsize, 49);
    struct p *p2 = mkp(1);
    for (uint64_t i = 0; i < 1000; i++)
        globrunqput(mkg(i));
    globrunqget(p2, 0);
    cr_assert_eq(runqlen(p2), 127, "capped at 128 per batch");
    struct p *p3 = mkp(1);
    globrunqget(p3, 1);
    cr_assert_eq(runqlen(p3), 0, "max caps the batch");
}

Test(runq, every_61st_tick_takes_global_first, .init = setup, .timeout = 10)
{
    struct p *pp = mkp(0);
    bool inherit;
    struct g *local = mkg(1), *global = mkg(2);
    runqput(pp, local, false);
    globrunqput(global);
    pp->schedtick = 60;
    cr_assert_eq(findrunnable_local(pp, &inherit), local, "tick 60: local work first");
    runqput(pp, local, false);
    pp->schedtick = 61;
    cr_assert_eq(findrunnable_local(pp, &inherit), global, "tick 61: global first");
    pp->schedtick = 122;
    globrunqput(global);
    cr_assert_eq(findrunnable_local(pp, &inherit), global, "tick 122: global first");
}

/* A G just woken into runnext goes first once at the fairness tick (a
 * sleeper beside a spinner demoted to the global queue must not wait one
 * more slice); the global queue's head then runs at the very next look,
 * even if runnext is set again (two Gs ping-ponging through runnext
 * cannot starve it). */
Test(runq, fairness_tick_lets_a_woken_runnext_go_first_once, .init = setup, .timeout = 10)
{
    struct p *pp = mkp(0);
    bool inherit;
    struct g *woken = mkg(1), *again = mkg(2), *global = mkg(3);
    globrunqput(global);
    runqput(pp, woken, true);
    pp->schedtick = 61;
    cr_assert_eq(findrunnable_local(pp, &inherit), woken, "tick 61, runnext set: it goes first");
    cr_assert(inherit, "taken from runnext");
    runqput(pp, again, true);
    cr_assert_eq(findrunnable_local(pp, &inherit), global,
                 "the next look takes the global queue first, runnext or not");
    cr_assert_eq(findrunnable_local(pp, &inherit), again, "then runnext");
    cr_assert_not(pp->fairdue, "the deferral is spent");
}

/* ---- a thief's grace for a running P's runnext G (runnext_grace) ---------------------- */

/* A thief steals a running P's runnext G once its grace is over: the owner did not run it. */
Test(runq, runnext_is_stolen_after_the_grace_and_the_streak_ends, .init = setup, .timeout = 10)
{
    struct p *thief = mkp(0), *victim = mkp(1);
    struct g *only = mkg(42);
    runqput(victim, only, true);
    victim->owner_ran = OWNER_RAN_NAP - 1;
    int64_t t0 = nanotime();
    cr_assert_eq(runqsteal(thief, victim, true), only);
    cr_assert_geq(nanotime() - t0, RUNNEXT_GRACE_NS, "stolen without the grace");
    cr_assert_eq(victim->owner_ran, 0, "a theft ends the owner's streak");
}

/* The victim's owner: at each round it puts a G in runnext and, once the thief has seen it,
 * runs it itself about 1 us later (runqget), as a G that readies another and parks does.
 * Rounds enough for a loaded machine, where the kernel takes the owner's CPU now and then
 * and a theft starts its streak over (a CI run got 7 long rounds of 255). */
enum { QUICK_ROUNDS = 2048 };
struct quick_owner {
    struct p *victim;
    struct g *gs[QUICK_ROUNDS];
    int round;                   /* main -> owner: the round to play; atomic */
    int seen;                    /* main -> owner: the thief saw this round's G; atomic */
    int done;                    /* owner -> main: the last round played; atomic */
    struct g *ran[QUICK_ROUNDS]; /* what the owner took back, each round */
};

static void *quick_owner_main(void *arg)
{
    struct quick_owner *o = arg;
    bool inherit;
    for (int r = 1; r < QUICK_ROUNDS; r++) {
        while (__atomic_load_n(&o->round, __ATOMIC_ACQUIRE) < r)
            procyield(20);
        runqput(o->victim, o->gs[r], true);
        while (__atomic_load_n(&o->seen, __ATOMIC_ACQUIRE) < r)
            procyield(20);
        int64_t until = nanotime() + 1000;
        while (nanotime() < until)
            procyield(20);
        o->ran[r] = runqget(o->victim, &inherit);
        __atomic_store_n(&o->done, r, __ATOMIC_RELEASE);
    }
    return NULL;
}

/* A thief that saw the owner run its runnext G OWNER_RAN_NAP graces in a row (a P handing
 * off among its own Gs) sleeps rather than polling on, and takes nothing. */
Test(runq, a_thief_sleeps_once_the_owner_ran_runnext_graces_in_a_row, .init = setup, .timeout = 20)
{
    struct p *thief = mkp(0), *victim = mkp(1);
    static struct quick_owner o;
    o.victim = victim;
    for (int r = 1; r < QUICK_ROUNDS; r++)
        o.gs[r] = mkg((uint64_t)r);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, quick_owner_main, &o), 0);
    int napped = 0, kept = 0, nstolen = 0, r = 1;
    for (; r < QUICK_ROUNDS; r++) {
        uint32_t before = victim->owner_ran;
        __atomic_store_n(&o.round, r, __ATOMIC_RELEASE);
        while (__atomic_load_n(&victim->runnext, __ATOMIC_ACQUIRE) != o.gs[r])
            procyield(20);
        __atomic_store_n(&o.seen, r, __ATOMIC_RELEASE);
        int64_t t0 = nanotime();
        struct g *stolen = runqsteal(thief, victim, true);
        int64_t took = nanotime() - t0;
        while (__atomic_load_n(&o.done, __ATOMIC_ACQUIRE) < r)
            procyield(20);
        if (stolen) { /* the owner was off its CPU past the grace: the streak starts over */
            cr_assert_eq(stolen, o.gs[r]);
            cr_assert_null(o.ran[r]);
            cr_assert_eq(victim->owner_ran, 0);
            thief->runqhead = thief->runqtail = 0;
            nstolen++;
            continue;
        }
        cr_assert_eq(o.ran[r], o.gs[r], "round %d: the G is nobody's", r);
        if (victim->owner_ran == before + 1 && before + 1 >= OWNER_RAN_NAP) {
            napped += took >= 3000; /* a nanosleep of 3 us lasts at least that */
            if (++kept == 8)
                break;
        }
    }
    /* It plays the rounds left alone. */
    __atomic_store_n(&o.seen, QUICK_ROUNDS, __ATOMIC_RELEASE);
    __atomic_store_n(&o.round, QUICK_ROUNDS, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
    /* A machine so loaded that the owner was mostly off its CPU forms no streak; a thief
     * that never lets one form fails. */
    if (kept < 8 && nstolen > (r - 1) / 4)
        cr_skip_test("the owner was off its CPU in %d of %d rounds: too loaded for streaks",
                     nstolen, r - 1);
    cr_assert_eq(kept, 8, "only %d rounds with the owner's streak long enough (%d of %d stolen)",
                 kept, nstolen, r - 1);
    cr_assert_eq(napped, kept, "the thief slept in %d of %d such rounds", napped, kept);
}
