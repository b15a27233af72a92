/*
 * The netpoller's epoll backend (netpoll.c has the descriptors and the
 * readiness protocol), after Go's netpoll_epoll.go: one epoll instance,
 * a wake-up eventfd registered in it (level-triggered, data all ones) that
 * interrupts a blocking poll, and the poll itself.
 *
 * Both are goshim's own descriptors in the program's fd table (ownfd.c
 * keeps their numbers, high and out of the program's sight). They are made
 * at the first registration (np_ensure from netpoll_arm), not at start-up:
 * a program that never waits on a pipe or socket never has them, and a
 * forked child closes the parent's (np_fork_child) and makes its own when
 * it first needs them. Every system call on them is held (ownfd_hold), so
 * that the program's dup2 onto one of the numbers waits until none is in
 * flight on it (ownfd_evict).
 *
 * Lost anyway: a system call goshim cannot see may close them, and the
 * program may reuse the numbers. EBADF or EINVAL from a call on them is
 * checked (np_check) by a probe only the two files at the two numbers
 * answer; if it fails, both are forgotten without closing the numbers,
 * made again, and every registered fd is registered again
 * (netpoll_remade). A poll still blocked on the old instance goes on until
 * one of its fds has an event: a timer that would have interrupted it finds
 * another M (netpoll_break says false).
 */
#include <errno.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>

#include "netpoll.h"
#include "sched.h"
#include "throw.h"

enum { NEVENTS = 128 };

static struct {
    uint32_t made;     /* the epoll instance was made in this process; atomic */
    uint32_t blocking; /* a netpoll blocks now; atomic */
    uint32_t wakesent; /* the wake-up was written and not yet read; atomic */
    int64_t lastpoll;  /* atomic */
    uint64_t npolls, nevents;
} ep FORK_WRITTEN; /* a fork child's has made none */

static inline long sys(long nr, long a, long b, long c)
{
    return rt_syscall(nr, a, b, c);
}

int netpoll_init(void)
{
    /* The epoll instance and the eventfd wait for the first registration (np_open). */
    __atomic_store_n(&ep.lastpoll, nanotime(), __ATOMIC_RELAXED);
    return 0;
}

/* Register the wake-up eventfd wk in the epoll instance epfd. 0 or -errno. */
static long wake_register(int epfd, int wk)
{
    struct epoll_event e = {.events = EPOLLIN, .data.u64 = UINT64_MAX};
    long rc = rt_syscall6(SYS_epoll_ctl, epfd, EPOLL_CTL_ADD, wk, (long)&e, 0, 0);
    return rc == -EEXIST ? 0 : rc;
}

/*
 * Under a small RLIMIT_NOFILE the netpoller takes no descriptor: its two would be two of the
 * program's few, high as they are placed (a table of 16 filled two files sooner than
 * natively). A call that must wait then blocks in the kernel, its P handed off, as when the
 * poller cannot be made. Decided at the first need, from the soft limit then.
 */
enum { NP_MIN_NOFILE = 64 };

static bool fd_table_small(void)
{
    static int small = -1; /* atomic: -1 undecided, else 0 or 1 */
    int v = __atomic_load_n(&small, __ATOMIC_ACQUIRE);
    if (v >= 0)
        return v;
    struct rlimit rl;
    v = rt_syscall(SYS_getrlimit, RLIMIT_NOFILE, (long)&rl, 0) == 0 && rl.rlim_cur < NP_MIN_NOFILE;
    int undecided = -1;
    if (__atomic_compare_exchange_n(&small, &undecided, v, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE) &&
        v)
        rt_print(2,
                 "goshim: RLIMIT_NOFILE is %lu: the netpoller leaves its two descriptors to the "
                 "program; a read, write, accept or poll that must wait blocks in the kernel, its "
                 "processor handed to another thread\n",
                 (unsigned long)rl.rlim_cur);
    return v;
}

/*
 * Make what is missing of the epoll instance and the wake-up eventfd, at
 * goshim's high numbers: at the first registration, and after one was
 * lost. A new instance replacing a lost one gets every registered fd again
 * (netpoll_remade). True if both exist. No descriptor lock held.
 */
