/*
 * Timers (contract in timer.h), after Go's time.go.
 *
 * For now there is ONE global binary min-heap of struct timer pointers,
 * ordered by when, under timers.lock. Go keeps a heap per P (no global
 * lock, timers run by the P that owns them, stolen by idle Ps); that is the
 * next step once timers are hot (sleep, timed waits of many Gs). The
 * interface does not change: only timer.c and the findrunnable/stopm hooks.
 *
 * Who runs timers: findrunnable, first thing, when the earliest timer is
 * due (schedule.c). Who wakes up for them: an idle M sleeps at most until
 * the earliest timer; one M at a time does so (stopm in machines.c keeps
 * it in a static). timer_add that makes a new earliest deadline calls
 * timer_wakeup (machines.c), which shortens that M's sleep or, if no M
 * sleeps with a timeout, wakes an idle one. An idle process with no timers
 * sleeps forever.
 *
 * timers_run pops a timer under the lock, marks it running, and calls f
 * with the lock dropped (f may take bucket locks and sched.lock); then it
 * clears running and never touches the timer again. timer_del waits while
 * running is set (Linux's del_timer_sync), so the owner may free a timer,
 * or return from the frame that holds it, as soon as timer_del returns.
 *
 * The heap array grows with malloc outside the lock. timers.when0 mirrors
 * the heap top so that schedule and stopm read it without the lock.
 *
 * Lock order: timers.lock is a leaf: nothing else is taken under it.
 */
#include <stdlib.h>
#include <string.h>

#include "sched.h"
#include "throw.h"
#include "timer.h"

static struct {
    struct runtime_lock lock;
    struct timer **heap; /* lock */
    uint32_t len, cap;   /* lock */
    int64_t when0;       /* heap[0]->when or -1; written under lock, read atomically */
} timers = {.when0 = -1};

static void heap_set(uint32_t i, struct timer *t)
{
    timers.heap[i] = t;
    t->hidx = i + 1;
}

static void siftup(uint32_t i)
{
    struct timer *t = timers.heap[i];
    while (i > 0) {
        uint32_t parent = (i - 1) / 2;
        if (timers.heap[parent]->when <= t->when)
            break;
        heap_set(i, timers.heap[parent]);
        i = parent;
    }
    heap_set(i, t);
}

static void siftdown(uint32_t i)
{
    struct timer *t = timers.heap[i];
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= timers.len)
            break;
        if (c + 1 < timers.len && timers.heap[c + 1]->when < timers.heap[c]->when)
            c++;
        if (t->when <= timers.heap[c]->when)
            break;
        heap_set(i, timers.heap[c]);
        i = c;
    }
    heap_set(i, t);
}

/* Remove heap[i]. timers.lock must be held. */
static void heap_remove(uint32_t i)
{
    struct timer *t = timers.heap[i];
    uint32_t last = --timers.len;
    t->hidx = 0;
    if (i != last) {
        heap_set(i, timers.heap[last]);
        siftdown(i);
        siftup(i);
    }
}

static void update_when0(void)
{
    int64_t w = timers.len ? timers.heap[0]->when : -1;
    __atomic_store_n(&timers.when0, w, __ATOMIC_SEQ_CST);
}

int64_t timers_next(void)
{
    return __atomic_load_n(&timers.when0, __ATOMIC_SEQ_CST);
}

void timer_add(struct timer *t)
{
    if (t->f == NULL)
        goshim_throw("timer_add: nil function");
    if (t->when < 0)
        t->when = 0;
    struct timer **spare = NULL; /* freed outside the lock */
    runtime_lock(&timers.lock);
    if (t->hidx != 0) {
        runtime_unlock(&timers.lock);
        goshim_throw("timer_add: timer already pending");
    }
    while (timers.len == timers.cap) {
        uint32_t cap = timers.cap;
        runtime_unlock(&timers.lock);
        free(spare);
        uint32_t ncap = cap ? 2 * cap : 64;
        struct timer **h = malloc(ncap * sizeof *h);
        if (h == NULL)
            goshim_throw("timer_add: out of memory");
        runtime_lock(&timers.lock);
        if (timers.cap == cap) {
            if (timers.len)
                memcpy(h, timers.heap, timers.len * sizeof *h);
            spare = timers.heap;
            timers.heap = h;
            timers.cap = ncap;
        } else {
            spare = h; /* someone else grew it meanwhile */
        }
    }
    timers.heap[timers.len++] = t;
    siftup(timers.len - 1);
    bool first = t->hidx == 1;
    int64_t when = t->when;
    update_when0();
    runtime_unlock(&timers.lock);
    free(spare);
    if (first)
        timer_wakeup(when);
}

bool timer_del(struct timer *t)
{
    runtime_lock(&timers.lock);
    bool removed = t->hidx != 0;
    if (removed) {
        heap_remove(t->hidx - 1);
        update_when0();
    }
    runtime_unlock(&timers.lock);
    /* f may be running on another M: wait until it let go of t. */
    for (int i = 0; __atomic_load_n(&t->running, __ATOMIC_ACQUIRE); i++) {
        if (i < 100)
            procyield(20);
        else
            osyield();
    }
    return removed;
}

int64_t timers_run(int64_t now)
{
    runtime_lock(&timers.lock);
    while (timers.len > 0 && timers.heap[0]->when <= now) {
        struct timer *t = timers.heap[0];
        heap_remove(0);
        update_when0();
        __atomic_store_n(&t->running, 1, __ATOMIC_RELAXED); /* published by the unlock */
        void (*f)(void *) = t->f;
        void *arg = t->arg;
        runtime_unlock(&timers.lock);
        f(arg);
        /* Release: f's effects happen before timer_del returns. Not a
         * single access to t after this store: its owner may free it. */
        __atomic_store_n(&t->running, 0, __ATOMIC_RELEASE);
        runtime_lock(&timers.lock);
    }
    int64_t next = timers.len ? timers.heap[0]->when : -1;
    runtime_unlock(&timers.lock);
    return next;
}
