/*
 * G-aware futex (contract in gfutex.h), after Go's sema.go semtable.
 *
 * A table of buckets, chosen by hashing the address; each bucket is a runtime_lock and a
 * chain of per-address wait queues, one per address that has G waiters. A queue is a FIFO
 * ring of struct gfwaiter; the oldest waiter is its head and is the element linked in the
 * bucket's chain (as Go's semaRoot treap with its sudogs), so the table needs no memory per
 * address beyond the waiters' own. Wake, requeue and wait walk only the chain of distinct
 * addresses of one bucket, never the other waiters of their address or of the addresses
 * sharing the bucket: with one chain of waiters per bucket, exit's wake of a join word that
 * shares the bucket of a mutex with 100k waiters would walk them all.
 *
 * The table grows (doubling) when the number of queues exceeds twice the number of buckets,
 * so a chain stays short however many addresses are waited on. Growing locks every bucket of
 * the old table in index order (one grower at a time, grow.lock), moves every queue to the
 * new table, updates each waiter's bucket, publishes the new table and unlocks. Anyone who
 * locked a bucket looks at the table pointer again under that lock and starts over if it
 * changed. Old tables are never unmapped (a late reader may still be looking at one); they
 * add up to less than the live one. Table memory comes from mmap: fresh zero pages.
 *
 * A G waiter is a struct gfwaiter on the waiting G's stack (it lives until gfutex_wait
 * returns): wait locks the bucket, checks *addr == val, enqueues, and gopark()s with the
 * bucket lock as unlockf, so the check and the enqueue are atomic with respect to wake, which
 * takes the same lock to dequeue. The waker readies the Gs after dropping the lock.
 *
 * Timeouts: a struct timer inside the waiter, armed before the bucket is locked (timer_add
 * may start an M: not under a bucket lock). Its function takes the bucket lock and decides
 * under it, like wake: exactly one of {wake, requeue-wake, timeout} moves the waiter out of
 * QUEUED and readies the G, so a G is never readied twice. The waiter, once running again,
 * calls timer_del, which also waits for a timer function still running with a pointer to the
 * waiter, before the frame goes away. A timeout that fires before the waiter is queued
 * (ARMING) just marks it TIMEDOUT; wait then returns ETIMEDOUT without parking.
 *
 * Requeue and growing move G waiters between buckets holding both locks and update w->b;
 * whoever follows w->b (the timer function, an interrupter, the waiter itself) locks it and re-
 * checks it, so it always ends up holding the bucket the waiter is on.
 *
 * Thread waiters (callers that are not Gs) are counted under the bucket lock, after the same
 * value check, in a fixed array of counters indexed by the address's hash (so growing never
 * moves them), and sleep in the kernel futex on addr itself. wake handles G waiters first and
 * issues FUTEX_WAKE for the rest only if the counter is not zero: no system call when only Gs
 * wait. Requeue wakes thread waiters instead of moving them.
 *
 * Lock order: grow.lock, then bucket locks (two in address order, or all in index order), then
 * timers.lock or sched.lock (through goready and timer_add never: those run after the bucket is
 * unlocked).
 *
 * The G paths use no TLS but the current-G lookup, and no errno (raw syscalls return -errno).
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "libc.h"
#include "gfutex.h"
#include "sched.h"
#include <string.h>
#include "throw.h"
#include "timer.h"

enum {
    GFUTEX_BUCKETS0 = 256, /* buckets of the first (static) table; a power of two */
    GFUTEX_NTHREADS = 251, /* thread-waiter counters */
};

enum wstate {
    W_ARMING,      /* timer armed, not queued yet */
    W_QUEUED,      /* on its address's queue */
    W_WOKEN,       /* dequeued by wake/requeue (or the value check failed) */
    W_TIMEDOUT,    /* dequeued, or never queued, by the timer */
    W_INTERRUPTED, /* dequeued by gfutex_interrupt */
};

struct gfbucket;