static bool np_open(void)
{
    if (fd_table_small())
        return false;
    struct m *mp = ownfd_lock();
    int epfd = ownfd_get(OWNFD_EPOLL), wk = ownfd_get(OWNFD_WAKE);
    bool fresh = false, again = false, injected = false;
    long err = 0;
    if (epfd < 0) {
        injected = fault_inject(FAULT_POLLER);
        long r = injected ? -EMFILE : sys(SYS_epoll_create1, EPOLL_CLOEXEC, 0, 0);
        err = r < 0 ? r : 0;
        if (r >= 0) {
            epfd = ownfd_place((int)r);
            ownfd_set(OWNFD_EPOLL, epfd);
            fresh = true;
            again = __atomic_exchange_n(&ep.made, 1, __ATOMIC_SEQ_CST) != 0;
        }
    }
    if (epfd >= 0 && wk < 0) {
        injected = fault_inject(FAULT_POLLER);
        long r = injected ? -EMFILE : sys(SYS_eventfd2, 0, EFD_CLOEXEC | EFD_NONBLOCK, 0);
        err = r < 0 ? r : 0;
        if (r >= 0) {
            wk = ownfd_place((int)r);
            ownfd_set(OWNFD_WAKE, wk);
            fresh = true;
            __atomic_store_n(&ep.wakesent, 0,
                             __ATOMIC_SEQ_CST); /* a write to the old one is gone */
        }
    }
    bool ok = epfd >= 0 && wk >= 0;
    if (ok && fresh && wake_register(epfd, wk) != 0) {
        sys(SYS_close, wk, 0, 0); /* not registered: made again next time */
        ownfd_set(OWNFD_WAKE, -1);
        ok = false;
    }
    ownfd_unlock(mp);
    if (again)
        netpoll_remade();
    if (err && fault_first(FAULT_POLLER))
        rt_print(2,
                 "goshim: cannot make the netpoller's epoll instance or eventfd (error %ld; "
                 "RLIMIT_NOFILE?): a read, write, accept or poll that must wait blocks in the "
                 "kernel, its processor handed to another thread, until one can be made%s\n",
                 -err, fault_note(injected));
    return ok;
}

bool np_ensure(void)
{
    if (__atomic_load_n(&ep.made, __ATOMIC_ACQUIRE) && ownfd_get(OWNFD_EPOLL) >= 0 &&
        ownfd_get(OWNFD_WAKE) >= 0)
        return true;
    return np_open();
}

bool np_check(void)
{
    if (!__atomic_load_n(&ep.made, __ATOMIC_ACQUIRE))
        return false;
    struct m *mp = ownfd_lock();
    int epfd = ownfd_get(OWNFD_EPOLL), wk = ownfd_get(OWNFD_WAKE);
    bool lost = epfd < 0 || wk < 0;
    if (!lost) {
        /* epoll knows the eventfd by file and number: nothing else answers. */
        struct epoll_event e = {.events = EPOLLIN, .data.u64 = UINT64_MAX};
        lost = rt_syscall6(SYS_epoll_ctl, epfd, EPOLL_CTL_MOD, wk, (long)&e, 0, 0) != 0;
    }
    if (lost) {
        ownfd_forget(OWNFD_EPOLL);
        ownfd_forget(OWNFD_WAKE);
    }
    ownfd_unlock(mp);
    if (lost)
        np_open();
    return lost;
}

long np_ctl(int op, int fd, struct epoll_event *e)
{
    int ph;
    int epfd = ownfd_hold(OWNFD_EPOLL, &ph);
    long rc = epfd < 0 ? -EBADF : rt_syscall6(SYS_epoll_ctl, epfd, op, fd, (long)e, 0, 0);
    ownfd_unhold(ph);
    return rc;
}

FORK_TEXT void np_fork_child(void)
{
    for (int slot = OWNFD_EPOLL; slot <= OWNFD_WAKE; slot++) {
        int fd = ownfd_get(slot);
        if (fd >= 0)
            sys(SYS_close, fd, 0, 0);
        ownfd_set(slot, -1);
    }
    FORK_SET(ep.made, 0);
    FORK_SET(ep.blocking, 0);
    FORK_SET(ep.wakesent, 0);
}

void np_poll_stats(uint64_t *polls, uint64_t *events)
{
    *polls = __atomic_load_n(&ep.npolls, __ATOMIC_RELAXED);
    *events = __atomic_load_n(&ep.nevents, __ATOMIC_RELAXED);
}

/* ---- for ownfd.c ----------------------------------------------------------------------- */

void netpoll_interrupt(void)
{
    uint64_t one = 1;
    int wk = ownfd_get(OWNFD_WAKE); /* ownfd_lock held: it stays */
    if (wk >= 0)
        sys(SYS_write, wk, (long)&one, sizeof one);
}

