/*
 * Run queues, after Go's proc.go.
 *
 * Each P has a 256-slot ring and a runnext slot. The owner P puts at the
 * tail and gets at the head; thieves grab up to half of the ring from the
 * head with one CAS. The ring never grows: when it is full, runqputslow
 * moves half of it plus the new G to the global queue in one batch, so one
 * lock acquisition pays for 129 Gs.
 *
 * runnext holds the G made runnable by the running G (a spawned thread, a
 * readied waiter). It runs next and inherits the time slice, which keeps
 * producer/consumer pairs on one P. Thieves take it only in their last
 * round, and only after a short spin if its P is running, to give the
 * owner the chance to run it first (a stolen runnext costs a move).
 *
 * The global queue is a linked list under sched.lock. globrunqget takes a
 * batch of min(len/nprocs+1, 128) so that Ps drain it evenly.
 *
 * Memory order: runqtail is published with a release store after the slot
 * is written; thieves load-acquire it. runqhead advances with CAS-release
 * (consumers commit). Slots are read with relaxed atomic loads because a
 * thief may read a slot the owner is concurrently reusing; the CAS on
 * runqhead then fails and the read is discarded.
 */
#include "sched.h"
#include "prefetch.h"
#include "threadblock.h"
#include "throw.h"

#define LOAD_ACQ(p)     __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define STORE_REL(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define CAS_REL(p, o, n)                                                                           \
    __atomic_compare_exchange_n((p), &(o), (n), 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED)
#define CAS_ACQREL(p, o, n)                                                                        \
    __atomic_compare_exchange_n((p), &(o), (n), 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)

static inline struct g *slot_load(struct p *pp, uint32_t i)
{
    return __atomic_load_n(&pp->runq[i % RUNQ_SIZE], __ATOMIC_RELAXED);
}

static inline void slot_store(struct p *pp, uint32_t i, struct g *gp)
{
    __atomic_store_n(&pp->runq[i % RUNQ_SIZE], gp, __ATOMIC_RELAXED);
}

bool runqempty(struct p *pp)
{
    /* As Go: a consistent snapshot of head, tail and runnext. */
    for (;;) {
        uint32_t head = LOAD_ACQ(&pp->runqhead);
        uint32_t tail = LOAD_ACQ(&pp->runqtail);
        struct g *next = LOAD_ACQ(&pp->runnext);
        if (tail == LOAD_ACQ(&pp->runqtail))
            return head == tail && next == NULL;
    }
}

uint32_t runqlen(struct p *pp)
{
    uint32_t head = LOAD_ACQ(&pp->runqhead);
    uint32_t tail = LOAD_ACQ(&pp->runqtail);
    uint32_t n = tail - head;
    return n > RUNQ_SIZE ? 0 : n;
}

/*
 * Move half of the local ring plus gp to the global queue in one batch.
 * Executed only by the owner P. Returns false if a thief moved the head
 * meanwhile (then the caller retries the fast path).
 */
static bool runqputslow(struct p *pp, struct g *gp, uint32_t head, uint32_t tail)
{
    struct g *batch[RUNQ_SIZE / 2 + 1];
    uint32_t n = (tail - head) / 2;
    if (n != RUNQ_SIZE / 2)
        goshim_throw("runqputslow: queue is not full");
    for (uint32_t i = 0; i < n; i++)
        batch[i] = slot_load(pp, head + i);
    if (!CAS_REL(&pp->runqhead, head, head + n))
        return false;
    batch[n] = gp;
    for (uint32_t i = 0; i < n; i++)
        batch[i]->schedlink = batch[i + 1];
    batch[n]->schedlink = NULL;
    struct gqueue q = {batch[0], batch[n]};
    globrunqputbatch(&q, (int32_t)(n + 1));
    __atomic_fetch_add(&pp->noverflow, 1, __ATOMIC_RELAXED);
    return true;
}

/*
 * Put gp on pp's local queue; with next, into runnext, kicking the old
 * runnext to the tail. Executed only by the owner P.
 */
