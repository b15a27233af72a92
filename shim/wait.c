/*
 * One wait for every parking wrapper: shim_wait (contract in shim.h).
 *
 * A wrapper that parks its G (a sleep, a futex, a semaphore, a socket, a
 * poll) does the same four things around the park: it notes what the thread
 * waits for (deadlock reports, dumps), parks, clears the note, and then,
 * when a signal cut the park short, acts on a pending cancellation (if the
 * call is a cancellation point) and runs the handlers of the signals sent to
 * the thread, here, on the thread, as the kernel would before the system
 * call returns. What it then returns depends on the call: a sleep returns
 * EINTR whatever the handler's flags, a read restarts under SA_RESTART, a
 * futex wait reports a moved word as a wake-up. So shim_wait says how the
 * park ended and which handlers ran, and the caller decides.
 *
 * Signals are delivered after every park, not only an interrupted one: a
 * signal sent as the G was woken (or timed out) found it switching and did
 * not interrupt anything; natively it would have run its handler on the
 * return from the system call, which is now.
 *
 * The park itself is the caller's: a gfutex word (shim_wait_word) or a
 * netpoll descriptor (netpoll_waitcall), both returning gfutex_wait's codes.
 */
#include <errno.h>

#include "shim/cancel.h"
#include "shim/shim.h"

enum shim_wait shim_wait(int kind, const void *obj, int (*park)(void *), void *arg, unsigned flags)
{
    sched_set_wait(kind, (void *)obj);
    int err = park(arg);
    sched_set_wait(WAIT_NONE, NULL);
    if (err == EINTR && (flags & SHIM_WAIT_CANCEL))
        shim_testcancel();            /* does not return if the thread was cancelled */
    int ran = shim_deliver_signals(); /* interrupted, or sent as it woke */
    switch (err) {
    case 0:
        return SHIM_WAIT_READY;
    case EAGAIN:
        return SHIM_WAIT_CHANGED;
    case ETIMEDOUT:
        return SHIM_WAIT_TIMEDOUT;
    case EBADF:
        return SHIM_WAIT_CLOSED;
    case EINTR:
        return ran == 2   ? SHIM_WAIT_INTERRUPTED
               : ran == 1 ? SHIM_WAIT_RESTARTED
                          : SHIM_WAIT_SPURIOUS;
    default:
        goshim_throw("shim_wait: the park returned an unknown code");
    }
}

struct wordpark {
    uint32_t *addr;
    uint32_t val;
    int64_t deadline;
};

static int park_word(void *arg)
{
    struct wordpark *w = arg;
    return gfutex_wait(w->addr, w->val, w->deadline);
}

enum shim_wait shim_wait_word(int kind, const void *obj, uint32_t *addr, uint32_t val,
                              int64_t deadline, unsigned flags)
{
    struct wordpark w = {addr, val, deadline};
    return shim_wait(kind, obj, park_word, &w, flags);
}
