/*
 * G-aware futex (contract in gfutex.h), after Go's sema.go semtable.
 *
 * A fixed table of GFUTEX_BUCKETS buckets, chosen by hashing the address;
 * each bucket is a runtime_lock, a FIFO doubly linked list of G waiters
 * and a count of thread waiters. A G waiter is a struct gfwaiter on the
 * waiting G's stack (it lives until gfutex_wait returns): wait locks the
 * bucket, checks *addr == val, enqueues, and gopark()s with the bucket
 * lock as unlockf, so the check and the enqueue are atomic with respect to
 * wake, which takes the same lock to dequeue. The waker readies the Gs
 * after dropping the lock.
 *
 * Timeouts: a struct timer inside the waiter, armed before the bucket is
 * locked (timer_add may start an M: not under a bucket lock). Its function
 * takes the bucket lock and decides under it, like wake: exactly one of
 * {wake, requeue-wake, timeout} moves the waiter out of QUEUED and readies
 * the G, so a G is never readied twice. The waiter, once running again,
 * calls timer_del, which also waits for a timer function still running
 * with a pointer to the waiter, before the frame goes away. A timeout that
 * fires before the waiter is queued (ARMING) just marks it TIMEDOUT; wait
 * then returns ETIMEDOUT without parking.
 *
 * Requeue moves G waiters between buckets holding both locks (in address
 * order) and updates w->b; the timer function locks w->b and re-checks it,
 * so it always ends up holding the bucket the waiter is on.
 *
 * Thread waiters (callers that are not Gs) are counted in the bucket under
 * its lock, after the same value check, and sleep in the kernel futex on
 * addr itself. wake handles G waiters first and issues FUTEX_WAKE for the
 * rest only if the bucket counts thread waiters: no system call when only
 * Gs wait. Requeue wakes thread waiters instead of moving them (the kernel
 * could move them, but then our per-bucket count would be wrong).
 *
 * Lock order: a bucket lock, then timers.lock or sched.lock (through
 * goready/timer_add never: those run after the bucket is unlocked). Two
 * buckets are locked in address order.
 *
 * The G paths use no TLS but the current-G lookup, and no errno (raw
 * syscalls return -errno).
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>

#include "gfutex.h"
#include "sched.h"
#include <string.h>

#include "throw.h"
#include "timer.h"

enum { GFUTEX_BUCKETS = 251 };

enum wstate {
    W_ARMING,      /* timer armed, not queued yet */
    W_QUEUED,      /* on b's list */
    W_WOKEN,       /* dequeued by wake/requeue (or the value check failed) */
    W_TIMEDOUT,    /* dequeued, or never queued, by the timer */
    W_INTERRUPTED, /* dequeued by gfutex_interrupt */
};

struct gfbucket;

struct gfwaiter {
    uint32_t *addr;        /* b->lock */
    struct g *gp;          /* the waiting G */
    struct gfbucket *b;    /* bucket it is on; changed under both locks (requeue) */
    struct gfwaiter *next; /* b->lock */
    struct gfwaiter *prev; /* b->lock */
    int state;             /* enum wstate; b->lock */
    struct timer t;        /* timeout, when timed */
};

struct gfbucket {
    struct runtime_lock lock;
    uint32_t nthreads; /* thread waiters: incremented under lock, decremented atomically */
    struct gfwaiter *head, *tail; /* lock */
} __attribute__((aligned(64)));

static struct gfbucket table[GFUTEX_BUCKETS];

static struct gfbucket *bucketof(uint32_t *addr)
{
    return &table[((uintptr_t)addr >> 2) % GFUTEX_BUCKETS];
}

static void enqueue(struct gfbucket *b, struct gfwaiter *w)
{
    w->gp->gfqueued = 1;
    w->next = NULL;
    w->prev = b->tail;
    if (b->tail)
        b->tail->next = w;
    else
        b->head = w;
    b->tail = w;
}

