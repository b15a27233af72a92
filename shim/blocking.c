/*
 * Blocking calls (list: blocking.def) are made between entersyscall and
 * exitsyscall (sched/syscall.c): a thread blocked in the kernel never stops
 * the Gs that would unblock it, because its P goes to another M (at once,
 * or when sysmon sees the call last). One body for all, by X-macro.
 * Socket, pipe and poll-style waits park on the netpoller instead
 * (shim/net.c, shim/poll.c). errno is the G's own (its TCB stays installed on this M
 * through the call).
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shim/io.h"
#include "shim/shim.h"
#include "shim/sigdeliver.h"

/*
 * The probes of the calls a signal may cut short as they start (shim/sigdeliver.h: the call
 * made without waiting; SHIM_WOULD_WAIT when it would wait). Only a call that would wait
 * fails with EINTR then, as the kernel's: a waitpid with a child to reap, a free flock, a
 * message in the queue go through.
 */
static long probe_pause(void)
{
    return SHIM_WOULD_WAIT;
}

static long probe_waitpid(pid_t pid, int *status, int options)
{
    if (options & WNOHANG)
        return REAL(waitpid)(pid, status, options);
    pid_t r = REAL(waitpid)(pid, status, options | WNOHANG);
    return r == 0 ? SHIM_WOULD_WAIT : r;
}

static long probe_wait(int *status)
{
    return probe_waitpid(-1, status, 0);
}

static long probe_wait4(pid_t pid, int *status, int options, struct rusage *ru)
{
    if (options & WNOHANG)
        return REAL(wait4)(pid, status, options, ru);
    pid_t r = REAL(wait4)(pid, status, options | WNOHANG, ru);
    return r == 0 ? SHIM_WOULD_WAIT : r;
}

static long probe_waitid(idtype_t type, id_t id, siginfo_t *info, int options)
{
    if (options & WNOHANG)
        return REAL(waitid)(type, id, info, options);
    if (info)
        info->si_pid = 0;
    int r = REAL(waitid)(type, id, info, options | WNOHANG);
    return r == 0 && info && info->si_pid == 0 ? SHIM_WOULD_WAIT : r;
}

static long probe_flock(int fd, int op)
{
    if (op & LOCK_NB)
        return REAL(flock)(fd, op);
    int r = REAL(flock)(fd, op | LOCK_NB);
    return r == -1 && errno == EWOULDBLOCK ? SHIM_WOULD_WAIT : r;
}

static long probe_msgrcv(int id, void *msg, size_t n, long type, int flags)
{
    if (flags & IPC_NOWAIT)
        return REAL(msgrcv)(id, msg, n, type, flags);
    ssize_t r = REAL(msgrcv)(id, msg, n, type, flags | IPC_NOWAIT);
    return r == -1 && errno == ENOMSG ? SHIM_WOULD_WAIT : r;
}

static long probe_msgsnd(int id, const void *msg, size_t n, int flags)
{
    if (flags & IPC_NOWAIT)
        return REAL(msgsnd)(id, msg, n, flags);
    int r = REAL(msgsnd)(id, msg, n, flags | IPC_NOWAIT);
    return r == -1 && errno == EAGAIN ? SHIM_WOULD_WAIT : r;
}

/* Each operation without waiting (a copy); an operation the program let wait that would
 * wait makes the whole call one that would (its EAGAIN and a wait are not told apart when
 * it mixed the two kinds: EINTR then). More operations than a copy holds: as waiting. */
static long probe_semop(int id, struct sembuf *ops, size_t n)
{
    struct sembuf copy[64];
    bool waits = false;
    if (n > sizeof copy / sizeof copy[0])
        return SHIM_WOULD_WAIT;
    for (size_t i = 0; i < n; i++) {
        copy[i] = ops[i];
        waits |= !(ops[i].sem_flg & IPC_NOWAIT);
        copy[i].sem_flg |= IPC_NOWAIT;
    }
    if (!waits)
        return REAL(semop)(id, ops, n);
    int r = REAL(semop)(id, copy, n);
    return r == -1 && errno == EAGAIN ? SHIM_WOULD_WAIT : r;
}