void runqput(struct p *pp, struct g *gp, bool next)
{
    if (__builtin_expect(sched_chaos, 0))
        next = chaos_rand() & 1;
    if (next) {
        struct g *old = LOAD_ACQ(&pp->runnext);
        while (!CAS_ACQREL(&pp->runnext, old, gp))
            ;
        if (old == NULL)
            return;
        gp = old; /* kick the old runnext to the regular queue */
    }
    for (;;) {
        uint32_t head = LOAD_ACQ(&pp->runqhead);
        uint32_t tail = pp->runqtail;
        if (tail - head < RUNQ_SIZE) {
            slot_store(pp, tail, gp);
            STORE_REL(&pp->runqtail, tail + 1);
            return;
        }
        if (runqputslow(pp, gp, head, tail))
            return;
    }
}

/*
 * prefetch_next readies what the G queued after the one just taken will
 * touch when it first runs: a burst of new threads, each made in a block
 * that a thousand threads used since, otherwise waits for memory at every
 * switch. Gs that ran before (yielding, woken) are left alone: they are
 * seldom cold, and a yield storm would pay for the prefetches. The G after
 * it only gets its descriptor fetched, so that its fields load from cache
 * in the next call. Racy reads (a thief may take them meanwhile): only
 * addresses to prefetch come of them.
 */
static void prefetch_next(struct p *pp, uint32_t head, uint32_t tail)
{
#ifdef GOSHIM_SAN
    /* The racy reads are benign (Gs are never freed, a prefetch never faults), but they
     * are races to TSan: the sanitizer builds go without. */
    (void)pp, (void)head, (void)tail;
#else
    if (tail - head < 2)
        return;
    struct g *n1 = slot_load(pp, head + 1);
    if (__atomic_load_n(&n1->flags, __ATOMIC_RELAXED) & G_STARTED)
        return;
    g_prefetch_run(n1);
    if (tail - head >= 3)
        prefetch_lines(slot_load(pp, head + 2), sizeof(struct g));
#endif
}

/*
 * Get a G from the local queue; *inherit says it came from runnext and
 * should inherit the time slice. Executed only by the owner P.
 */
struct g *runqget(struct p *pp, bool *inherit)
{
    struct g *next = LOAD_ACQ(&pp->runnext);
    /* Only the owner sets runnext to non-NULL, so a failed CAS means a
     * thief took it; then the ring is what is left. */
    if (next != NULL && CAS_ACQREL(&pp->runnext, next, NULL)) {
        *inherit = true;
        return next;
    }
    *inherit = false;
    for (;;) {
        uint32_t head = LOAD_ACQ(&pp->runqhead);
        uint32_t tail = pp->runqtail;
        if (tail == head)
            return NULL;
        struct g *gp = slot_load(pp, head);
        if (CAS_REL(&pp->runqhead, head, head + 1)) {
            prefetch_next(pp, head, tail);
            return gp;
        }
    }
}

/*
 * Give a running owner the chance to schedule its runnext G itself: it is
 * often about to (it readied a G and blocks next), and a theft costs the
 * G a move to another CPU. Go sleeps 3 us here; a 3 us nanosleep lasts
 * the thread's timer slack instead (50 us by default, 83 us measured
 * here), long enough for the G to miss the CPU the thief was about to
 * give it: pigz -d's writer, 245 such sleeps a run, 26% slower than at
 * one P. So the thief spins the 3 us, and stops as soon as the G is gone.
 *
 * Where the owner ran it itself OWNER_RAN_NAP graces in a row, the P hands
 * off among its own Gs (a ping-pong) and needs no second CPU: the thief
 * then takes that long sleep after all, and gives up this victim. One that
 * polls on instead soon parks, and the owner's next ready pays a futex wake
 * for it (a cond ping-pong: 10% slower, 40% more M wake-ups); asleep, it
 * still counts as spinning, so those readies wake nobody. Returns false
 * when it slept.
 */
static bool runnext_grace(struct p *victim, struct g *next)
{
    if (__atomic_load_n(&victim->status, __ATOMIC_RELAXED) != Prunning)
        return true;
    int64_t until = nanotime() + RUNNEXT_GRACE_NS;
    while (LOAD_ACQ(&victim->runnext) == next) {
        if (nanotime() >= until) {
            __atomic_store_n(&victim->owner_ran, 0, __ATOMIC_RELAXED);
            return true;
        }
        procyield(20);
    }
    if (__atomic_add_fetch(&victim->owner_ran, 1, __ATOMIC_RELAXED) < OWNER_RAN_NAP)
        return true;
    osusleep(3);
    return false;
}

/*
 * Grab half of victim's ring into pp's ring starting at slot batchhead
 * (without publishing it). With stealRunNextG, take victim's runnext when
 * the ring is empty. Returns how many were grabbed.
 */
