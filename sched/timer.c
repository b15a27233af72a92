/*
 * Timers (contract in timer.h), after Go's time.go.
 *
 * One binary min-heap per P, ordered by when, each under its own lock, and
 * one more for timers added off any P (by a thread that is not a G). A G
 * adds its timers (sleeps, timed waits) to its P's heap, so Gs sleeping on
 * different Ps never share a lock. Go runs a P's timers on that P and lets
 * idle Ps steal them; here any M whose scheduler finds the earliest timer
 * due runs every due heap (findrunnable, schedule.c): a P that runs one
 * long G never delays timers that another M can run. A timer remembers its
 * heap, so timer_del from any thread finds it.
 *
 * Who wakes up for them: an idle M sleeps at most until the earliest timer
 * of all heaps; one M at a time does so (stopm in machines.c). timer_add
 * that makes a new earliest deadline of its heap calls timer_wakeup
 * (machines.c), which shortens that M's sleep or wakes an idle one. An
 * idle process with no timers sleeps forever.
 *
 * timers_run pops a timer under its heap's lock, marks it running, and
 * calls f with the lock dropped (f may take bucket locks and sched.lock);
 * then it clears running and never touches the timer again. timer_del
 * waits while running is set (Linux's del_timer_sync), so the owner may
 * free a timer, or return from the frame that holds it, as soon as
 * timer_del returns.
 *
 * A heap's array grows with malloc outside its lock. Each heap's next
 * mirrors its top so that schedule and stopm read the earliest deadline
 * without locks.
 *
 * Lock order: a heap lock is a leaf: nothing else is taken under it.
 */
#include <stdlib.h>
#include <string.h>

#include "libc.h"
#include "sched.h"
#include "throw.h"
#include "timer.h"

struct theap {
    struct runtime_lock lock;
    struct timer **heap; /* lock */
    uint32_t len, cap;   /* lock */
    int64_t next;        /* heap[0]->when + 1, or 0; written under lock, read atomically */
} __attribute__((aligned(64)));

/*
 * Zero when empty (next 0, not a when of -1): the heaps are in .bss, where only the pages
 * of the Ps that exist are ever touched. As initialised data, 64 KiB mapped from the file,
 * the kernel's fault-around made all 16 pages resident at the first read, and every fork
 * copied their page-table entries.
 */
static struct theap pheaps[MAX_PROCS] GOSHIM_LARGE; /* by P id */
static struct theap offp;                           /* timers added off any P */

/* The heap's earliest deadline, or -1. */
static int64_t heap_when(struct theap *h)
{
    return __atomic_load_n(&h->next, __ATOMIC_SEQ_CST) - 1;
}

/* Every heap in use: the off-P one, then one per P. */
static struct theap *heap_at(int32_t i)
{
    return i == 0 ? &offp : &pheaps[i - 1];
}

static int32_t nheaps(void)
{
    return 1 + (sched.gomaxprocs > 0 ? sched.gomaxprocs : 0);
}

static void heap_set(struct theap *h, uint32_t i, struct timer *t)
{
    h->heap[i] = t;
    t->hidx = i + 1;
}

static void siftup(struct theap *h, uint32_t i)
{
    struct timer *t = h->heap[i];
    while (i > 0) {
        uint32_t parent = (i - 1) / 2;
        if (h->heap[parent]->when <= t->when)
            break;
        heap_set(h, i, h->heap[parent]);
        i = parent;
    }
    heap_set(h, i, t);
}

static void siftdown(struct theap *h, uint32_t i)
{
    struct timer *t = h->heap[i];
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= h->len)
            break;
        if (c + 1 < h->len && h->heap[c + 1]->when < h->heap[c]->when)
            c++;
        if (t->when <= h->heap[c]->when)
            break;
        heap_set(h, i, h->heap[c]);
        i = c;
    }
    heap_set(h, i, t);
}

/* Remove h->heap[i]. h->lock must be held. */
static void heap_remove(struct theap *h, uint32_t i)
{
    struct timer *t = h->heap[i];
    uint32_t last = --h->len;
    t->hidx = 0;
    if (i != last) {
        heap_set(h, i, h->heap[last]);
        siftdown(h, i);
        siftup(h, i);
    }
}

static void update_next(struct theap *h)
{
    int64_t w = 0; /* a when is never negative (timer_add) */
    if (h->len)
        w = h->heap[0]->when < INT64_MAX ? h->heap[0]->when + 1 : INT64_MAX;
    __atomic_store_n(&h->next, w, __ATOMIC_SEQ_CST);
}

