/*
 * poll, select and epoll_wait on the netpoller (shim/net.c says how a G
 * parks on an fd). Each checks readiness without a timeout first, then
 * subscribes the G to every fd involved (a user epoll fd is itself
 * pollable) and parks until one of them may have changed or the timeout;
 * then it checks again.
 *
 * A signal sent to a waiting G with pthread_kill interrupts the wait: the
 * handler runs on the G, then the call fails with EINTR (poll, select and
 * epoll_wait are never restarted, SA_RESTART or not). ppoll, pselect,
 * epoll_pwait and epoll_pwait2 with a signal mask park the same way, the
 * mask being the thread's for the call (shim_callmask in shim/sigmask.c:
 * the router sees it, so a process signal the mask lets through interrupts
 * the call, its handler having run before it returns, and the old mask is
 * back afterwards). Rejected: handing the P off and letting the kernel
 * apply the mask: the router never knows the thread took the signal, and
 * the M, not the thread, holds the wait.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/syscall.h>
#include <time.h>

#include "shim/cancel.h"
#include "shim/io.h"
#include "shim/shim.h"
#include "shim/sigdeliver.h"

enum { SUBS_ON_STACK = 16 };

struct waitset {
    struct psub stack[SUBS_ON_STACK];
    struct psub *subs;
    int n;
    uint32_t word;
    bool unwatched; /* an fd that epoll could watch is not watched (no instance now) */
};

enum { UNWATCHED_NAP_NS = 1000000 }; /* the wait's step while an fd is unwatched */

/* Subscribe to fd's readiness; fds that cannot be registered are always
 * ready (regular files) or invalid, which the zero-timeout check reports. */
static void ws_add(struct waitset *ws, int fd, int cap)
{
    struct pdesc *pd = netpoll_fd(fd);
    if (!pd || ws->n >= cap)
        return;
    if (!netpoll_arm(pd)) {
        if (!netpoll_never_armed(pd))
            ws->unwatched = true; /* no epoll instance now (EMFILE): look again and again */
        return;
    }
    netpoll_subscribe(pd, &ws->subs[ws->n++], &ws->word);
}

static bool ws_init(struct waitset *ws, int cap)
{
    ws->n = 0;
    ws->word = 0;
    ws->unwatched = false;
    ws->subs = cap <= SUBS_ON_STACK ? ws->stack : malloc((size_t)cap * sizeof *ws->subs);
    return ws->subs != NULL;
}

static void ws_done(struct waitset *ws)
{
    for (int i = 0; i < ws->n; i++)
        netpoll_unsubscribe(&ws->subs[i]);
    if (ws->subs != ws->stack)
        free(ws->subs);
}

/*
 * A zero-timeout check, made again while only goshim's own signals (a preemption request
 * that found the G in the call, a bell) cut it short: the kernel ends a poll with EINTR
 * for any handler, and under load two of goshim's can come in a row; the program sees
 * EINTR only when one of its handlers ran (blocking.c does the same for its calls).
 */
static long check_once(long (*check)(void *), void *arg)
{
    uint32_t ran = shim_handlers_ran();
    long r;
    while ((r = check(arg)) == -EINTR && shim_handlers_ran() == ran)
        ;
    return r;
}

/*
 * Park until check() != 0 (its result: ready count or -errno), or until the
 * deadline (returns 0). check is called once per possible change.
 */
static long ws_wait(struct waitset *ws, long (*check)(void *), void *arg, int64_t deadline)
{
    shim_deliver_signals();
    for (;;) {
        uint32_t w = __atomic_load_n(&ws->word, __ATOMIC_SEQ_CST);
        long r = check_once(check, arg);
        if (r != 0)
            return r;
        int64_t until = deadline;
        if (ws->unwatched) {
            int64_t nap = nanotime() + UNWATCHED_NAP_NS;
            if (until < 0 || until > nap)
                until = nap;
        }
        switch (shim_wait_word(WAIT_IO, NULL, &ws->word, w, until, SHIM_WAIT_CANCEL)) {
        case SHIM_WAIT_TIMEDOUT:
            if (until != deadline)
                break; /* a nap: look again */
            return 0;
        case SHIM_WAIT_RESTARTED:
        case SHIM_WAIT_INTERRUPTED:
            return -EINTR; /* never restarted, as natively */
        default:
            break;
        }
    }
}

static int64_t ms_deadline(int timeout)
{
    return timeout < 0 ? -1 : nanotime() + (int64_t)timeout * 1000000;
}

