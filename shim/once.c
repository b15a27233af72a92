/*
 * pthread_once (and C11's call_once, which shim/c11.c builds on it), on a
 * word the waiting Gs park on.
 *
 * The first caller runs the routine; the others wait until it is done.
 * glibc's waiters sleep in a futex wait on the once word, which would hold
 * their M: here they park on the word with the G-aware futex (a wait of
 * kind WAIT_ONCE, so deadlock reports and dumps say what they wait for),
 * and the runner wakes them when it marks the word done.
 *
 * The word keeps glibc's encoding, so a once is the same object to both:
 * one glibc completed before start-up is done here too (a done word takes
 * the fast path before anything else, on any thread), one whose routine
 * was cancelled under glibc (reset to 0) runs again, and a call on a
 * thread goshim does not manage goes to glibc with the same word. If the
 * routine is cancelled or calls pthread_exit, a cleanup handler resets the
 * word to 0 and wakes the waiters, so another call runs it, as glibc does.
 */
#include <limits.h>
#include <pthread.h>
#include <stdint.h>

#include "shim/shim.h"

/* glibc's once word: 0 never run, bit 0 running, bit 1 done (upper bits: fork generation).
 * The same encoding here, so a once glibc completed before start-up (2) is done here too, and
 * one whose routine was cancelled there (reset to 0) runs. */
enum { ONCE_RUNNING = 1, ONCE_DONE = 2 };

/* The init routine was cancelled or called pthread_exit: let another call run it (glibc too). */
static void once_reset(void *arg)
{
    uint32_t *w = arg;
    __atomic_store_n(w, 0, __ATOMIC_RELEASE);
    gfutex_wake(w, INT_MAX);
}

GOSHIM_EXPORT int pthread_once(pthread_once_t *once, void (*init)(void))
{
    uint32_t *w = (uint32_t *)once;
    if (__atomic_load_n(w, __ATOMIC_ACQUIRE) & ONCE_DONE)
        return 0;
    if (!goshim_active())
        return REAL(pthread_once)(once, init);
    for (;;) {
        uint32_t v = __atomic_load_n(w, __ATOMIC_ACQUIRE);
        if (v & ONCE_DONE)
            return 0;
        if (v == 0) {
            if (!__atomic_compare_exchange_n(w, &v, ONCE_RUNNING, 0, __ATOMIC_ACQUIRE,
                                             __ATOMIC_RELAXED))
                continue;
            pthread_cleanup_push(once_reset, w);
            init();
            pthread_cleanup_pop(0);
            __atomic_store_n(w, ONCE_DONE, __ATOMIC_RELEASE);
            gfutex_wake(w, INT_MAX);
            return 0;
        }
        shim_wait_word(WAIT_ONCE, w, w, v, -1, 0);
    }
}
