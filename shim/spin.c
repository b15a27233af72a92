/*
 * pthread_spin_lock that lets the holder run.
 *
 * glibc's x86-64 spinlock word is 1 when free and 0 (or negative, after
 * failed `lock decl`s) when held; pthread_spin_init and pthread_spin_unlock
 * store 1 and pthread_spin_trylock is cmpxchg 1 -> 0. goshim keeps that
 * encoding, so glibc's init, trylock, unlock and destroy (not interposed)
 * and a glibc spinner on another thread all agree with this one, and a
 * lock glibc used before start-up is free here as there (1: every unlock
 * stores it, whatever the failed attempts left before).
 *
 * Only lock is goshim's: a G spins with PAUSE a bounded number of times,
 * then yields its P (the holder may be a G waiting on this very P), takes
 * the signals sent to it meanwhile and tries again. Non-G callers spin in
 * glibc, as a thread would.
 */
#include "shim/shim.h"

enum {
    SPIN_FREE = 1,    /* glibc x86-64: pthread_spin_init/unlock store 1 */
    SPIN_HELD = 0,    /* what a successful acquire leaves */
    SPIN_TRIES = 200, /* PAUSEs between yields */
};

static inline bool spin_try(pthread_spinlock_t *l)
{
    int free = SPIN_FREE;
    return __atomic_compare_exchange_n(l, &free, SPIN_HELD, false, __ATOMIC_ACQUIRE,
                                       __ATOMIC_RELAXED);
}

GOSHIM_EXPORT int pthread_spin_lock(pthread_spinlock_t *l)
{
    if (!goshim_active())
        return REAL(pthread_spin_lock)(l);
    while (!spin_try(l)) {
        int i = 0;

        while (__atomic_load_n(l, __ATOMIC_RELAXED) != SPIN_FREE && i++ < SPIN_TRIES)
            __builtin_ia32_pause();
        if (__atomic_load_n(l, __ATOMIC_RELAXED) != SPIN_FREE) {
            sched_goyield();
            /* A signal routed here while it spins: its handler runs now, as natively it
             * interrupts the spinning thread (it may end the thread: Open POSIX
             * pthread_spin_lock/1-1). The bell that brought it found the G in goshim's
             * code, where no handler runs. */
            shim_deliver_signals();
        }
    }
    return 0;
}