struct gfwaiter {
    uint32_t *addr;        /* b->lock */
    struct g *gp;          /* the waiting G */
    struct gfbucket *b;    /* bucket it is on; changed under both locks (requeue, grow) */
    struct gfwaiter *next; /* ring of its address's queue, oldest first; b->lock */
    struct gfwaiter *prev; /* b->lock */
    /* Head of its queue only (the oldest waiter): its place in the bucket chain. */
    struct gfwaiter *qnext, *qprev; /* b->lock */
    uint32_t ishead;                /* b->lock */
    int state;      /* enum wstate; b->lock, but ARMING -> QUEUED/WOKEN/TIMEDOUT by CAS */
    struct timer t; /* timeout, when timed */
};

struct gfbucket {
    struct runtime_lock lock;
    struct gfwaiter *queues; /* chain of queue heads; lock */
    uint32_t nq;             /* queues in the chain; lock */
};

struct gftable {
    uintptr_t mask; /* buckets - 1 */
    struct gfbucket b[];
};

static struct {
    struct gftable t;
    struct gfbucket b[GFUTEX_BUCKETS0];
} table0 = {.t = {.mask = GFUTEX_BUCKETS0 - 1}};

/* The live table; atomic, changed under every bucket lock. Read through LIVE_TABLE before a
 * bucket is locked: a fork child's reset takes it back to table0 first (a bucket of the
 * parent's grown table may be locked by a thread the child does not have). */
static struct gftable *table = &table0.t;
#define LIVE_TABLE() (fork_settled(), __atomic_load_n(&table, __ATOMIC_ACQUIRE))
/* The queues of the live table in pairs: each bucket adds its own count rounded down to an
 * even number (chain_link, chain_unlink), so the shared counter changes only when a chain
 * reaches or leaves a second queue. A wait and its wake on a lone address, the common case,
 * make and drop a queue in a chain of one without a locked instruction on this line, and
 * the count is short of the truth by less than one queue per bucket. Atomic. */
static uint64_t nqueues;
static struct {
    struct runtime_lock lock; /* one grower; wake_every_g holds it to keep the table still */
} grow;
static uint32_t nthreads[GFUTEX_NTHREADS]; /* thread waiters per hash; incremented under the
                                            * bucket lock, decremented atomically */

static uintptr_t hashof(uint32_t *addr)
{
    uintptr_t h = (uintptr_t)addr >> 2;
    h ^= h >> 17;
    h *= 0x9e3779b97f4a7c15ULL; /* Fibonacci hashing spreads nearby words */
    return h ^ (h >> 29);
}

static uint32_t *nthreads_of(uint32_t *addr)
{
    return &nthreads[((uintptr_t)addr >> 2) % GFUTEX_NTHREADS];
}

/* Lock and return addr's bucket in the live table. */
static struct gfbucket *lockbucket(uint32_t *addr)
{
    for (;;) {
        struct gftable *t = LIVE_TABLE();
        struct gfbucket *b = &t->b[hashof(addr) & t->mask];
        runtime_lock(&b->lock);
        if (__atomic_load_n(&table, __ATOMIC_ACQUIRE) == t)
            return b;
        runtime_unlock(&b->lock); /* grown meanwhile */
    }
}

/* Lock the bucket *bp names, following moves (requeue, grow); returns it. */
static struct gfbucket *lockfollow(struct gfbucket *const *bp)
{
    for (;;) {
        struct gfbucket *b = __atomic_load_n(bp, __ATOMIC_ACQUIRE);
        if (!b)
            return NULL;
        runtime_lock(&b->lock);
        if (__atomic_load_n(bp, __ATOMIC_ACQUIRE) == b)
            return b;
        runtime_unlock(&b->lock);
    }
}

/* The queue of addr in b, or NULL. b->lock held. O(queues in b). */
static struct gfwaiter *findqueue(struct gfbucket *b, uint32_t *addr)
{
    for (struct gfwaiter *q = b->queues; q; q = q->qnext)
        if (q->addr == addr)
            return q;
    return NULL;
}

static void chain_link(struct gfbucket *b, struct gfwaiter *q)
{
    if (++b->nq % 2 == 0)
        __atomic_fetch_add(&nqueues, 2, __ATOMIC_RELAXED);
    q->ishead = 1;
    q->qprev = NULL;
    q->qnext = b->queues;
    if (b->queues)
        b->queues->qprev = q;
    b->queues = q;
}