static int64_t ts_deadline(const struct timespec *ts)
{
    if (!ts)
        return -1;
    if (ts->tv_sec > INT64_MAX / 1000000000 - 1)
        return -1;
    return nanotime() + (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
}

/*
 * The body of a wait with a signal mask of its own (shim_callmask): call, made with the
 * mask installed, checks only (masked_deadline) if a handler ran already; a handler that
 * ran during the call turns "nothing ready" into EINTR. Returns from the wrapper.
 */
#define MASKED_WAIT(mask, call)                                                                    \
    do {                                                                                           \
        struct shim_callmask cm_;                                                                  \
        shim_callmask_begin(&cm_, (mask));                                                         \
        int r_ = (call);                                                                           \
        int e_ = errno;                                                                            \
        if (r_ == 0 && shim_callmask_interrupted(&cm_)) {                                          \
            r_ = -1;                                                                               \
            e_ = EINTR;                                                                            \
        }                                                                                          \
        shim_callmask_end(&cm_);                                                                   \
        errno = e_;                                                                                \
        return r_;                                                                                 \
    } while (0)

static int64_t masked_deadline(const struct shim_callmask *cm, int64_t deadline)
{
    return shim_callmask_interrupted(cm) ? 0 : deadline;
}

struct pollarg {
    struct pollfd *fds;
    nfds_t n;
};

static long poll_check(void *arg)
{
    struct pollarg *a = arg;
    return rt_syscall6(SYS_ppoll, (long)a->fds, (long)a->n, (long)&(struct timespec){0, 0}, 0, 8,
                       0);
}

static int do_poll(struct pollfd *fds, nfds_t n, int64_t deadline)
{
    shim_testcancel();
    struct pollarg a = {fds, n};
    long r = check_once(poll_check, &a);
    if (r != 0 || deadline == 0)
        return (int)io_result(r);
    struct waitset ws;
    if (n > INT_MAX || !ws_init(&ws, (int)n))
        return HANDOFF_WITH(entersyscallblock, REAL(poll)(fds, n, -1)); /* no memory */
    for (nfds_t i = 0; i < n; i++)
        if (fds[i].fd >= 0)
            ws_add(&ws, fds[i].fd, (int)n);
    r = ws_wait(&ws, poll_check, &a, deadline);
    ws_done(&ws);
    return (int)io_result(r);
}

GOSHIM_EXPORT int poll(struct pollfd *fds, nfds_t n, int timeout)
{
    if (!io_active())
        return REAL(poll)(fds, n, timeout);
    if (sched_lone())
        return LONE_CALL(REAL(poll)(fds, n, timeout));
    return do_poll(fds, n, timeout == 0 ? 0 : ms_deadline(timeout));
}

GOSHIM_EXPORT int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts,
                        const sigset_t *mask)
{
    if (!io_active())
        return REAL(ppoll)(fds, n, ts, mask);
    if (sched_lone() && !mask)
        return LONE_CALL(REAL(ppoll)(fds, n, ts, mask));
    if (ts && (ts->tv_sec < 0 || ts->tv_nsec < 0 || ts->tv_nsec >= 1000000000))
        return HANDOFF_WITH(entersyscallblock, REAL(ppoll)(fds, n, ts, mask)); /* EINVAL */
    int64_t deadline = ts && ts->tv_sec == 0 && ts->tv_nsec == 0 ? 0 : ts_deadline(ts);
    if (!mask)
        return do_poll(fds, n, deadline);
    MASKED_WAIT(mask, do_poll(fds, n, masked_deadline(&cm_, deadline)));
}

struct selectarg {
    int n;
    fd_set *in[3];
    fd_set out[3];
};

static long select_check(void *arg)
{
    struct selectarg *a = arg;
    fd_set *s[3];
    for (int k = 0; k < 3; k++) {
        s[k] = a->in[k] ? &a->out[k] : NULL;
        if (a->in[k])
            a->out[k] = *a->in[k];
    }
    struct timespec zero = {0, 0};
    return rt_syscall6(SYS_pselect6, a->n, (long)s[0], (long)s[1], (long)s[2], (long)&zero, 0);
}

static int do_select(int n, fd_set *r, fd_set *w, fd_set *e, int64_t deadline)
{
    shim_testcancel();
    if (n < 0 || n > FD_SETSIZE)
        return (int)io_result(-EINVAL);
    struct selectarg a = {n, {r, w, e}, {{{0}}}};
    long res = check_once(select_check, &a);
    if (res == 0 && deadline != 0) {
        struct waitset ws;
        if (!ws_init(&ws, n))
            return (int)io_result(-ENOMEM);
        for (int fd = 0; fd < n; fd++)
            if ((r && FD_ISSET(fd, r)) || (w && FD_ISSET(fd, w)) || (e && FD_ISSET(fd, e)))
                ws_add(&ws, fd, n);
        res = ws_wait(&ws, select_check, &a, deadline);
        ws_done(&ws);
    }
    if (res >= 0)
        for (int k = 0; k < 3; k++)
            if (a.in[k])
                *a.in[k] = res > 0 ? a.out[k] : (fd_set){{0}};
    return (int)io_result(res);
}