int64_t timers_next(void)
{
    int64_t next = -1;
    for (int32_t i = 0, n = nheaps(); i < n; i++) {
        int64_t w = heap_when(heap_at(i));
        if (w >= 0 && (next < 0 || w < next))
            next = w;
    }
    return next;
}

/* The calling G's P's heap, or the off-P heap. */
static struct theap *my_heap(struct m **held)
{
    *held = acquirem(); /* stay on this P while adding */
    struct p *pp = *held ? getm()->p : NULL;
    return pp ? &pheaps[pp->id] : &offp;
}

void timer_add(struct timer *t)
{
    if (t->f == NULL)
        goshim_throw("timer_add: nil function");
    if (t->when < 0)
        t->when = 0;
    struct m *held;
    struct theap *h = my_heap(&held);
    struct timer **spare = NULL; /* freed outside the lock */
    runtime_lock(&h->lock);
    if (t->hidx != 0) {
        runtime_unlock(&h->lock);
        goshim_throw("timer_add: timer already pending");
    }
    while (h->len == h->cap) {
        uint32_t cap = h->cap;
        runtime_unlock(&h->lock);
        rt_free(spare);
        uint32_t ncap = cap ? 2 * cap : 64;
        struct timer **a = rt_malloc(ncap * sizeof *a);
        if (a == NULL)
            goshim_throw("timer_add: out of memory");
        runtime_lock(&h->lock);
        if (h->cap == cap) {
            if (h->len)
                memcpy(a, h->heap, h->len * sizeof *a);
            spare = h->heap;
            h->heap = a;
            h->cap = ncap;
        } else {
            spare = a; /* someone else grew it meanwhile */
        }
    }
    __atomic_store_n(&t->heap, h, __ATOMIC_RELEASE);
    h->heap[h->len++] = t;
    siftup(h, h->len - 1);
    bool first = t->hidx == 1;
    int64_t when = t->when;
    update_next(h);
    runtime_unlock(&h->lock);
    releasem(held);
    rt_free(spare);
    if (first) {
        timer_wakeup(when);
        sysmon_kick(when);
    }
}

bool timer_del(struct timer *t)
{
    struct theap *h = __atomic_load_n(&t->heap, __ATOMIC_ACQUIRE);
    bool removed = false;
    if (h) {
        runtime_lock(&h->lock);
        removed = t->hidx != 0;
        if (removed) {
            heap_remove(h, t->hidx - 1);
            update_next(h);
        }
        runtime_unlock(&h->lock);
    }
    /* f may be running on another M: wait until it let go of t. */
    for (int i = 0; __atomic_load_n(&t->running, __ATOMIC_ACQUIRE); i++) {
        if (i < 100)
            procyield(20);
        else
            osyield();
    }
    return removed;
}

/* Run h's due timers. */
static void heap_run(struct theap *h, int64_t now)
{
    runtime_lock(&h->lock);
    while (h->len > 0 && h->heap[0]->when <= now) {
        struct timer *t = h->heap[0];
        heap_remove(h, 0);
        update_next(h);
        __atomic_store_n(&t->running, 1, __ATOMIC_RELAXED); /* published by the unlock */
        void (*f)(void *) = t->f;
        void *arg = t->arg;
        runtime_unlock(&h->lock);
        f(arg);
        /* Release: f's effects happen before timer_del returns. Not a
         * single access to t after this store: its owner may free it. */
        __atomic_store_n(&t->running, 0, __ATOMIC_RELEASE);
        runtime_lock(&h->lock);
    }
    runtime_unlock(&h->lock);
}

int64_t timers_run(int64_t now)
{
    for (int32_t i = 0, n = nheaps(); i < n; i++) {
        struct theap *h = heap_at(i);
        int64_t w = heap_when(h);
        if (w >= 0 && w <= now)
            heap_run(h, now);
    }
    return timers_next();
}

/* Fork child: every timer belonged to a wait of a thread that is gone. */
void timers_fork_child(void)
{
    /* Only the Ps that exist: the rest were never used, and even a read of a page costs a
     * fork child (here, a PVM guest: a shadow page-table entry made on first touch). */
    for (int32_t i = 0; i < sched.gomaxprocs; i++) {
        struct theap *h = &pheaps[i];
        if (h->lock.key == 0 && h->len == 0 && h->next == 0)
            continue; /* as it should be: a read, where a write would copy the page */
        h->lock.key = 0;
        h->len = 0;
        h->next = 0;
    }
    FORK_SET(offp.lock.key, 0);
    FORK_SET(offp.len, 0);
    FORK_SET(offp.next, 0);
}