static void chain_unlink(struct gfbucket *b, struct gfwaiter *q)
{
    if (b->nq-- % 2 == 0)
        __atomic_fetch_sub(&nqueues, 2, __ATOMIC_RELAXED);
    if (q->qprev)
        q->qprev->qnext = q->qnext;
    else
        b->queues = q->qnext;
    if (q->qnext)
        q->qnext->qprev = q->qprev;
    q->qnext = q->qprev = NULL;
    q->ishead = 0;
}

/* Append w (w->addr, w->b set) to its address's queue in b, making one if
 * needed; q is that queue if the caller knows it (else NULL: looked up).
 * Returns the queue. b->lock held. */
static struct gfwaiter *enqueue(struct gfbucket *b, struct gfwaiter *w, struct gfwaiter *q)
{
    w->gp->gfqueued = 1;
    if (!q)
        q = findqueue(b, w->addr);
    if (!q) {
        w->next = w->prev = w;
        chain_link(b, w);
        return w;
    }
    struct gfwaiter *tail = q->prev;
    w->ishead = 0;
    w->next = q;
    w->prev = tail;
    tail->next = w;
    q->prev = w;
    return q;
}

/* Take w off its queue in b (the next waiter heads the queue if w did). b->lock held. */
static void dequeue(struct gfbucket *b, struct gfwaiter *w)
{
    w->gp->gfqueued = 0;
    if (w->ishead) {
        struct gfwaiter *nh = w->next;
        if (nh == w) {
            chain_unlink(b, w);
        } else {
            /* nh takes w's place in the chain. */
            nh->ishead = 1;
            nh->qnext = w->qnext;
            nh->qprev = w->qprev;
            if (nh->qprev)
                nh->qprev->qnext = nh;
            else
                b->queues = nh;
            if (nh->qnext)
                nh->qnext->qprev = nh;
            w->qnext = w->qprev = NULL;
            w->ishead = 0;
        }
    }
    w->prev->next = w->next;
    w->next->prev = w->prev;
    w->next = w->prev = NULL;
}

/* Pop up to n waiters of queue q (b->lock held) onto *tail's chain
 * (linked through next), marking them W_WOKEN. Returns how many. */
static int popn(struct gfbucket *b, struct gfwaiter *q, int n, struct gfwaiter ***tail)
{
    int k = 0;
    while (q && k < n) {
        struct gfwaiter *w = q;
        q = w->next == w ? NULL : w->next;
        dequeue(b, w);
        w->state = W_WOKEN;
        __atomic_store_n(&w->gp->gfbucket, NULL, __ATOMIC_RELEASE); /* see gfutex_wait */
        **tail = w;
        *tail = &w->next;
        k++;
    }
    return k;
}

/* Ready a chain of woken waiters (linked through next, already off every
 * queue; the last next is NULL). Read everything before goready: then the
 * G may run and its frame, which holds w, may be gone. */
static void ready_chain(struct gfwaiter *w)
{
    while (w) {
        struct gfwaiter *next = w->next;
        struct g *gp = w->gp;
        goready(gp);
        w = next;
    }
}

/* Map a zeroed table of n buckets (n a power of two), or NULL. */
static struct gftable *table_map(uintptr_t n)
{
    size_t len = sizeof(struct gftable) + n * sizeof(struct gfbucket);
    long r = rt_syscall6(SYS_mmap, 0, (long)len, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r < 0 && r > -4096)
        return NULL;
    struct gftable *t = (struct gftable *)r;
    t->mask = n - 1;
    return t;
}

/* nqueues misses about half a queue per bucket when they average two (a chain of odd
 * length counts one less): the table grows past 1.5 counted, which is 2 in all. */
#define GROW_AT(t) (3 * ((t)->mask + 1) / 2)

/*
 * Double the table if it holds more than about two queues per bucket (nqueues). Called with
 * no bucket lock held; amortised O(1) per queue made. A failed mapping leaves the table as it
 * is (longer chains, still correct).
 */