GOSHIM_EXPORT int select(int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv)
{
    if (!io_active())
        return REAL(select)(n, r, w, e, tv);
    if (sched_lone())
        return LONE_CALL(REAL(select)(n, r, w, e, tv));
    if (tv && (tv->tv_sec < 0 || tv->tv_usec < 0))
        return (int)io_result(-EINVAL);
    int64_t deadline = -1;
    if (tv) {
        int64_t ns = (int64_t)tv->tv_sec * 1000000000 + (int64_t)tv->tv_usec * 1000;
        deadline = ns == 0 ? 0 : nanotime() + ns;
    }
    int res = do_select(n, r, w, e, deadline);
    if (tv && deadline > 0) { /* Linux reports the time left */
        int64_t left = deadline - nanotime();
        if (left < 0)
            left = 0;
        tv->tv_sec = left / 1000000000;
        tv->tv_usec = left % 1000000000 / 1000;
    }
    return res;
}

GOSHIM_EXPORT int pselect(int n, fd_set *r, fd_set *w, fd_set *e, const struct timespec *ts,
                          const sigset_t *mask)
{
    if (!io_active())
        return REAL(pselect)(n, r, w, e, ts, mask);
    if (sched_lone() && !mask)
        return LONE_CALL(REAL(pselect)(n, r, w, e, ts, mask));
    if (ts && (ts->tv_sec < 0 || ts->tv_nsec < 0 || ts->tv_nsec >= 1000000000))
        return HANDOFF_WITH(entersyscallblock, REAL(pselect)(n, r, w, e, ts, mask)); /* EINVAL */
    int64_t deadline = ts && ts->tv_sec == 0 && ts->tv_nsec == 0 ? 0 : ts_deadline(ts);
    if (!mask)
        return do_select(n, r, w, e, deadline);
    MASKED_WAIT(mask, do_select(n, r, w, e, masked_deadline(&cm_, deadline)));
}

struct epollarg {
    int epfd;
    struct epoll_event *ev;
    int max;
};

static long epoll_check(void *arg)
{
    struct epollarg *a = arg;
    return rt_syscall6(SYS_epoll_wait, a->epfd, (long)a->ev, a->max, 0, 0, 0);
}

/* A user epoll fd is readable when it has events: wait on it like a read (until deadline:
 * a nanotime, -1 for ever, 0 for a check). */
static int do_epoll_wait(int epfd, struct epoll_event *ev, int max, int64_t deadline)
{
    shim_testcancel();
    struct epollarg a = {epfd, ev, max};
    long r = check_once(epoll_check, &a);
    if (r != 0 || deadline == 0)
        return (int)io_result(r);
    struct waitset ws;
    ws_init(&ws, 1); /* on the stack: cannot fail */
    ws_add(&ws, epfd, 1);
    if (ws.n == 0) {
        ws_done(&ws);
        int64_t left = deadline < 0 ? -1 : (deadline - nanotime() + 999999) / 1000000;
        return HANDOFF(REAL(epoll_wait)(epfd, ev, max, left < 0 && deadline >= 0 ? 0 : (int)left));
    }
    r = ws_wait(&ws, epoll_check, &a, deadline);
    ws_done(&ws);
    return (int)io_result(r);
}

static int64_t epoll_deadline(int timeout)
{
    return timeout == 0 ? 0 : ms_deadline(timeout);
}

GOSHIM_EXPORT int epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout)
{
    if (!io_active())
        return REAL(epoll_wait)(epfd, ev, max, timeout);
    if (sched_lone())
        return LONE_CALL(REAL(epoll_wait)(epfd, ev, max, timeout));
    return do_epoll_wait(epfd, ev, max, epoll_deadline(timeout));
}

GOSHIM_EXPORT int epoll_pwait(int epfd, struct epoll_event *ev, int max, int timeout,
                              const sigset_t *mask)
{
    if (!io_active())
        return REAL(epoll_pwait)(epfd, ev, max, timeout, mask);
    if (sched_lone() && !mask)
        return LONE_CALL(REAL(epoll_wait)(epfd, ev, max, timeout));
    int64_t deadline = epoll_deadline(timeout);
    if (!mask)
        return do_epoll_wait(epfd, ev, max, deadline);
    MASKED_WAIT(mask, do_epoll_wait(epfd, ev, max, masked_deadline(&cm_, deadline)));
}

/* glibc >= 2.35 only: made as the system call (as glibc makes it) where goshim does not
 * park it, so that the library loads on 2.34 too. */
GOSHIM_EXPORT int epoll_pwait2(int epfd, struct epoll_event *ev, int max, const struct timespec *ts,
                               const sigset_t *mask)
{
    if (!io_active() || (ts && (ts->tv_sec < 0 || ts->tv_nsec < 0 || ts->tv_nsec >= 1000000000)))
        return (int)io_result(
            rt_syscall6(SYS_epoll_pwait2, epfd, (long)ev, max, (long)ts, (long)mask, 8));
    int64_t deadline = ts && ts->tv_sec == 0 && ts->tv_nsec == 0 ? 0 : ts_deadline(ts);
    if (!mask)
        return do_epoll_wait(epfd, ev, max, deadline);
    MASKED_WAIT(mask, do_epoll_wait(epfd, ev, max, masked_deadline(&cm_, deadline)));
}
