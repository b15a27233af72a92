/*
 * Futex-based runtime locks and notes (contract in lock.h).
 *
 * The lock is the classic three-state futex mutex (0 free, 1 held,
 * 2 held and contended): an uncontended lock/unlock pair is two atomic
 * instructions and no system call. Spinning is bounded, as in Go's
 * lock_futex.go: a few rounds of PAUSE, one sched_yield, then sleep.
 */
#include "libc.h"
#include "lock.h"
#include "sched.h"

#include "throw.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>

enum { ACTIVE_SPIN = 4, ACTIVE_SPIN_CNT = 30, PASSIVE_SPIN = 1 };

long futexsleep(uint32_t *addr, uint32_t val, int64_t ns)
{
    struct timespec ts, *tsp = 0;
    if (ns >= 0) {
        ts.tv_sec = ns / 1000000000;
        ts.tv_nsec = ns % 1000000000;
        tsp = &ts;
    }
    return rt_syscall6(SYS_futex, (long)addr, FUTEX_WAIT_PRIVATE, val, (long)tsp, 0, 0);
}

long futexwakeup(uint32_t *addr, int cnt)
{
    return rt_syscall6(SYS_futex, (long)addr, FUTEX_WAKE_PRIVATE, cnt, 0, 0, 0);
}

int64_t nanotime(void)
{
    struct timespec ts;
    libc_clock_gettime(CLOCK_MONOTONIC, &ts); /* vDSO; cannot fail for this clock */
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void osusleep(uint32_t usec)
{
    struct timespec ts = {usec / 1000000, (long)(usec % 1000000) * 1000};
    rt_syscall(SYS_nanosleep, &ts, 0, 0);
}

void procyield(uint32_t cycles)
{
    while (cycles--)
        __builtin_ia32_pause();
}

void osyield(void)
{
    rt_syscall(SYS_sched_yield, 0, 0, 0);
}

int runtime_trylock(struct runtime_lock *l)
{
    fork_settled(); /* a fork child's locks are its parent's threads' until then */
    uint32_t z = 0;
    return __atomic_compare_exchange_n(&l->key, &z, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
}

void runtime_lock(struct runtime_lock *l)
{
    fork_settled(); /* a fork child's locks are its parent's threads' until then */
    /* Speculative grab for the uncontended case. */
    uint32_t v = __atomic_exchange_n(&l->key, 1, __ATOMIC_ACQUIRE);
    if (v == 0)
        return;
    /*
     * v is 1 or 2. If we ever sleep we must leave the key at 2 when we
     * finally get the lock, so that our unlock wakes the next sleeper.
     */
    uint32_t wait = v;
    for (;;) {
        for (int i = 0; i < ACTIVE_SPIN; i++) {
            for (uint32_t k = __atomic_load_n(&l->key, __ATOMIC_RELAXED); k == 0;
                 k = __atomic_load_n(&l->key, __ATOMIC_RELAXED)) {
                if (__atomic_compare_exchange_n(&l->key, &k, wait, 0, __ATOMIC_ACQUIRE,
                                                __ATOMIC_RELAXED))
                    return;
            }
            procyield(ACTIVE_SPIN_CNT);
        }
        for (int i = 0; i < PASSIVE_SPIN; i++) {
            for (uint32_t k = __atomic_load_n(&l->key, __ATOMIC_RELAXED); k == 0;
                 k = __atomic_load_n(&l->key, __ATOMIC_RELAXED)) {
                if (__atomic_compare_exchange_n(&l->key, &k, wait, 0, __ATOMIC_ACQUIRE,
                                                __ATOMIC_RELAXED))
                    return;
            }
            osyield();
        }
        v = __atomic_exchange_n(&l->key, 2, __ATOMIC_ACQUIRE);
        if (v == 0)
            return;
        wait = 2;
        futexsleep(&l->key, 2, -1);
    }
}

void runtime_unlock(struct runtime_lock *l)
{
    uint32_t v = __atomic_exchange_n(&l->key, 0, __ATOMIC_RELEASE);
    if (v == 0)
        goshim_throw("runtime_unlock: lock not held");
    if (v == 2)
        futexwakeup(&l->key, 1);
}

void noteclear(struct note *n)
{
    __atomic_store_n(&n->key, 0, __ATOMIC_RELAXED);
}

void notewakeup(struct note *n)
{
    uint32_t old = __atomic_exchange_n(&n->key, 1, __ATOMIC_RELEASE);
    if (old != 0)
        goshim_throw("notewakeup: double wakeup");
    futexwakeup(&n->key, 1);
}

void notesleep(struct note *n)
{
    while (__atomic_load_n(&n->key, __ATOMIC_ACQUIRE) == 0)
        futexsleep(&n->key, 0, -1);
}

int notetsleep(struct note *n, int64_t ns)
{
    if (ns < 0) {
        notesleep(n);
        return 1;
    }
    int64_t deadline = nanotime() + ns;
    while (__atomic_load_n(&n->key, __ATOMIC_ACQUIRE) == 0) {
        futexsleep(&n->key, 0, ns);
        if (__atomic_load_n(&n->key, __ATOMIC_ACQUIRE) != 0)
            return 1;
        ns = deadline - nanotime();
        if (ns <= 0)
            return 0;
    }
    return 1;
}