#define PROBE_SHIM_CALL_GOES_ON(name, args)      SHIM_WOULD_WAIT
#define PROBE_SHIM_CALL_RESTARTS(name, args)     probe_##name args
#define PROBE_SHIM_CALL_ENDS(name, args)         probe_##name args
#define CALL_SHIM_CALL_GOES_ON(name, args, raw)  REAL(name) args
#define CALL_SHIM_CALL_RESTARTS(name, args, raw) shim_checked_call raw
#define CALL_SHIM_CALL_ENDS(name, args, raw)     shim_checked_call raw

/* The calls made with entersyscall are file work (pread, pwrite, fsync...): they wait for
 * no other thread (goshim_active_file); the others wait for a child, a lock, a signal. */
#define WAITS_entersyscall              false
#define WAITS_entersyscallblock_waiting true

/* EINTR only for a handler of the program's (msgrcv, msgsnd, semop and pause, which the
 * kernel never restarts; none has a timeout), or without SA_RESTART (waits, flock). */
#define BLOCKING(ret, name, entry, on_signal, params, args, raw)                                   \
    static ret blocking_##name params                                                              \
    {                                                                                              \
        if (!goshim_active_as(WAITS_##entry))                                                      \
            return REAL(name) args;                                                                \
        return HANDOFF_WITH_NO_GOSHIM_EINTR(ret, entry, on_signal, PROBE_##on_signal(name, args),  \
                                            CALL_##on_signal(name, args, raw));                    \
    }                                                                                              \
    GOSHIM_EXPORT ret name params                                                                  \
    {                                                                                              \
        return blocking_##name args;                                                               \
    }
#include "shim/blocking.def"
#undef BLOCKING

/*
 * open and openat take their mode as a variadic argument (read only with
 * O_CREAT or O_TMPFILE). Opening a FIFO blocks until the other end is
 * opened, by another thread of this very program as often as not. What
 * they open is taken for a file without a look (netpoll_opened).
 */
#include <fcntl.h>
#include <stdarg.h>

static mode_t open_mode(int flags, va_list ap)
{
    return (flags & O_CREAT) || (flags & __O_TMPFILE) == __O_TMPFILE ? (mode_t)va_arg(ap, int) : 0;
}

#define OPEN_WRAPPER(name, params, args)                                                           \
    GOSHIM_EXPORT int name params                                                                  \
    {                                                                                              \
        va_list ap;                                                                                \
        va_start(ap, flags);                                                                       \
        mode_t mode = open_mode(flags, ap);                                                        \
        va_end(ap);                                                                                \
        int fd_ = goshim_active_file() ? HANDOFF(REAL(name) args) : REAL(name) args;               \
        if (fd_ >= 0 && goshim_on && !(flags & O_PATH))                                            \
            netpoll_opened(fd_, flags);                                                            \
        return fd_;                                                                                \
    }
OPEN_WRAPPER(open, (const char *path, int flags, ...), (path, flags, mode))
OPEN_WRAPPER(open64, (const char *path, int flags, ...), (path, flags, mode))
OPEN_WRAPPER(openat, (int dirfd, const char *path, int flags, ...), (dirfd, path, flags, mode))
OPEN_WRAPPER(openat64, (int dirfd, const char *path, int flags, ...), (dirfd, path, flags, mode))
#undef OPEN_WRAPPER

/*
 * syscall(): the same for raw system calls that may block (Rust's std,
 * hand-written locks and old code call them directly); private futexes are
 * emulated (below). Everything else goes straight through.
 */

/* 0: not blocking; 1: may block (entersyscall); 2: blocks as a rule. */
static int syscall_kind(long nr)
{
    switch (nr) {
    case SYS_read:
    case SYS_write:
    case SYS_readv:
    case SYS_writev:
    case SYS_pread64:
    case SYS_pwrite64:
    case SYS_preadv:
    case SYS_pwritev:
    case SYS_preadv2:
    case SYS_pwritev2:
    case SYS_open:
    case SYS_openat:
    case SYS_fsync:
    case SYS_fdatasync:
    case SYS_sync_file_range:
    case SYS_futex:
    case SYS_accept:
    case SYS_accept4:
    case SYS_connect:
    case SYS_recvfrom:
    case SYS_recvmsg:
    case SYS_sendto:
    case SYS_sendmsg:
        return 1;
    case SYS_wait4:
    case SYS_waitid:
    case SYS_nanosleep:
    case SYS_clock_nanosleep:
    case SYS_poll:
    case SYS_ppoll:
    case SYS_select:
    case SYS_pselect6:
    case SYS_epoll_wait:
    case SYS_epoll_pwait:
    case SYS_epoll_pwait2:
    case SYS_flock:
    case SYS_msgrcv:
    case SYS_msgsnd:
    case SYS_semop:
    case SYS_semtimedop:
    case SYS_rt_sigtimedwait:
    case SYS_rt_sigsuspend:
    case SYS_pause:
        return 2;
    default:
        return 0;
    }
}

/* The raw calls that have a wrapper above (blocking_NAME), made by it: its look at the
 * marks made while it entered the call (HANDOFF_WITH_NO_GOSHIM_EINTR); the same arguments
 * and results as the kernel's call. */
static bool blocking_wrapped(long nr, long a, long b, long c, long d, long e, long *r)
{
    switch (nr) {
    case SYS_pause:
        *r = blocking_pause();
        return true;
    case SYS_flock:
        *r = blocking_flock((int)a, (int)b);
        return true;
    case SYS_wait4:
        *r = blocking_wait4((pid_t)a, (int *)b, (int)c, (struct rusage *)d);
        return true;
    case SYS_waitid: /* glibc's passes no rusage */
        if (e != 0)
            return false;
        *r = blocking_waitid((idtype_t)a, (id_t)b, (siginfo_t *)c, (int)d);
        return true;
    case SYS_msgrcv:
        *r = blocking_msgrcv((int)a, (void *)b, (size_t)c, d, (int)e);
        return true;
    case SYS_msgsnd:
        *r = blocking_msgsnd((int)a, (const void *)b, (size_t)c, (int)d);
        return true;
    case SYS_semop:
        *r = blocking_semop((int)a, (struct sembuf *)b, (size_t)c);
        return true;
    default:
        return false;
    }
}

/*
 * Private futexes through syscall() (Rust's std, folly, hand-written
 * locks) run on the G-aware futex: a waiting G parks instead of holding its
 * M. WAIT and WAIT_BITSET (any bitset: a G waiter has none, so only
 * FUTEX_BITSET_MATCH_ANY is emulated), WAKE and WAKE_BITSET likewise,
 * REQUEUE and CMP_REQUEUE. A wake also wakes, in the kernel, waiters that
 * are not Gs (threads goshim does not manage wait there). Everything else
 * (shared futexes, PI, WAKE_OP) goes to the kernel. Returns FUTEX_KERNEL
 * when the call is not emulated.
 */
#include <errno.h>
#include <linux/futex.h>
#include <stdint.h>

#include "shim/sigroute.h"

enum { FUTEX_KERNEL = 1 };

static long futex_wait(uint32_t *addr, uint32_t val, int64_t deadline)
{
    for (;;) {
        switch (shim_wait_word(WAIT_FUTEX, addr, addr, val, deadline, 0)) {
        case SHIM_WAIT_READY:
            return 0;
        case SHIM_WAIT_CHANGED:
            return -EAGAIN;
        case SHIM_WAIT_TIMEDOUT:
            return -ETIMEDOUT;
        case SHIM_WAIT_INTERRUPTED: /* a handler without SA_RESTART ran */
            return -EINTR;
        default:
            if (__atomic_load_n(addr, __ATOMIC_SEQ_CST) != val)
                return 0; /* interrupted, but the value moved on: as a wake-up */
        }
    }
}

static long futex_wake(uint32_t *addr, int n)
{
    if (n <= 0)
        return 0;
    int woken = gfutex_wake(addr, n);
    if (woken < n) {
        long r = REAL(syscall)(SYS_futex, addr, FUTEX_WAKE_PRIVATE, n - woken, 0, 0, 0);
        if (r > 0)
            woken += (int)r;
    }
    return woken;
}

static long futex(uint32_t *addr, int op, uint32_t val, const struct timespec *ts, uint32_t *addr2,
                  uint32_t val3, bool on_g)
{
    int cmd = op & FUTEX_CMD_MASK;
    if (!(op & FUTEX_PRIVATE_FLAG))
        return FUTEX_KERNEL;
    switch (cmd) {
    case FUTEX_WAIT:
    case FUTEX_WAIT_BITSET: {
        if (!on_g || (cmd == FUTEX_WAIT_BITSET && val3 != FUTEX_BITSET_MATCH_ANY))
            return FUTEX_KERNEL;
        int64_t deadline = -1;
        if (ts && (ts->tv_sec < 0 || ts->tv_nsec < 0 || ts->tv_nsec >= 1000000000))
            return -EINVAL;
        if (ts && cmd == FUTEX_WAIT) {
            if (ts->tv_sec < 1000000000) /* else as good as forever */
                deadline = nanotime() + ts->tv_sec * 1000000000LL + ts->tv_nsec;
        } else if (ts) {
            clockid_t clk = op & FUTEX_CLOCK_REALTIME ? CLOCK_REALTIME : CLOCK_MONOTONIC;
            if (gfutex_deadline(clk, ts, &deadline) != 0)
                return -EINVAL;
        }
        return futex_wait(addr, val, deadline);
    }
    case FUTEX_WAKE:
    case FUTEX_WAKE_BITSET:
        if (cmd == FUTEX_WAKE_BITSET && val3 != FUTEX_BITSET_MATCH_ANY)
            return FUTEX_KERNEL;
        return futex_wake(addr, (int)val);
    case FUTEX_REQUEUE:
    case FUTEX_CMP_REQUEUE: {
        /* The timeout argument carries the requeue count. */
        uint32_t cmp = cmd == FUTEX_CMP_REQUEUE ? val3 : __atomic_load_n(addr, __ATOMIC_SEQ_CST);
        long r = gfutex_requeue(addr, cmp, (int)val, addr2, (int)(intptr_t)ts);
        return r;
    }
    default:
        return FUTEX_KERNEL;
    }
}

GOSHIM_EXPORT long syscall(long nr, ...)
{
    va_list ap;
    va_start(ap, nr);
    long a = va_arg(ap, long), b = va_arg(ap, long), c = va_arg(ap, long);
    long d = va_arg(ap, long), e = va_arg(ap, long), f = va_arg(ap, long);
    va_end(ap);
    bool on_g = goshim_active();
    long r;
    if (goshim_on && fd_syscall(nr, a, b, c, &r))
        return r;
    if (nr == SYS_futex && goshim_on) {
        r = futex((uint32_t *)a, (int)b, (uint32_t)c, (const struct timespec *)d, (uint32_t *)e,
                  (uint32_t)f, on_g);
        if (r != FUTEX_KERNEL) {
            if (r < 0) {
                errno = (int)-r;
                return -1;
            }
            return r;
        }
    }
    if (goshim_on && shim_tid_syscall(nr, a, b, c, &r)) {
        if (r < 0) {
            errno = (int)-r;
            return -1;
        }
        return r;
    }
    if (nr == SYS_pidfd_send_signal && goshim_on) /* to the own process: as kill() */
        return pidfd_send_signal((int)a, (int)b, (siginfo_t *)c, (unsigned int)d);
    int kind = on_g ? syscall_kind(nr) : 0;
    if (kind == 0)
        return REAL(syscall)(nr, a, b, c, d, e, f);
    if (kind == 1)
        return HANDOFF(REAL(syscall)(nr, a, b, c, d, e, f));
    if (blocking_wrapped(nr, a, b, c, d, e, &r))
        return r;
    return HANDOFF_WITH(entersyscallblock_waiting, REAL(syscall)(nr, a, b, c, d, e, f));
}