static void maybe_grow(void)
{
    struct gftable *t = LIVE_TABLE();
    if (__atomic_load_n(&nqueues, __ATOMIC_RELAXED) <= GROW_AT(t))
        return;
    struct m *mp = acquirem(); /* no preemption while holding the locks */
    runtime_lock(&grow.lock);
    t = __atomic_load_n(&table, __ATOMIC_ACQUIRE);
    struct gftable *nt = NULL;
    if (__atomic_load_n(&nqueues, __ATOMIC_RELAXED) > GROW_AT(t))
        nt = table_map(2 * (t->mask + 1));
    if (!nt) {
        runtime_unlock(&grow.lock);
        releasem(mp);
        return;
    }
    for (uintptr_t i = 0; i <= t->mask; i++)
        runtime_lock(&t->b[i].lock);
    for (uintptr_t i = 0; i <= t->mask; i++) {
        struct gfwaiter *q = t->b[i].queues, *qn;
        for (; q; q = qn) {
            qn = q->qnext;
            struct gfbucket *nb = &nt->b[hashof(q->addr) & nt->mask];
            chain_link(nb, q);
            struct gfwaiter *w = q;
            do {
                __atomic_store_n(&w->b, nb, __ATOMIC_RELEASE);
                __atomic_store_n(&w->gp->gfbucket, nb, __ATOMIC_RELEASE);
                w = w->next;
            } while (w != q);
        }
        t->b[i].queues = NULL;
        if (t->b[i].nq >= 2)
            __atomic_fetch_sub(&nqueues, t->b[i].nq & ~1u, __ATOMIC_RELAXED);
        t->b[i].nq = 0;
    }
    __atomic_store_n(&table, nt, __ATOMIC_RELEASE);
    for (uintptr_t i = 0; i <= t->mask; i++)
        runtime_unlock(&t->b[i].lock);
    runtime_unlock(&grow.lock);
    releasem(mp);
}

/*
 * Timer function: time out the waiter if it is still waiting. A waiter not queued yet
 * (ARMING) is marked TIMEDOUT by a CAS that races with the waiter's own ARMING ->
 * QUEUED/WOKEN; a queued one is dequeued under the lock of the bucket it is on, which the
 * waiter set before it queued.
 */
static void gfutex_timeout(void *arg)
{
    struct gfwaiter *w = arg;
    struct g *gp = NULL;
    struct gfbucket *b;
    for (;;) {
        b = lockfollow(&w->b);
        int st = W_ARMING;
        if (__atomic_compare_exchange_n(&w->state, &st, W_TIMEDOUT, 0, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST))
            break;
        if (st != W_QUEUED)
            break; /* woken, timed out or interrupted already */
        if (__atomic_load_n(&w->b, __ATOMIC_SEQ_CST) != b) {
            runtime_unlock(&b->lock); /* queued elsewhere just now: follow */
            continue;
        }
        dequeue(b, w);
        w->state = W_TIMEDOUT;
        gp = w->gp;
        __atomic_store_n(&gp->gfbucket, NULL, __ATOMIC_RELEASE);
        break;
    }
    runtime_unlock(&b->lock);
    if (gp)
        goready(gp);
}

static long futex_wait_abs(uint32_t *addr, uint32_t val, int64_t deadline)
{
    struct timespec ts, *tsp = NULL;
    if (deadline >= 0) {
        ts.tv_sec = deadline / 1000000000;
        ts.tv_nsec = deadline % 1000000000;
        tsp = &ts;
    }
    /* WAIT_BITSET takes an absolute CLOCK_MONOTONIC timeout. */
    return rt_syscall6(SYS_futex, (long)addr, FUTEX_WAIT_BITSET_PRIVATE, val, (long)tsp, 0,
                       (long)FUTEX_BITSET_MATCH_ANY);
}

/* A waiter that is not a G: the kernel futex on addr. */
static int thread_wait(uint32_t *addr, uint32_t val, int64_t deadline)
{
    struct gfbucket *b = lockbucket(addr);
    uint32_t *nt = nthreads_of(addr);
    if (__atomic_load_n(addr, __ATOMIC_SEQ_CST) != val) {
        runtime_unlock(&b->lock);
        return EAGAIN;
    }
    if (deadline >= 0 && deadline <= nanotime()) {
        runtime_unlock(&b->lock);
        return ETIMEDOUT;
    }
    __atomic_fetch_add(nt, 1, __ATOMIC_SEQ_CST);
    runtime_unlock(&b->lock);
    long r = futex_wait_abs(addr, val, deadline);
    __atomic_fetch_sub(nt, 1, __ATOMIC_SEQ_CST);
    if (r == -ETIMEDOUT)
        return ETIMEDOUT;
    if (r == -EAGAIN)
        return EAGAIN;
    return 0; /* woken, or EINTR: a spurious wakeup */
}

