/*
 * goshim's own descriptors: the netpoller's epoll instance and wake-up
 * eventfd, and the copy of stderr GOSHIM_STATS prints to. They live in the
 * program's fd table, which the program believes it owns: it lists
 * /proc/self/fd, asks fcntl about every fd below the limit, closes all
 * from 3 up (daemons, closefrom, close_range, CPython's children), dup2s
 * onto numbers it picked. So goshim's are kept out of its way, and out of
 * its sight:
 *
 *   - made only when first needed (the netpoller's at the first wait that
 *     has to park on epoll, netpoll.c), never at start-up, and closed in a
 *     forked child, which makes its own when it needs them;
 *   - high: moved (F_DUPFD_CLOEXEC) to the lowest free number from
 *     min(soft RLIMIT_NOFILE, 1024) less a margin of up to 32, so 992 with
 *     the usual limits; close-on-exec, so no exec'd program inherits them;
 *   - not open to the program: close of one fails with EBADF as for a
 *     number that is not open, so do fcntl, dup and dup2 from it;
 *     close_range and closefrom close the program's fds around them; dup2
 *     or dup3 onto one moves goshim's to another number first (ownfd_evict)
 *     and lets the program have it; listings of /proc/self/fd leave them
 *     out (shim/fd.c); syscall() with those calls does the same.
 *
 * Why that number. The soft limit alone would put them wherever it is, and
 * it is often 2^19 or 2^20 in containers and services: the kernel sizes a
 * process's fd table to its highest fd, and fork copies the table, so that
 * costs megabytes per process and per fork. Below 1024 the table stays
 * small. A fixed base that ignored the limit would fail under a program
 * that lowered it (CPython's tests set 29). The margin leaves the very top
 * free for programs and tools that take fds from the top down
 * (getdtablesize() - 1 as a private fd; valgrind keeps its own there).
 * Above 255 for usual limits: shells (bash's highest fd below 256) and
 * CPython's fd_status.py (fstat of 0..255) look there. The numbers lie
 * inside select()'s range, but the program never hands them to select.
 * A program with that many fds open gets its next ones two or three
 * numbers later than natively, the one thing it can notice.
 *
 * Moving a number another thread may be using at that moment. A system
 * call on one of these fds loads the number, then enters the kernel, which
 * from then on holds the file itself; between the two the number must not
 * change hands, or an epoll_ctl could reach an epoll instance of the
 * program's, or the wake-up write a pipe of its. So such a call is held
 * (ownfd_hold/ownfd_unhold: a counter, by phase, as in sleepable RCU) and
 * ownfd_evict, after publishing the new number, flips the phase and waits
 * for the holds of the old one to end, waking a netpoll blocked on the old
 * number (the wake-up eventfd is registered in the same epoll instance).
 *
 * Lost anyway. A system call goshim cannot see (an instruction of the
 * program's own, io_uring) may close one, and the number may then be
 * reused by the program. The netpoller notices at the next EBADF or EINVAL
 * on them, checks with a probe (netpoll.c: np_check), forgets the numbers
 * without closing them, since they may be the program's now, and makes
 * new ones; the registrations are made again.
 *
 * Lock order: own.lock, then a descriptor's lock (netpoll.c). Never taken
 * while holding (ownfd_hold): an evictor holds the lock while it waits for
 * the holds.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#include "sched.h"
#include "throw.h"

enum {
    OWNFD_CEIL = 1024,          /* the numbers go below this, whatever the limit */
    OWNFD_MARGIN = 32,          /* left free below the ceiling or the limit */
    EVICT_WAIT_NS = 1000000000, /* an evictor's wait for holds, at most */
};

static struct {
    struct runtime_lock lock; /* making, placing, moving, forgetting; close_range around them */
    int fd[OWNFD_N];          /* the numbers, -1 none; written under lock; atomic */
    uint32_t phase;           /* which holds[] a new hold counts in; atomic */
    uint32_t holds[2];        /* system calls in flight on the numbers, by phase; atomic */
    uint64_t moved, lost;     /* for GOSHIM_STATS; atomic */
    bool table_grown;         /* ownfd_grow_table did it in this process; atomic */
} own FORK_WRITTEN = {.fd = {-1, -1, -1}}; /* a fork child closes the parent's */

_Static_assert(OWNFD_N == 3, "own.fd's initializer lists every slot");

