/*
 * Runtime locks and notes, after Go's lock_futex.go.
 *
 * runtime_lock is a mutex for scheduler data (sched.lock, caches). It spins
 * briefly, then sleeps on a private futex. It never parks a G: the holder
 * must not block, switch or take a lock that ranks before it. Both calls are
 * TLS-free and errno-free, so they may run on g0 while the FS base still
 * belongs to a G.
 *
 * A note is a one-shot event: notesleep blocks the OS thread until
 * notewakeup; noteclear re-arms it. Exactly one thread sleeps on a note.
 */
#ifndef GOSHIM_LOCK_H
#define GOSHIM_LOCK_H

#include <stdint.h>
#include <time.h>

struct runtime_lock {
    uint32_t key; /* 0 unlocked, 1 locked, 2 locked with sleepers */
};

struct note {
    uint32_t key; /* 0 clear, 1 woken */
};

void runtime_lock(struct runtime_lock *l);
void runtime_unlock(struct runtime_lock *l);
int runtime_trylock(struct runtime_lock *l);

void noteclear(struct note *n);
void notewakeup(struct note *n);
void notesleep(struct note *n);
/* notetsleep waits at most ns nanoseconds (ns < 0: forever); returns 1 if woken. */
int notetsleep(struct note *n, int64_t ns);

/* Raw futex calls (private), returning -errno. */
long futexsleep(uint32_t *addr, uint32_t val, int64_t ns);
long futexwakeup(uint32_t *addr, int cnt);

/* Monotonic time in nanoseconds (vDSO clock_gettime; never sets errno). */
int64_t nanotime(void);
/* Sleep the OS thread for usec microseconds (raw nanosleep). */
void osusleep(uint32_t usec);
/* One pause instruction times cycles. */
void procyield(uint32_t cycles);
/* sched_yield(2) of the OS thread, raw. */
void osyield(void);

/* A variable a fork child writes at once (its atfork handlers): all such share one
 * section, which the child copies as one page, not one page each. */
#define FORK_WRITTEN __attribute__((section("goshim_fork_written"), aligned(64)))
/* Code a fork child runs before it first needs the runtime (the atfork child handlers,
 * what they call), together: the child maps each text page it runs on first touch, a fault
 * each (10-130 us on a PVM guest). The linker keeps a .text.sorted.* section of every
 * object together (ld's default script sorts them by name); any other name stays with its
 * object's code, and link-time optimisation makes several objects. */
#define FORK_TEXT __attribute__((section(".text.sorted.goshim_fork.1")))

/* In a fork child's reset, set lv to v only if it differs: a fork child's first write to a
 * page copies it (sched.h), and most of what it resets (a lock the parent's other threads
 * did not hold) is right already. */
#define FORK_SET(lv, v)                                                                            \
    do {                                                                                           \
        if ((lv) != (v))                                                                           \
            (lv) = (v);                                                                            \
    } while (0)

#endif