/*
 * Lock w's bucket and decide, under that lock, whether w waits: 0 (it
 * does: QUEUED), EINTR, EAGAIN (*addr moved on) or ETIMEDOUT (its timer
 * came first). The bucket stays locked (*bp).
 *
 * The bucket is published, then locked, then interrupt is read:
 * gfutex_interrupt stores interrupt, then follows gfbucket, and the lock's
 * exchange is a full fence on x86-64, so one of the two sees the other's
 * store. An interrupter that finds the bucket locks it: before this wait
 * does (and then the read below sees its store) or once the waiter is
 * queued. A grown table means another bucket, published again. w->b
 * before leaving ARMING: see gfutex_timeout.
 */
static int wait_arm(struct gfwaiter *w, bool timed, uint32_t val, struct gfbucket **bp)
{
    struct g *gp = w->gp;
    struct gfbucket *b;
    for (;;) {
        struct gftable *t = LIVE_TABLE();
        b = &t->b[hashof(w->addr) & t->mask];
        __atomic_store_n(&w->b, b, __ATOMIC_RELEASE);
        __atomic_store_n(&gp->gfbucket, b, __ATOMIC_RELEASE);
        runtime_lock(&b->lock);
        if (__atomic_load_n(&table, __ATOMIC_ACQUIRE) == t)
            break;
        runtime_unlock(&b->lock);
    }
    *bp = b;
    int r = 0;
    if (__atomic_load_n(&gp->interrupt, __ATOMIC_SEQ_CST) &&
        __atomic_exchange_n(&gp->interrupt, 0, __ATOMIC_SEQ_CST))
        r = EINTR;
    else if (__atomic_load_n(w->addr, __ATOMIC_SEQ_CST) != val)
        r = EAGAIN;
    if (!timed) {
        w->state = r ? W_WOKEN : W_QUEUED; /* no timer to race with */
        return r;
    }
    int st = W_ARMING;
    if (!__atomic_compare_exchange_n(&w->state, &st, r ? W_WOKEN : W_QUEUED, 0, __ATOMIC_SEQ_CST,
                                     __ATOMIC_SEQ_CST))
        r = ETIMEDOUT; /* the timer came first */
    return r;
}