struct m *ownfd_lock(void)
{
    struct m *mp = acquirem(); /* a signal handler's fd calls go straight to the kernel */
    runtime_lock(&own.lock);
    return mp;
}

void ownfd_unlock(struct m *mp)
{
    runtime_unlock(&own.lock);
    releasem(mp);
}

int ownfd_get(int slot)
{
    return __atomic_load_n(&own.fd[slot], __ATOMIC_SEQ_CST);
}

FORK_TEXT void ownfd_set(int slot, int fd)
{
    /* The kernel gave fd out again: a slot that still names it lost its
     * file behind goshim's back. */
    for (int i = 0; fd >= 0 && i < OWNFD_N; i++)
        if (i != slot && ownfd_get(i) == fd) {
            __atomic_store_n(&own.fd[i], -1, __ATOMIC_SEQ_CST);
            __atomic_add_fetch(&own.lost, 1, __ATOMIC_RELAXED);
        }
    __atomic_store_n(&own.fd[slot], fd, __ATOMIC_SEQ_CST);
}

bool ownfd_is(int fd)
{
    if (fd < 0)
        return false;
    for (int i = 0; i < OWNFD_N; i++)
        if (__atomic_load_n(&own.fd[i], __ATOMIC_RELAXED) == fd)
            return true;
    return false;
}

int ownfd_hold(int slot, int *phase)
{
    for (;;) {
        uint32_t ph = __atomic_load_n(&own.phase, __ATOMIC_SEQ_CST) & 1;
        __atomic_add_fetch(&own.holds[ph], 1, __ATOMIC_SEQ_CST);
        /* Counted before the flip away from ph, or not at all: an evictor
         * that saw holds[ph] drain after its flip missed nobody. */
        if ((__atomic_load_n(&own.phase, __ATOMIC_SEQ_CST) & 1) == ph) {
            *phase = (int)ph;
            return __atomic_load_n(&own.fd[slot], __ATOMIC_SEQ_CST);
        }
        __atomic_sub_fetch(&own.holds[ph], 1, __ATOMIC_SEQ_CST);
    }
}

void ownfd_unhold(int phase)
{
    __atomic_sub_fetch(&own.holds[phase], 1, __ATOMIC_SEQ_CST);
}

/* The lowest number goshim's fds go to, from the soft limit now; -1 when
 * the limit leaves no room above the standard three. */
static int place_target(void)
{
    struct rlimit rl;
    if (rt_syscall6(SYS_prlimit64, 0, RLIMIT_NOFILE, 0, (long)&rl, 0, 0) != 0)
        return -1;
    rlim_t top = rl.rlim_cur < OWNFD_CEIL ? rl.rlim_cur : OWNFD_CEIL;
    rlim_t margin = top / 4 < OWNFD_MARGIN ? top / 4 : OWNFD_MARGIN;
    return top - margin > 3 ? (int)(top - margin) : -1;
}

int ownfd_dup_high(int fd)
{
    int target = place_target();
    if (target < 0)
        return -1;
    long nfd = rt_syscall(SYS_fcntl, fd, F_DUPFD_CLOEXEC, target);
    return nfd < 0 ? -1 : (int)nfd;
}

/*
 * The kernel grows an fd table that threads share only after an RCU grace period
 * (expand_fdtable), 9-16 ms on the hosts measured, and a table of one thread at once
 * (10 us): the first number goshim put up high in a threaded process (the netpoller's first
 * park, GOSHIM_STATS's copy of stderr) cost a server or a short program that much. So the
 * table is grown to hold goshim's numbers before the runtime makes its first thread (the
 * runtime's thread making calls this); fd tables never shrink. Through an eventfd of its
 * own, not a copy of one of the program's: closing a copy would drop the program's POSIX
 * record locks on that file.
 */
void ownfd_grow_table(void)
{
    if (__atomic_load_n(&own.table_grown, __ATOMIC_RELAXED))
        return;
    __atomic_store_n(&own.table_grown, true, __ATOMIC_RELAXED);
    int target = place_target();
    long fd = target < 0 ? -1 : rt_syscall(SYS_eventfd2, 0, EFD_CLOEXEC, 0);
    if (fd < 0)
        return;
    long nfd = rt_syscall(SYS_fcntl, fd, F_DUPFD_CLOEXEC, target + OWNFD_N - 1);
    if (nfd >= 0)
        rt_syscall(SYS_close, nfd, 0, 0);
    rt_syscall(SYS_close, fd, 0, 0);
}

