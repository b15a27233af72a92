/*
 * Timers: run a function at an absolute CLOCK_MONOTONIC time (nanotime()).
 *
 * A timer is owned by its caller (it may live on a G's stack) and is
 * initialised with a designated initialiser so that the private fields are
 * zero: struct timer t = {.when = d, .f = fire, .arg = x};
 *
 * f runs on an M's scheduler context (g0) that holds a P, or on a G. It may
 * call goready (the G goes to the current P) or gfutex_wake; it must not
 * block, park, nor timer_del its own timer (timer_del waits for f).
 */
#ifndef GOSHIM_TIMER_H
#define GOSHIM_TIMER_H

#include <stdbool.h>
#include <stdint.h>

struct theap;

struct timer {
    int64_t when; /* absolute CLOCK_MONOTONIC ns */
    void (*f)(void *arg);
    void *arg;
    /* private to timer.c */
    uint32_t hidx;      /* heap index + 1 while pending, 0 otherwise; heap lock */
    struct theap *heap; /* the heap it was last added to */
    uint32_t running;   /* f is being called; atomic */
};

/* Arm t (it must not be pending). May wake an idle M so that an idle
 * process still wakes up at t->when. */
void timer_add(struct timer *t);
/* Disarm t. Returns true if t was pending (f will not run for this
 * arming). Either way, when it returns f is not running: t and arg may be
 * freed. */
bool timer_del(struct timer *t);
/* Run every timer whose when <= now, each f outside its heap's lock, in
 * deadline order per heap. Returns the earliest remaining when, or -1. */
int64_t timers_run(int64_t now);
/* The earliest pending when, or -1 if none. Lock-free; a hint. */
int64_t timers_next(void);

#endif