int gfutex_wait(uint32_t *addr, uint32_t val, int64_t deadline_ns)
{
    if (deadline_ns == INT64_MAX)
        deadline_ns = -1;
    struct g *gp = sched_self();
    /* Runtime code on a G (locks held: spawning, glibc's DTV in the program's calloc)
     * waiting for a program's lock parks as any G (blocking the thread would keep the P
     * the holder may need) and gets its count back where it resumes (docs/design.md). */
    int32_t held = gp != NULL ? __atomic_load_n(&getm()->locks, __ATOMIC_RELAXED) : 0;
    struct m *mp;
    for (;;) {
        if (gp != NULL && __atomic_load_n(&getm()->pless, __ATOMIC_SEQ_CST))
            exitsyscall(); /* its P was handed off while it stayed away: get one */
        /* Not a G (g0 among them), or a G without a P (a handler in a system call). */
        if (gp == NULL || __atomic_load_n(&getm()->p, __ATOMIC_RELAXED) == NULL)
            return thread_wait(addr, val, deadline_ns);
        if (__builtin_expect(gfutex_test_before_acquirem != NULL, 0))
            gfutex_test_before_acquirem();
        mp = acquirem(); /* dropped by gopark, or below */
        if (__atomic_load_n(&getm()->p, __ATOMIC_RELAXED) != NULL)
            break;
        /* Handed off since the look above, no P idle to take back: parking needs one (gopark
         * would wait for it holding the bucket lock, which the P's new G may be waiting for). */
        releasem(mp);
    }
    maybe_grow();
    struct gftable *t0 = LIVE_TABLE();
    /* Field by field: an initialiser's rep stos would zero the timer (set only if timed). */
    struct gfwaiter w;
    w.addr = addr;
    w.gp = gp;
    w.b = &t0->b[hashof(addr) & t0->mask];
    w.next = w.prev = w.qnext = w.qprev = NULL;
    w.ishead = 0;
    w.state = W_ARMING;
    bool timed = deadline_ns >= 0;
    if (timed && deadline_ns <= nanotime()) {
        releasem(mp);
        return __atomic_load_n(addr, __ATOMIC_SEQ_CST) != val ? EAGAIN : ETIMEDOUT;
    }
    if (timed) {
        w.t = (struct timer){.when = deadline_ns, .f = gfutex_timeout, .arg = &w};
        timer_add(&w.t);
    }
    struct gfbucket *b;
    int r = wait_arm(&w, timed, val, &b);
    if (r) {
        __atomic_store_n(&gp->gfbucket, NULL, __ATOMIC_RELEASE);
        runtime_unlock(&b->lock);
        if (timed)
            timer_del(&w.t);
        releasem(mp);
        return r;
    }
    gp->gfwaiter = &w;
    enqueue(b, &w, NULL);
    gopark(park_unlock, &b->lock, waitReasonFutex);
    if (held > 0)
        __atomic_store_n(&getm()->locks, held, __ATOMIC_RELEASE);
    /*
     * Readied by exactly one of wake, requeue, the timer or an interrupt,
     * which took w off its queue and cleared gp->gfbucket under the bucket's
     * lock: no interrupter can reach w any more (it follows gfbucket), and
     * gfwaiter is read only while gfqueued. A timer that fired meanwhile
     * may still look at w: timer_del waits for it.
     */
    gp->gfwaiter = NULL;
    if (timed) {
        mp = acquirem();
        timer_del(&w.t);
        releasem(mp);
    }
    return w.state == W_TIMEDOUT ? ETIMEDOUT : w.state == W_INTERRUPTED ? EINTR : 0;
}

int gfutex_wake(uint32_t *addr, int n)
{
    if (n <= 0)
        return 0;
    struct gfwaiter *chain = NULL, **tail = &chain;
    struct m *mp = acquirem();
    struct gfbucket *b = lockbucket(addr);
    int woken = popn(b, findqueue(b, addr), n, &tail);
    *tail = NULL;
    uint32_t nt = __atomic_load_n(nthreads_of(addr), __ATOMIC_SEQ_CST);
    runtime_unlock(&b->lock);
    ready_chain(chain);
    if (woken < n && nt > 0) {
        long r = futexwakeup(addr, n - woken);
        if (r > 0)
            woken += (int)r;
    }
    releasem(mp);
    return woken;
}

static int requeue(uint32_t *addr, uint32_t val, int nwake, uint32_t *addr2, int nrequeue);

int gfutex_requeue(uint32_t *addr, uint32_t val, int nwake, uint32_t *addr2, int nrequeue)
{
    struct m *mp = acquirem();
    int r = requeue(addr, val, nwake, addr2, nrequeue);
    releasem(mp);
    return r;
}

static int requeue(uint32_t *addr, uint32_t val, int nwake, uint32_t *addr2, int nrequeue)
{
    if (nwake < 0 || nrequeue < 0 || addr == addr2)
        return -EINVAL;
    struct gfbucket *b1, *b2, *first, *second;
    for (;;) {
        struct gftable *t = LIVE_TABLE();
        b1 = &t->b[hashof(addr) & t->mask];
        b2 = &t->b[hashof(addr2) & t->mask];
        first = b1 < b2 ? b1 : b2;
        second = b1 < b2 ? b2 : b1;
        runtime_lock(&first->lock);
        if (second != first)
            runtime_lock(&second->lock);
        if (__atomic_load_n(&table, __ATOMIC_ACQUIRE) == t)
            break;
        if (second != first)
            runtime_unlock(&second->lock);
        runtime_unlock(&first->lock); /* grown meanwhile */
    }
    if (__atomic_load_n(addr, __ATOMIC_SEQ_CST) != val) {
        if (second != first)
            runtime_unlock(&second->lock);
        runtime_unlock(&first->lock);
        return -EAGAIN;
    }
    struct gfwaiter *chain = NULL, **tail = &chain;
    struct gfwaiter *q = findqueue(b1, addr);
    int woken = popn(b1, q, nwake, &tail);
    *tail = NULL;
    int moved = 0;
    struct gfwaiter *q2 = NULL;
    for (q = findqueue(b1, addr); q && moved < nrequeue; moved++) {
        struct gfwaiter *w = q;
        q = w->next == w ? NULL : w->next;
        dequeue(b1, w);
        w->addr = addr2;
        __atomic_store_n(&w->b, b2, __ATOMIC_RELEASE);
        __atomic_store_n(&w->gp->gfbucket, b2, __ATOMIC_RELEASE);
        q2 = enqueue(b2, w, q2);
    }
    uint32_t nt = __atomic_load_n(nthreads_of(addr), __ATOMIC_SEQ_CST);
    if (second != first)
        runtime_unlock(&second->lock);
    runtime_unlock(&first->lock);
    ready_chain(chain);
    long rest = (long)(nwake - woken) + (long)(nrequeue - moved);
    if (nt > 0 && rest > 0) {
        long r = futexwakeup(addr, rest > INT_MAX ? INT_MAX : (int)rest);
        if (r > 0)
            moved += (int)r;
    }
    return woken + moved;
}