static uint32_t runqgrab(struct p *victim, struct p *pp, uint32_t batchhead, bool stealRunNextG)
{
    for (;;) {
        uint32_t head = LOAD_ACQ(&victim->runqhead);
        uint32_t tail = LOAD_ACQ(&victim->runqtail);
        uint32_t n = tail - head;
        n = n - n / 2;
        if (n == 0) {
            if (stealRunNextG) {
                struct g *next = LOAD_ACQ(&victim->runnext);
                if (next != NULL) {
                    if (!runnext_grace(victim, next))
                        return 0;
                    if (!CAS_ACQREL(&victim->runnext, next, NULL))
                        continue;
                    slot_store(pp, batchhead, next);
                    return 1;
                }
            }
            return 0;
        }
        if (n > RUNQ_SIZE / 2) /* read inconsistent head and tail */
            continue;
        for (uint32_t i = 0; i < n; i++)
            slot_store(pp, batchhead + i, slot_load(victim, head + i));
        if (CAS_REL(&victim->runqhead, head, head + n))
            return n;
    }
}

/*
 * Steal half of victim's queue into pp's and return one G to run.
 * Executed only by the owner of pp.
 */
struct g *runqsteal(struct p *pp, struct p *victim, bool stealRunNextG)
{
    uint32_t tail = pp->runqtail;
    uint32_t n = runqgrab(victim, pp, tail, stealRunNextG);
    if (n == 0)
        return NULL;
    __atomic_fetch_add(&pp->nsteal, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&pp->nstolen, n, __ATOMIC_RELAXED);
    n--;
    struct g *gp = slot_load(pp, tail + n);
    if (n == 0)
        return gp;
    uint32_t head = LOAD_ACQ(&pp->runqhead);
    if (tail - head + n >= RUNQ_SIZE)
        goshim_throw("runqsteal: runq overflow");
    STORE_REL(&pp->runqtail, tail + n);
    return gp;
}

/* ---- global queue: sched.lock must be held ---------------------------- */

void globrunqput(struct g *gp)
{
    gp->schedlink = NULL;
    if (sched.runq.tail)
        sched.runq.tail->schedlink = gp;
    else
        sched.runq.head = gp;
    sched.runq.tail = gp;
    __atomic_store_n(&sched.runqsize, sched.runqsize + 1, __ATOMIC_RELAXED);
}

void globrunqputhead(struct g *gp)
{
    gp->schedlink = sched.runq.head;
    sched.runq.head = gp;
    if (!sched.runq.tail)
        sched.runq.tail = gp;
    __atomic_store_n(&sched.runqsize, sched.runqsize + 1, __ATOMIC_RELAXED);
}

/* Put a linked batch of n Gs on the global queue; takes sched.lock. */
void globrunqputbatch(struct gqueue *batch, int32_t n)
{
    runtime_lock(&sched.lock);
    if (sched.runq.tail)
        sched.runq.tail->schedlink = batch->head;
    else
        sched.runq.head = batch->head;
    sched.runq.tail = batch->tail;
    __atomic_store_n(&sched.runqsize, sched.runqsize + n, __ATOMIC_RELAXED);
    runtime_unlock(&sched.lock);
}

static struct g *globpop(void)
{
    struct g *gp = sched.runq.head;
    sched.runq.head = gp->schedlink;
    if (!sched.runq.head)
        sched.runq.tail = NULL;
    gp->schedlink = NULL;
    return gp;
}

/*
 * Take a batch from the global queue: one G to return, the rest onto pp's
 * local queue. max > 0 caps the batch. sched.lock must be held.
 */
struct g *globrunqget(struct p *pp, int32_t max)
{
    int32_t size = sched.runqsize;
    if (size == 0)
        return NULL;
    int32_t n = size / sched.gomaxprocs + 1;
    if (n > size)
        n = size;
    if (max > 0 && n > max)
        n = max;
    if (n > RUNQ_SIZE / 2)
        n = RUNQ_SIZE / 2;
    __atomic_store_n(&sched.runqsize, size - n, __ATOMIC_RELAXED);
    __atomic_fetch_add(&pp->nglobget, 1, __ATOMIC_RELAXED);
    struct g *gp = globpop();
    for (n--; n > 0; n--)
        runqput(pp, globpop(), false);
    return gp;
}