static void dequeue(struct gfbucket *b, struct gfwaiter *w)
{
    w->gp->gfqueued = 0;
    if (w->prev)
        w->prev->next = w->next;
    else
        b->head = w->next;
    if (w->next)
        w->next->prev = w->prev;
    else
        b->tail = w->prev;
    w->next = w->prev = NULL;
}

/* Ready a chain of woken waiters (linked through next, already off every
 * list). Read everything before goready: then the G may run and its frame,
 * which holds w, may be gone. */
static void ready_chain(struct gfwaiter *w)
{
    while (w) {
        struct gfwaiter *next = w->next;
        struct g *gp = w->gp;
        goready(gp);
        w = next;
    }
}

/* Timer function: time out the waiter if it is still waiting. */
static void gfutex_timeout(void *arg)
{
    struct gfwaiter *w = arg;
    struct gfbucket *b;
    for (;;) {
        b = __atomic_load_n(&w->b, __ATOMIC_ACQUIRE);
        runtime_lock(&b->lock);
        if (__atomic_load_n(&w->b, __ATOMIC_RELAXED) == b)
            break;
        runtime_unlock(&b->lock); /* requeued meanwhile: follow it */
    }
    struct g *gp = NULL;
    if (w->state == W_QUEUED) {
        dequeue(b, w);
        w->state = W_TIMEDOUT;
        gp = w->gp;
    } else if (w->state == W_ARMING) {
        w->state = W_TIMEDOUT;
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
    struct gfbucket *b = bucketof(addr);
    runtime_lock(&b->lock);
    if (__atomic_load_n(addr, __ATOMIC_SEQ_CST) != val) {
        runtime_unlock(&b->lock);
        return EAGAIN;
    }
    if (deadline >= 0 && deadline <= nanotime()) {
        runtime_unlock(&b->lock);
        return ETIMEDOUT;
    }
    __atomic_fetch_add(&b->nthreads, 1, __ATOMIC_SEQ_CST);
    runtime_unlock(&b->lock);
    long r = futex_wait_abs(addr, val, deadline);
    __atomic_fetch_sub(&b->nthreads, 1, __ATOMIC_SEQ_CST);
    if (r == -ETIMEDOUT)
        return ETIMEDOUT;
    if (r == -EAGAIN)
        return EAGAIN;
    return 0; /* woken, or EINTR: a spurious wakeup */
}

int gfutex_wait(uint32_t *addr, uint32_t val, int64_t deadline_ns)
{
    if (deadline_ns == INT64_MAX)
        deadline_ns = -1;
    struct g *gp = sched_self();
    if (gp != NULL && __atomic_load_n(&getm()->pless, __ATOMIC_SEQ_CST))
        exitsyscall(); /* its P was handed off while it stayed away: get one */
    /* Not a G, or a G without a P: a signal handler that runs while its G
     * is in a system call (entersyscall let go of the P). Block the thread. */
    if (gp == NULL || getm()->p == NULL)
        return thread_wait(addr, val, deadline_ns);

    struct gfbucket *b = bucketof(addr);
    struct gfwaiter w = {.addr = addr, .gp = gp, .b = b, .state = W_ARMING};
    bool timed = deadline_ns >= 0;
    if (timed && deadline_ns <= nanotime())
        return __atomic_load_n(addr, __ATOMIC_SEQ_CST) != val ? EAGAIN : ETIMEDOUT;
    struct m *mp = acquirem(); /* dropped by gopark, or below */
    if (timed) {
        w.t = (struct timer){.when = deadline_ns, .f = gfutex_timeout, .arg = &w};
        timer_add(&w.t);
    }
    /* Publish the bucket before reading interrupt: gfutex_interrupt stores
     * interrupt, then reads the bucket; one of the two sees the other. */
    __atomic_store_n(&gp->gfbucket, b, __ATOMIC_SEQ_CST);
    runtime_lock(&b->lock);
    bool intr = __atomic_exchange_n(&gp->interrupt, 0, __ATOMIC_SEQ_CST);
    if (w.state == W_TIMEDOUT || intr || __atomic_load_n(addr, __ATOMIC_SEQ_CST) != val) {
        int r = w.state == W_TIMEDOUT ? ETIMEDOUT : intr ? EINTR : EAGAIN;
        w.state = W_WOKEN; /* the timer function, if it runs now, leaves w alone */
        __atomic_store_n(&gp->gfbucket, NULL, __ATOMIC_RELEASE);
        runtime_unlock(&b->lock);
        if (timed)
            timer_del(&w.t);
        releasem(mp);
        return r;
    }
    w.state = W_QUEUED;
    gp->gfwaiter = &w;
    enqueue(b, &w);
    gopark(park_unlock, &b->lock, waitReasonFutex);
    /* Readied by exactly one of wake, requeue, the timer or an interrupt. */
    mp = acquirem();
    struct gfbucket *wb = __atomic_load_n(&w.b, __ATOMIC_ACQUIRE);
    runtime_lock(&wb->lock); /* an interrupter may be looking at gp's fields */
    gp->gfwaiter = NULL;
    __atomic_store_n(&gp->gfbucket, NULL, __ATOMIC_RELEASE);
    runtime_unlock(&wb->lock);
    if (timed)
        timer_del(&w.t);
    releasem(mp);
    return w.state == W_TIMEDOUT ? ETIMEDOUT : w.state == W_INTERRUPTED ? EINTR : 0;
}

int gfutex_wake(uint32_t *addr, int n)
{
    if (n <= 0)
        return 0;
    struct gfbucket *b = bucketof(addr);
    struct gfwaiter *chain = NULL, **tail = &chain;
    int woken = 0;
    struct m *mp = acquirem();
    runtime_lock(&b->lock);
    for (struct gfwaiter *w = b->head, *next; w && woken < n; w = next) {
        next = w->next;
        if (w->addr != addr)
            continue;
        dequeue(b, w);
        w->state = W_WOKEN;
        *tail = w;
        tail = &w->next;
        woken++;
    }
    uint32_t nthreads = __atomic_load_n(&b->nthreads, __ATOMIC_SEQ_CST);
    runtime_unlock(&b->lock);
    ready_chain(chain);
    if (woken < n && nthreads > 0) {
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
    struct gfbucket *b1 = bucketof(addr), *b2 = bucketof(addr2);
    struct gfbucket *first = b1 < b2 ? b1 : b2, *second = b1 < b2 ? b2 : b1;
    runtime_lock(&first->lock);
    if (second != first)
        runtime_lock(&second->lock);
    if (__atomic_load_n(addr, __ATOMIC_SEQ_CST) != val) {
        if (second != first)
            runtime_unlock(&second->lock);
        runtime_unlock(&first->lock);
        return -EAGAIN;
    }
    struct gfwaiter *chain = NULL, **tail = &chain;
    int woken = 0, moved = 0;
    /* Waiters moved within one bucket go to its tail with addr2 != addr:
     * the walk skips them. */
    for (struct gfwaiter *w = b1->head, *next; w && (woken < nwake || moved < nrequeue); w = next) {
        next = w->next;
        if (w->addr != addr)
            continue;
        dequeue(b1, w);
        if (woken < nwake) {
            w->state = W_WOKEN;
            *tail = w;
            tail = &w->next;
            woken++;
        } else {
            w->addr = addr2;
            __atomic_store_n(&w->b, b2, __ATOMIC_RELEASE);
            __atomic_store_n(&w->gp->gfbucket, b2, __ATOMIC_RELEASE);
            enqueue(b2, w);
            moved++;
        }
    }
    uint32_t nthreads = __atomic_load_n(&b1->nthreads, __ATOMIC_SEQ_CST);
    if (second != first)
        runtime_unlock(&second->lock);
    runtime_unlock(&first->lock);
    ready_chain(chain);
    long rest = (long)(nwake - woken) + (long)(nrequeue - moved);
    if (nthreads > 0 && rest > 0) {
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
        clock_gettime(CLOCK_REALTIME, &now); /* vDSO; cannot fail for this clock */
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
    struct gfbucket *b = bucketof(addr);
    int n = 0;
    runtime_lock(&b->lock);
    for (struct gfwaiter *w = b->head; w; w = w->next)
        if (w->addr == addr)
            n++;
    n += (int)__atomic_load_n(&b->nthreads, __ATOMIC_SEQ_CST);
    runtime_unlock(&b->lock);
    return n;
}

/*
 * Wakes from signal handlers.
 *
 * A handler runs on whatever the thread was doing. If that thread is an M
 * inside the runtime (m_in_runtime: g0, or a G between acquirem and
 * releasem) it may hold the very bucket lock or sched.lock a wake needs, or
 * be halfway through its P's run queue: a direct wake would deadlock or
 * corrupt. Then the address goes into a small lock-free table and a waker
 * thread, which holds nothing, does the wake. Wakes may be spurious, so a
 * full table simply makes the waker wake every G waiter once.
 */
enum { DEFER_SLOTS = 64 };
static uint32_t *defer_slot[DEFER_SLOTS];
static uint32_t defer_full;
static uint32_t defer_seq; /* futex word of the waker thread */

static void wake_every_g(void)
{
    for (int i = 0; i < GFUTEX_BUCKETS; i++) {
        struct gfbucket *b = &table[i];
        struct gfwaiter *chain = NULL, **tail = &chain;
        runtime_lock(&b->lock);
        for (struct gfwaiter *w = b->head, *next; w; w = next) {
            next = w->next;
            dequeue(b, w);
            w->state = W_WOKEN;
            *tail = w;
            tail = &w->next;
        }
        runtime_unlock(&b->lock);
        ready_chain(chain);
    }
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

int gfutex_init(void)
{
    return sched_helper_thread(waker);
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
    __atomic_add_fetch(&defer_seq, 1, __ATOMIC_RELEASE);
    futexwakeup(&defer_seq, 1);
    return 0;
}

/*
 * Interrupt gp's gfutex wait: if it is parked in one, dequeue it and make
 * it return EINTR; if it is about to wait, its wait returns EINTR at once.
 * For cancellation (and later signals). Callable from any thread; not from
 * a signal handler.
 */
void gfutex_interrupt(struct g *gp)
{
    __atomic_store_n(&gp->interrupt, 1, __ATOMIC_SEQ_CST);
    struct m *mp = acquirem();
    for (;;) {
        struct gfbucket *b = __atomic_load_n(&gp->gfbucket, __ATOMIC_SEQ_CST);
        if (!b)
            break;
        runtime_lock(&b->lock);
        if (__atomic_load_n(&gp->gfbucket, __ATOMIC_ACQUIRE) != b) {
            runtime_unlock(&b->lock); /* requeued meanwhile: look again */
            continue;
        }
        struct gfwaiter *w = gp->gfqueued ? gp->gfwaiter : NULL;
        if (w && w->b == b) {
            dequeue(b, w);
            w->state = W_INTERRUPTED;
            __atomic_store_n(&gp->interrupt, 0, __ATOMIC_SEQ_CST); /* consumed */
            runtime_unlock(&b->lock);
            goready(gp);
        } else {
            runtime_unlock(&b->lock);
        }
        break;
    }
    releasem(mp);
}

/* Fork child: the waiters were other threads' (gone); the waker thread too. */
void gfutex_fork_child(void)
{
    memset(table, 0, sizeof table);
    memset(defer_slot, 0, sizeof defer_slot);
    defer_full = 0;
    defer_seq = 0;
    if (gfutex_init() != 0)
        rt_print(2, "goshim: forked child: cannot start the waker thread: sem_post in signal "
                    "handlers may deadlock\n");
}