int gfutex_deadline(clockid_t clock, const struct timespec *abstime, int64_t *out)
{
    if (abstime->tv_nsec < 0 || abstime->tv_nsec >= 1000000000)
        return EINVAL;
    if (clock != CLOCK_MONOTONIC && clock != CLOCK_REALTIME)
        return EINVAL;
    if (abstime->tv_sec < 0) {
        *out = 0;
        return 0;
    }
    int64_t base = 0; /* monotonic = abstime - clock_now + mono_now */
    if (clock == CLOCK_REALTIME) {
        struct timespec now;
        libc_clock_gettime(CLOCK_REALTIME, &now); /* vDSO; cannot fail for this clock */
        int64_t mono = nanotime();
        int64_t rt = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
        base = mono - rt;
    }
    if (abstime->tv_sec >= (INT64_MAX - 999999999 - (base > 0 ? base : 0)) / 1000000000) {
        *out = INT64_MAX; /* beyond any reachable time: no deadline */
        return 0;
    }
    int64_t d = (int64_t)abstime->tv_sec * 1000000000 + abstime->tv_nsec + base;
    *out = d < 0 ? 0 : d;
    return 0;
}

int gfutex_nwaiters(uint32_t *addr)
{
    int n = 0;
    struct gfbucket *b = lockbucket(addr);
    struct gfwaiter *q = findqueue(b, addr), *w = q;
    if (q)
        do {
            n++;
            w = w->next;
        } while (w != q);
    n += (int)__atomic_load_n(nthreads_of(addr), __ATOMIC_SEQ_CST);
    runtime_unlock(&b->lock);
    return n;
}

/*
 * Wakes from signal handlers.
 *
 * A handler runs on whatever the thread was doing. If that thread is an M inside the runtime
 * (m_in_runtime: g0, or a G between acquirem and releasem) it may hold the very bucket lock
 * or sched.lock a wake needs, or be halfway through its P's run queue: a direct wake would
 * deadlock or corrupt. Then the address goes into a small lock-free table and a waker
 * thread, which holds nothing, does the wake. Wakes may be spurious, so a full table simply
 * makes the waker wake every G waiter once.
 */
enum { DEFER_SLOTS = 64 };
static uint32_t *defer_slot[DEFER_SLOTS];
static uint32_t defer_full;
static uint32_t defer_seq; /* futex word of the waker thread */

static void wake_every_g(void)
{
    runtime_lock(&grow.lock); /* the table stays as it is */
    struct gftable *t = __atomic_load_n(&table, __ATOMIC_ACQUIRE);
    for (uintptr_t i = 0; i <= t->mask; i++) {
        struct gfbucket *b = &t->b[i];
        struct gfwaiter *chain = NULL, **tail = &chain;
        runtime_lock(&b->lock);
        while (b->queues)
            popn(b, b->queues, INT_MAX, &tail);
        *tail = NULL;
        runtime_unlock(&b->lock);
        ready_chain(chain);
    }
    runtime_unlock(&grow.lock);
}