int ownfd_place(int fd)
{
    int nfd = ownfd_dup_high(fd);
    if (nfd < 0 || nfd < fd) { /* no room up there (or it is there already): stay */
        if (nfd >= 0)
            rt_syscall(SYS_close, nfd, 0, 0);
        return fd;
    }
    rt_syscall(SYS_close, fd, 0, 0);
    return nfd;
}

/* Wait until no system call uses a number the slots no longer name: flip
 * the phase and wait for the old phase's holds, waking a netpoll that may
 * block on the old epoll number. own.lock held. */
static void wait_holds(void)
{
    uint32_t ph = __atomic_load_n(&own.phase, __ATOMIC_SEQ_CST) & 1;
    __atomic_store_n(&own.phase, ph ^ 1, __ATOMIC_SEQ_CST);
    int64_t start = nanotime();
    while (__atomic_load_n(&own.holds[ph], __ATOMIC_SEQ_CST) != 0) {
        netpoll_interrupt();
        /* A netpoll blocked on an instance whose number was lost behind
         * goshim's back (never woken by the eventfd made since) must not
         * hold the program's dup2 for ever: past a second the number is
         * given up; whoever still holds it is in the kernel by now. */
        if (nanotime() - start > EVICT_WAIT_NS)
            break;
        osusleep(20);
    }
}

bool ownfd_evict(int fd)
{
    if (!ownfd_is(fd))
        return false;
    struct m *mp = ownfd_lock();
    int slot = -1;
    for (int i = 0; i < OWNFD_N; i++)
        if (ownfd_get(i) == fd)
            slot = i;
    if (slot < 0) { /* moved meanwhile */
        ownfd_unlock(mp);
        return false;
    }
    int nfd = ownfd_dup_high(fd);
    ownfd_set(slot, nfd); /* -1 if there is no other number: made again when needed */
    wait_holds();
    if (nfd >= 0)
        netpoll_own_moved(slot, fd, nfd);
    __atomic_add_fetch(nfd >= 0 ? &own.moved : &own.lost, 1, __ATOMIC_RELAXED);
    ownfd_unlock(mp);
    return true;
}

/* own.lock held. No wait for the holds: a call still in flight on the
 * number reaches whatever is there now either way. */
void ownfd_forget(int slot)
{
    if (ownfd_get(slot) < 0)
        return;
    ownfd_set(slot, -1);
    __atomic_add_fetch(&own.lost, 1, __ATOMIC_RELAXED);
}

int ownfd_close_range(unsigned first, unsigned last, int (*gap)(unsigned, unsigned, void *),
                      void *arg)
{
    struct m *mp = ownfd_lock();
    int mine[OWNFD_N], n = 0;
    for (int i = 0; i < OWNFD_N; i++) {
        int fd = ownfd_get(i);
        if (fd >= 0 && (unsigned)fd >= first && (unsigned)fd <= last) {
            int j = n++;
            for (; j > 0 && mine[j - 1] > fd; j--) /* sorted */
                mine[j] = mine[j - 1];
            mine[j] = fd;
        }
    }
    int err = 0;
    unsigned from = first;
    for (int i = 0; i <= n && err == 0; i++) {
        bool tail = i == n;
        unsigned to = tail ? last : (unsigned)mine[i] - 1;
        if (tail ? from <= last : (unsigned)mine[i] > from)
            err = gap(from, to, arg);
        if (!tail)
            from = (unsigned)mine[i] + 1;
    }
    ownfd_unlock(mp);
    return err;
}

void ownfd_counts(uint64_t *moved, uint64_t *lost)
{
    *moved = __atomic_load_n(&own.moved, __ATOMIC_RELAXED);
    *lost = __atomic_load_n(&own.lost, __ATOMIC_RELAXED);
}

FORK_TEXT void ownfd_fork_child(void)
{
    FORK_SET(own.lock.key, 0); /* another thread of the parent may have held it */
    FORK_SET(own.phase, 0);
    FORK_SET(own.holds[0], 0);
    FORK_SET(own.holds[1], 0);
    /* The child's table is as large as the parent's highest open fd needs: large if one
     * of goshim's was open; else grown again before the child makes its first thread. */
    bool open = false;
    for (int i = 0; i < OWNFD_N; i++)
        open |= ownfd_get(i) >= 0;
    if (!open)
        FORK_SET(own.table_grown, false);
}