void netpoll_own_moved(int slot, int oldfd, int newfd)
{
    if (slot != OWNFD_WAKE)
        return; /* an epoll instance is the same whatever its number */
    /* epoll knows a file by file and number: register the new number, drop
     * the old one while it still names goshim's eventfd. */
    int epfd = ownfd_get(OWNFD_EPOLL);
    if (epfd < 0)
        return;
    wake_register(epfd, newfd);
    rt_syscall6(SYS_epoll_ctl, epfd, EPOLL_CTL_DEL, oldfd, 0, 0, 0);
}

/* ---- the poller ------------------------------------------------------------------- */

/* epoll_pwait2 (epoll_wait before Linux 5.11) on the instance, held. */
static long np_wait(struct epoll_event *ev, struct timespec *tsp)
{
    int ph;
    int epfd = ownfd_hold(OWNFD_EPOLL, &ph);
    long n =
        epfd < 0 ? -EBADF : rt_syscall6(SYS_epoll_pwait2, epfd, (long)ev, NEVENTS, (long)tsp, 0, 8);
    if (n == -ENOSYS) {
        int ms = tsp == NULL ? -1 : (int)(tsp->tv_sec * 1000 + (tsp->tv_nsec + 999999) / 1000000);
        n = rt_syscall6(SYS_epoll_wait, epfd, (long)ev, NEVENTS, ms, 0, 0);
    }
    ownfd_unhold(ph);
    return n;
}

/* The wake-up eventfd had an event: read it (the next netpoll_break writes again). */
static void wake_drain(void)
{
    uint64_t v;
    int ph;
    int wk = ownfd_hold(OWNFD_WAKE, &ph);
    if (wk >= 0)
        sys(SYS_read, wk, (long)&v, sizeof v);
    ownfd_unhold(ph);
    __atomic_store_n(&ep.wakesent, 0, __ATOMIC_SEQ_CST);
}

int netpoll(int64_t until)
{
    if (!__atomic_load_n(&ep.made, __ATOMIC_ACQUIRE))
        return 0; /* nothing was ever registered */
    if (!np_ensure())
        return 0;
    struct epoll_event ev[NEVENTS];
    struct timespec ts = {0, 0}, *tsp = &ts;
    bool block = until != 0;
    if (until < 0) {
        tsp = NULL;
    } else if (until > 0) {
        int64_t d = until - nanotime();
        if (d <= 0) {
            block = false;
        } else {
            ts.tv_sec = d / 1000000000;
            ts.tv_nsec = d % 1000000000;
        }
    }
    if (block) {
        __atomic_store_n(&ep.blocking, 1, __ATOMIC_SEQ_CST);
        __atomic_store_n(&ep.lastpoll, 0, __ATOMIC_SEQ_CST);
    }
    long n = np_wait(ev, tsp);
    if (block)
        __atomic_store_n(&ep.blocking, 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&ep.lastpoll, nanotime(), __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&ep.npolls, 1, __ATOMIC_RELAXED);
    if (n == -EBADF || n == -EINVAL) { /* lost? */
        np_check();
        n = 0;
    }
    int nready = 0;
    for (long i = 0; i < n; i++) {
        if (ev[i].data.u64 == UINT64_MAX)
            wake_drain();
        else if (netpoll_event(ev[i].data.u64, ev[i].events))
            nready++;
    }
    __atomic_add_fetch(&ep.nevents, (uint64_t)nready, __ATOMIC_RELAXED);
    return nready;
}

bool netpoll_break(void)
{
    if (!__atomic_load_n(&ep.blocking, __ATOMIC_SEQ_CST))
        return true;
    uint32_t zero = 0;
    if (!__atomic_compare_exchange_n(&ep.wakesent, &zero, 1, false, __ATOMIC_SEQ_CST,
                                     __ATOMIC_SEQ_CST))
        return true;
    uint64_t one = 1;
    int ph;
    int wk = ownfd_hold(OWNFD_WAKE, &ph);
    long r = wk < 0 ? -EBADF : sys(SYS_write, wk, (long)&one, sizeof one);
    ownfd_unhold(ph);
    if (r == sizeof one)
        return true;
    /* Lost behind goshim's back: a new eventfd is not in the instance the
     * poll blocks on, so the caller must not count on it. */
    __atomic_store_n(&ep.wakesent, 0, __ATOMIC_SEQ_CST);
    np_check();
    return false;
}

int64_t netpoll_lastpoll(void)
{
    return __atomic_load_n(&ep.lastpoll, __ATOMIC_SEQ_CST);
}