static void *waker(void *arg)
{
    (void)arg;
    for (;;) {
        uint32_t seq = __atomic_load_n(&defer_seq, __ATOMIC_ACQUIRE);
        for (int i = 0; i < DEFER_SLOTS; i++) {
            uint32_t *addr = __atomic_exchange_n(&defer_slot[i], NULL, __ATOMIC_ACQ_REL);
            if (addr)
                gfutex_wake(addr, INT_MAX);
        }
        if (__atomic_exchange_n(&defer_full, 0, __ATOMIC_ACQ_REL))
            wake_every_g();
        futexsleep(&defer_seq, seq, -1);
    }
    return NULL;
}

/* The waker, made with the first routed signal (a handler's sem_post) or a fork child's. */
static int waker_start(void)
{
    int err = sched_helper_thread(waker);
    if (err)
        rt_print(2, "goshim: cannot start the waker thread: sem_post in signal handlers may "
                    "deadlock\n");
    return err;
}

int gfutex_init(void)
{
    return sched_helper_for_signals(waker_start) ? 0 : waker_start();
}

int gfutex_wake_async(uint32_t *addr, int n)
{
    if (!m_in_runtime())
        return gfutex_wake(addr, n);
    int i;
    for (i = 0; i < DEFER_SLOTS; i++) {
        uint32_t *expect = NULL;
        if (__atomic_load_n(&defer_slot[i], __ATOMIC_RELAXED) == addr)
            break; /* already pending */
        if (__atomic_compare_exchange_n(&defer_slot[i], &expect, addr, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED))
            break;
    }
    if (i == DEFER_SLOTS)
        __atomic_store_n(&defer_full, 1, __ATOMIC_RELEASE);
    sched_helpers_want(); /* a fork child's waker, if not started yet */
    __atomic_add_fetch(&defer_seq, 1, __ATOMIC_RELEASE);
    futexwakeup(&defer_seq, 1);
    return 0;
}

/*
 * Interrupt gp's gfutex wait: if it is parked in one, dequeue it and make it return EINTR; if
 * it is about to wait, its wait returns EINTR at once. For cancellation (and later signals).
 * Callable from any thread; not from a signal handler.
 */
void gfutex_interrupt(struct g *gp)
{
    __atomic_store_n(&gp->interrupt, 1, __ATOMIC_SEQ_CST);
    struct m *mp = acquirem();
    struct gfbucket *b = lockfollow((struct gfbucket *const *)&gp->gfbucket);
    if (b) {
        struct gfwaiter *w = gp->gfqueued ? gp->gfwaiter : NULL;
        if (w && w->b == b) {
            dequeue(b, w);
            w->state = W_INTERRUPTED;
            __atomic_store_n(&gp->gfbucket, NULL, __ATOMIC_RELEASE);
            __atomic_store_n(&gp->interrupt, 0, __ATOMIC_SEQ_CST); /* consumed */
            runtime_unlock(&b->lock);
            goready(gp);
        } else {
            runtime_unlock(&b->lock);
        }
    }
    releasem(mp);
}

/* Fork child: the waiters and the waker were other threads' (gone): a new waker if any. */
void gfutex_fork_child(void)
{
    fork_zero(&table0.b, sizeof table0.b);
    FORK_SET(table, &table0.t); /* the parent's grown tables stay mapped, unused */
    FORK_SET(nqueues, 0);
    FORK_SET(grow.lock.key, 0);
    fork_zero(nthreads, sizeof nthreads);
    fork_zero(defer_slot, sizeof defer_slot);
    FORK_SET(defer_full, 0);
    FORK_SET(defer_seq, 0);
    if (!sched_signal_helpers_lazy() && !sched_helper_defer(waker_start))
        waker_start(); /* (lazy: made with the first routed signal, as in the parent) */
}

/* Test hooks (tests/test_gfutex.c): the live table's size, and addr's bucket in it. */
void (*gfutex_test_before_acquirem)(void);
unsigned long gfutex_test_buckets(void)
{
    return (unsigned long)__atomic_load_n(&table, __ATOMIC_ACQUIRE)->mask + 1;
}

unsigned long gfutex_test_bucket(uint32_t *addr)
{
    return (unsigned long)(hashof(addr) & __atomic_load_n(&table, __ATOMIC_ACQUIRE)->mask);
}
