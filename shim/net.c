/*
 * Network and pipe I/O (DESIGN rule 5): a G that would block on a socket,
 * pipe, FIFO, eventfd, timerfd, signalfd or epoll fd parks on the
 * netpoller (sched/netpoll.h) and its M runs other Gs.
 *
 * Each call is tried non-blocking for that call only: read and write as
 * preadv2/pwritev2 with RWF_NOWAIT (the same system call cost), the socket
 * calls with MSG_DONTWAIT. O_NONBLOCK is never set on the application's open
 * files, which stdio, children and other processes share, except on a
 * listening socket (accept has no per-call flag), where fcntl and ioctl hide
 * it. If the try says EAGAIN, the G waits for the fd's readiness sequence to
 * move, then tries again; a blocking write is completed in as many tries as
 * it takes, as the kernel would. Files, block and character devices (ttys)
 * and anything without RWF_NOWAIT hand the P off instead (shim/blocking.c).
 * An fd the application made non-blocking gets EAGAIN as natively.
 *
 * poll, select and epoll_wait check readiness without a timeout, then
 * subscribe the G to every fd involved (a user epoll fd is itself pollable)
 * and park until one of them may have changed or the timeout.
 *
 * Closing an fd (close, dup2/dup3 over it, fclose, pclose, closedir,
 * close_range, closefrom) wakes the Gs waiting on it with EBADF, as Go does
 * and unlike Linux (where such a reader would block on until data comes).
 *
 * A signal sent to a waiting G with pthread_kill interrupts the wait: the
 * handler runs on the G, then the call fails with EINTR unless the handler
 * has SA_RESTART and the call is one Linux restarts (poll, select and
 * epoll_wait never are). ppoll, pselect, epoll_pwait and epoll_pwait2 with
 * a signal mask park the same way, the mask being the thread's for the
 * call (shim_callmask in shim/signal.c: the router sees it, so a process
 * signal the mask lets through interrupts the call, its handler having run
 * before it returns, and the old mask is back afterwards). Rejected:
 * handing the P off and letting the kernel apply the mask (what this did
 * first): the router never knew the thread took the signal, and the M, not
 * the thread, held the wait.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "sched/netpoll.h"
#include "shim/shim.h"
#include "shim/thread.h"

/* glibc's fortified entry points (-D_FORTIFY_SOURCE), declared only inside
 * its bits/ headers. */
ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen);
ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags);
ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags, __SOCKADDR_ARG addr,
                       socklen_t *len);
int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen);

/* A G outside the runtime: not a signal handler that interrupted goshim's
 * own code (holding a descriptor or futex lock), whose calls go straight
 * to the kernel. */
static inline bool io_active(void)
{
    return goshim_active() && !m_in_runtime();
}

/* ---- the I/O loop --------------------------------------------------------------- */

enum op { OP_RW, OP_RECVMSG, OP_SENDMSG, OP_ACCEPT };

struct io {
    int fd;
    int mode;          /* PD_READ / PD_WRITE */
    int op;            /* enum op */
    int flags;         /* socket flags (MSG_*), accept4 flags */
    struct msghdr msg; /* the buffers: msg_iov always, the rest for sockets */
    struct iovec one;
    struct iovec *owned;   /* an advanced copy of the caller's iovec, malloc'd */
    struct sockaddr *addr; /* accept */
    socklen_t *alen;
    size_t want;
    bool all; /* complete the whole length (blocking write, MSG_WAITALL) */
};

static size_t iov_total(const struct iovec *iov, int n)
{
    size_t t = 0;
    for (int i = 0; i < n; i++)
        t += iov[i].iov_len;
    return t;
}

/* One non-blocking try: bytes (or an fd) or -errno. */
static long io_try(struct io *io)
{
    struct msghdr *m = &io->msg;
    switch (io->op) {
    case OP_RW:
        return rt_syscall6(io->mode == PD_READ ? SYS_preadv2 : SYS_pwritev2, io->fd,
                           (long)m->msg_iov, (long)m->msg_iovlen, -1, -1, RWF_NOWAIT);
    case OP_RECVMSG:
        return rt_syscall(SYS_recvmsg, io->fd, m, io->flags | MSG_DONTWAIT);
    case OP_SENDMSG:
        return rt_syscall(SYS_sendmsg, io->fd, m, io->flags | MSG_DONTWAIT);
    case OP_ACCEPT:
        return rt_syscall6(SYS_accept4, io->fd, (long)io->addr, (long)io->alen, io->flags, 0, 0);
    }
    return -EINVAL;
}

/* Skip n transferred bytes of the buffers; false if out of memory. */
static bool io_advance(struct io *io, size_t n)
{
    struct msghdr *m = &io->msg;
    if (!io->owned && m->msg_iov != &io->one) {
        io->owned = malloc(m->msg_iovlen * sizeof *io->owned);
        if (!io->owned)
            return false;
        memcpy(io->owned, m->msg_iov, m->msg_iovlen * sizeof *io->owned);
        m->msg_iov = io->owned;
    }
    while (n > 0 && m->msg_iovlen > 0) {
        if (n < m->msg_iov->iov_len) {
            m->msg_iov->iov_base = (char *)m->msg_iov->iov_base + n;
            m->msg_iov->iov_len -= n;
            break;
        }
        n -= m->msg_iov->iov_len;
        m->msg_iov++;
        m->msg_iovlen--;
    }
    m->msg_control = NULL; /* ancillary data goes with the first part only */
    m->msg_controllen = 0;
    return true;
}

/* An accepted socket inherits its listener's kind and timeouts (Linux
 * copies the socket options), not its O_NONBLOCK. */
static void accepted(struct pdesc *lpd, int fd, int flags)
{
    netpoll_known(fd, PD_NOWAIT, lpd->stream, true, (flags & SOCK_NONBLOCK) != 0);
    struct pdesc *pd = netpoll_lookup(fd);
    if (pd) {
        pd->timeo[PD_READ] = lpd->timeo[PD_READ];
        pd->timeo[PD_WRITE] = lpd->timeo[PD_WRITE];
    }
}

/* Put O_NONBLOCK on a listening socket for good (see the top). */
static void force_nonblock(struct pdesc *pd)
{
    runtime_lock(&pd->lock);
    if (!pd->forced_nb && !pd->user_nb) {
        long fl = rt_syscall(SYS_fcntl, pd->fd, F_GETFL, 0);
        if (fl >= 0 && rt_syscall(SYS_fcntl, pd->fd, F_SETFL, fl | O_NONBLOCK) == 0)
            pd->forced_nb = 1;
    }
    runtime_unlock(&pd->lock);
}

enum { IO_HANDOFF = LONG_MIN }; /* not for the netpoller: make the call with the P handed off */

/*
 * Run io to completion, parking on EAGAIN: the byte count (or fd), -errno,
 * or IO_HANDOFF when the fd is not pollable (nothing was transferred).
 */
static long io_run(struct io *io)
{
    struct pdesc *pd = netpoll_fd(io->fd);
    if (!pd)
        return io_try(io); /* not open: the kernel says EBADF */
    if (pd->kind != PD_NOWAIT)
        return IO_HANDOFF;
    if (io->op == OP_ACCEPT && !pd->forced_nb && !pd->user_nb)
        force_nonblock(pd);
    shim_testcancel();
    chaos_point();
    shim_deliver_signals(); /* a signal sent before the call: handled, the call goes on */
    uint32_t gen = __atomic_load_n(&pd->gen, __ATOMIC_ACQUIRE);
    int64_t timeo = pd->timeo[io->mode];
    int64_t deadline = timeo > 0 ? nanotime() + timeo : -1;
    bool parked = false;
    uint32_t direct0 = 0;
    size_t done = 0;
    long res;
    for (;;) {
        /* direct before seq: an own write bumps direct, then seq. */
        uint32_t direct = __atomic_load_n(&pd->direct, __ATOMIC_SEQ_CST);
        uint32_t seq = __atomic_load_n(&pd->seq[io->mode], __ATOMIC_SEQ_CST);
        /* Known empty (no system call to learn it). Never after a wake-up:
         * it may come from a write goshim did not see. */
        bool empty = !parked && io->mode == PD_READ && !pd->user_nb && netpoll_known_empty(pd, seq);
        if (!empty) {
            struct pdesc *peer = io->mode == PD_WRITE ? netpoll_write_begin(pd) : NULL;
            long n = io_try(io);
            netpoll_write_end(peer, n);
            if (n == -EOPNOTSUPP && done == 0 && io->op == OP_RW) {
                pd->kind = PD_BLOCKING;
                return IO_HANDOFF;
            }
            if (n >= 0) {
                if (io->op == OP_ACCEPT) {
                    accepted(pd, (int)n, io->flags);
                    return n;
                }
                if (io->mode == PD_READ) {
                    if (pd->stream && (size_t)n < io->want - done)
                        __atomic_store_n(&pd->drained, seq + 1, __ATOMIC_RELAXED);
                    if (parked && n > 0)
                        netpoll_read_after_park(pd, direct0);
                    if (n > 0)
                        netpoll_read_done(pd, n);
                }
                done += (size_t)n;
                /* Stream sockets and pipes: a blocking write (or MSG_WAITALL
                 * read) goes on until all is done; not past EOF. */
                if (!io->all || !pd->stream || done >= io->want || n == 0 || pd->user_nb)
                    return (long)done;
                if (!io_advance(io, (size_t)n))
                    return (long)done;
                continue;
            }
            if (n != -EAGAIN) {
                res = n;
                break;
            }
            if (pd->user_nb) { /* made non-blocking meanwhile: as natively */
                res = n;
                break;
            }
            if (io->mode == PD_READ && pd->stream)
                __atomic_store_n(&pd->drained, seq + 1, __ATOMIC_RELAXED);
        }
        if (!netpoll_arm(pd)) {
            if (done)
                return (long)done;
            pd->kind = PD_BLOCKING;
            return IO_HANDOFF;
        }
        direct0 = direct;
        parked = true;
        sched_set_wait(WAIT_IO, (void *)(intptr_t)io->fd);
        int err = netpoll_wait(pd, io->mode, seq, gen, deadline);
        sched_set_wait(WAIT_NONE, NULL);
        if (err == EBADF) {
            res = -EBADF;
            break;
        }
        if (err == ETIMEDOUT) {
            res = -EAGAIN; /* SO_RCVTIMEO / SO_SNDTIMEO */
            break;
        }
        if (err == EINTR) {
            shim_testcancel();
            if (shim_deliver_signals() == 2) { /* else SA_RESTART, or spurious: go on */
                res = -EINTR;
                break;
            }
        }
    }
    return done ? (long)done : res;
}

static void io_free(struct io *io)
{
    free(io->owned);
}

/* The result of io_run as the C library returns it. */
static long io_result(long r)
{
    if (r < 0) {
        errno = (int)-r;
        return -1;
    }
    return r;
}

static void io_init(struct io *io, int fd, int mode, int op, const struct iovec *iov, int iovcnt)
{
    memset(io, 0, sizeof *io);
    io->fd = fd;
    io->mode = mode;
    io->op = op;
    io->msg.msg_iov = (struct iovec *)iov;
    io->msg.msg_iovlen = (size_t)(iovcnt < 0 ? 0 : iovcnt);
    io->want = iov_total(iov, iovcnt < 0 ? 0 : iovcnt);
}

static void io_init_buf(struct io *io, int fd, int mode, int op, const void *buf, size_t n)
{
    io_init(io, fd, mode, op, NULL, 0);
    io->one = (struct iovec){(void *)buf, n};
    io->msg.msg_iov = &io->one;
    io->msg.msg_iovlen = 1;
    io->want = n;
}

/* ---- read and write ---------------------------------------------------------------- */

GOSHIM_EXPORT ssize_t read(int fd, void *buf, size_t n)
{
    if (!io_active())
        return REAL(read)(fd, buf, n);
    struct io io;
    io_init_buf(&io, fd, PD_READ, OP_RW, buf, n);
    long r = io_run(&io);
    if (r == IO_HANDOFF)
        return HANDOFF(REAL(read)(fd, buf, n));
    return io_result(r);
}

GOSHIM_EXPORT ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen)
{
    if (n > buflen || !io_active())
        return REAL(__read_chk)(fd, buf, n, buflen);
    return read(fd, buf, n);
}

GOSHIM_EXPORT ssize_t readv(int fd, const struct iovec *iov, int cnt)
{
    if (!io_active() || cnt < 0 || cnt > IOV_MAX)
        return REAL(readv)(fd, iov, cnt);
    struct io io;
    io_init(&io, fd, PD_READ, OP_RW, iov, cnt);
    long r = io_run(&io);
    if (r == IO_HANDOFF)
        return HANDOFF(REAL(readv)(fd, iov, cnt));
    return io_result(r);
}

GOSHIM_EXPORT ssize_t write(int fd, const void *buf, size_t n)
{
    if (!io_active())
        return REAL(write)(fd, buf, n);
    struct io io;
    io_init_buf(&io, fd, PD_WRITE, OP_RW, buf, n);
    io.all = true;
    long r = io_run(&io);
    if (r == IO_HANDOFF)
        return HANDOFF(REAL(write)(fd, buf, n));
    return io_result(r);
}

GOSHIM_EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
    if (!io_active() || cnt < 0 || cnt > IOV_MAX)
        return REAL(writev)(fd, iov, cnt);
    struct io io;
    io_init(&io, fd, PD_WRITE, OP_RW, iov, cnt);
    io.all = true;
    long r = io_run(&io);
    io_free(&io);
    if (r == IO_HANDOFF)
        return HANDOFF(REAL(writev)(fd, iov, cnt));
    return io_result(r);
}

/* ---- sockets ------------------------------------------------------------------------- */

static long sock_io(struct io *io, int flags)
{
    io->flags = flags & ~MSG_DONTWAIT;
    io->all = io->mode == PD_WRITE || (flags & MSG_WAITALL);
    if (flags & MSG_DONTWAIT) /* the caller asked for a non-blocking call */
        return io_try(io);
    long r = io_run(io);
    io_free(io);
    return r;
}

/* recv and send are recvfrom and sendto without an address (as in the kernel). */
GOSHIM_EXPORT ssize_t recv(int fd, void *buf, size_t n, int flags)
{
    return recvfrom(fd, buf, n, flags, NULL, NULL);
}

GOSHIM_EXPORT ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags)
{
    if (n > buflen || !io_active())
        return REAL(__recv_chk)(fd, buf, n, buflen, flags);
    return recv(fd, buf, n, flags);
}

GOSHIM_EXPORT ssize_t recvfrom(int fd, void *buf, size_t n, int flags, __SOCKADDR_ARG addr,
                               socklen_t *len)
{
    if (!io_active() || (addr.__sockaddr__ && !len))
        return REAL(recvfrom)(fd, buf, n, flags, addr, len);
    struct io io;
    io_init_buf(&io, fd, PD_READ, OP_RECVMSG, buf, n);
    io.msg.msg_name = addr.__sockaddr__;
    io.msg.msg_namelen = addr.__sockaddr__ ? *len : 0;
    long r = sock_io(&io, flags);
    if (r == IO_HANDOFF)
        return HANDOFF(REAL(recvfrom)(fd, buf, n, flags, addr, len));
    if (r >= 0 && addr.__sockaddr__)
        *len = io.msg.msg_namelen;
    return io_result(r);
}

GOSHIM_EXPORT ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags,
                                     __SOCKADDR_ARG addr, socklen_t *len)
{
    if (n > buflen || !io_active())
        return REAL(__recvfrom_chk)(fd, buf, n, buflen, flags, addr, len);
    return recvfrom(fd, buf, n, flags, addr, len);
}

GOSHIM_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
    /* MSG_WAITALL would need the caller's msghdr advanced: hand off. */
    if (!io_active() || (flags & MSG_WAITALL) || msg->msg_iovlen > IOV_MAX)
        return io_active() ? HANDOFF(REAL(recvmsg)(fd, msg, flags)) : REAL(recvmsg)(fd, msg, flags);
    struct io io;
    io_init(&io, fd, PD_READ, OP_RECVMSG, msg->msg_iov, (int)msg->msg_iovlen);
    io.msg = *msg;
    long r = sock_io(&io, flags);
    if (r == IO_HANDOFF)
        return HANDOFF(REAL(recvmsg)(fd, msg, flags));
    if (r >= 0) {
        msg->msg_namelen = io.msg.msg_namelen;
        msg->msg_controllen = io.msg.msg_controllen;
        msg->msg_flags = io.msg.msg_flags;
    }
    return io_result(r);
}

GOSHIM_EXPORT ssize_t send(int fd, const void *buf, size_t n, int flags)
{
    return sendto(fd, buf, n, flags, NULL, 0);
}

GOSHIM_EXPORT ssize_t sendto(int fd, const void *buf, size_t n, int flags,
                             __CONST_SOCKADDR_ARG addr, socklen_t len)
{
    if (!io_active())
        return REAL(sendto)(fd, buf, n, flags, addr, len);
    struct io io;
    io_init_buf(&io, fd, PD_WRITE, OP_SENDMSG, buf, n);
    io.msg.msg_name = (void *)addr.__sockaddr__;
    io.msg.msg_namelen = addr.__sockaddr__ ? len : 0;
    long r = sock_io(&io, flags);
    if (r == IO_HANDOFF)
        return HANDOFF(REAL(sendto)(fd, buf, n, flags, addr, len));
    return io_result(r);
}

GOSHIM_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
    if (!io_active() || msg->msg_iovlen > IOV_MAX)
        return REAL(sendmsg)(fd, msg, flags);
    struct io io;
    io_init(&io, fd, PD_WRITE, OP_SENDMSG, msg->msg_iov, (int)msg->msg_iovlen);
    io.msg = *msg;
    long r = sock_io(&io, flags);
    if (r == IO_HANDOFF)
        return HANDOFF(REAL(sendmsg)(fd, msg, flags));
    return io_result(r);
}

static int do_accept(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
    struct io io;
    io_init(&io, fd, PD_READ, OP_ACCEPT, NULL, 0);
    io.addr = addr;
    io.alen = len;
    io.flags = flags;
    long r = io_run(&io);
    if (r == IO_HANDOFF)
        return HANDOFF(REAL(accept4)(fd, addr, len, flags));
    return (int)io_result(r);
}

GOSHIM_EXPORT int accept(int fd, __SOCKADDR_ARG addr, socklen_t *len)
{
    if (!io_active())
        return REAL(accept)(fd, addr, len);
    return do_accept(fd, addr.__sockaddr__, len, 0);
}

GOSHIM_EXPORT int accept4(int fd, __SOCKADDR_ARG addr, socklen_t *len, int flags)
{
    if (!io_active())
        return REAL(accept4)(fd, addr, len, flags);
    return do_accept(fd, addr.__sockaddr__, len, flags);
}

/*
 * connect: made non-blocking for the call (O_NONBLOCK set and restored:
 * connect has no per-call flag); EINPROGRESS waits for writability, then
 * SO_ERROR says how it went. SO_SNDTIMEO bounds the wait (EINPROGRESS).
 */
GOSHIM_EXPORT int connect(int fd, __CONST_SOCKADDR_ARG addr, socklen_t len)
{
    struct pdesc *pd;
    if (!io_active() || !(pd = netpoll_fd(fd)) || !pd->socket || pd->user_nb ||
        pd->kind != PD_NOWAIT)
        return io_active() ? HANDOFF(REAL(connect)(fd, addr, len)) : REAL(connect)(fd, addr, len);
    shim_testcancel();
    long fl = rt_syscall(SYS_fcntl, fd, F_GETFL, 0);
    if (fl < 0 || rt_syscall(SYS_fcntl, fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return HANDOFF(REAL(connect)(fd, addr, len));
    uint32_t gen = __atomic_load_n(&pd->gen, __ATOMIC_ACQUIRE);
    uint32_t seq = __atomic_load_n(&pd->seq[PD_WRITE], __ATOMIC_SEQ_CST);
    long r = rt_syscall(SYS_connect, fd, addr.__sockaddr__, len);
    if (!pd->forced_nb)
        rt_syscall(SYS_fcntl, fd, F_SETFL, fl);
    if (r != -EINPROGRESS)
        return (int)io_result(r);
    if (!netpoll_arm(pd))
        return (int)io_result(r);
    int64_t deadline = pd->timeo[PD_WRITE] > 0 ? nanotime() + pd->timeo[PD_WRITE] : -1;
    for (;;) {
        struct pollfd p = {fd, POLLOUT, 0};
        long pr = rt_syscall6(SYS_ppoll, (long)&p, 1, (long)&(struct timespec){0, 0}, 0, 8, 0);
        if (pr > 0) {
            int soerr = 0;
            socklen_t sl = sizeof soerr;
            long gr =
                rt_syscall6(SYS_getsockopt, fd, SOL_SOCKET, SO_ERROR, (long)&soerr, (long)&sl, 0);
            return (int)io_result(gr < 0 ? gr : soerr ? -soerr : 0);
        }
        int err = netpoll_wait(pd, PD_WRITE, seq, gen, deadline);
        if (err == EBADF)
            return (int)io_result(-EBADF);
        if (err == ETIMEDOUT)
            return (int)io_result(-EINPROGRESS);
        if (err == EINTR) {
            shim_testcancel();
            if (shim_deliver_signals() == 2)
                return (int)io_result(-EINTR); /* as Linux: the connection goes on */
        }
        seq = __atomic_load_n(&pd->seq[PD_WRITE], __ATOMIC_SEQ_CST);
    }
}

/* ---- poll, select, epoll_wait ------------------------------------------------------- */

enum { SUBS_ON_STACK = 16 };

struct waitset {
    struct psub stack[SUBS_ON_STACK];
    struct psub *subs;
    int n;
    uint32_t word;
};

/* Subscribe to fd's readiness; fds that cannot be registered are always
 * ready (regular files) or invalid, which the zero-timeout check reports. */
static void ws_add(struct waitset *ws, int fd, int cap)
{
    struct pdesc *pd = netpoll_fd(fd);
    if (!pd || ws->n >= cap || !netpoll_arm(pd))
        return;
    netpoll_subscribe(pd, &ws->subs[ws->n++], &ws->word);
}

static bool ws_init(struct waitset *ws, int cap)
{
    ws->n = 0;
    ws->word = 0;
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
 * Park until check() != 0 (its result: ready count or -errno), or until the
 * deadline (returns 0). check is called once per possible change.
 */
static long ws_wait(struct waitset *ws, long (*check)(void *), void *arg, int64_t deadline)
{
    shim_deliver_signals();
    for (;;) {
        uint32_t w = __atomic_load_n(&ws->word, __ATOMIC_SEQ_CST);
        long r = check(arg);
        if (r == -EINTR) /* a signal during the zero-timeout check: goshim's own, most likely */
            r = check(arg);
        if (r != 0)
            return r;
        sched_set_wait(WAIT_IO, NULL);
        int err = gfutex_wait(&ws->word, w, deadline);
        sched_set_wait(WAIT_NONE, NULL);
        if (err == ETIMEDOUT)
            return 0;
        if (err == EINTR) {
            shim_testcancel();
            if (shim_deliver_signals() > 0) /* never restarted, as natively */
                return -EINTR;
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
    long r = poll_check(&a);
    if (r == -EINTR)
        r = poll_check(&a);
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
    return do_poll(fds, n, timeout == 0 ? 0 : ms_deadline(timeout));
}

GOSHIM_EXPORT int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen)
{
    if (!io_active() || fdslen / sizeof *fds < n)
        return REAL(__poll_chk)(fds, n, timeout, fdslen);
    return poll(fds, n, timeout);
}

GOSHIM_EXPORT int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts,
                        const sigset_t *mask)
{
    if (!io_active())
        return REAL(ppoll)(fds, n, ts, mask);
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
    long res = select_check(&a);
    if (res == -EINTR)
        res = select_check(&a);
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
    long r = epoll_check(&a);
    if (r == -EINTR)
        r = epoll_check(&a);
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
    return do_epoll_wait(epfd, ev, max, epoll_deadline(timeout));
}

GOSHIM_EXPORT int epoll_pwait(int epfd, struct epoll_event *ev, int max, int timeout,
                              const sigset_t *mask)
{
    if (!io_active())
        return REAL(epoll_pwait)(epfd, ev, max, timeout, mask);
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

/* ---- creating, duplicating and closing fds ------------------------------------------- */

GOSHIM_EXPORT int socket(int domain, int type, int protocol)
{
    int fd = REAL(socket)(domain, type, protocol);
    if (fd >= 0 && goshim_on)
        netpoll_known(fd, PD_NOWAIT, (type & 0xf) == SOCK_STREAM, true,
                      (type & SOCK_NONBLOCK) != 0);
    return fd;
}

GOSHIM_EXPORT int socketpair(int domain, int type, int protocol, int sv[2])
{
    int rc = REAL(socketpair)(domain, type, protocol, sv);
    if (rc == 0 && goshim_on) {
        bool stream = (type & 0xf) == SOCK_STREAM, nb = (type & SOCK_NONBLOCK) != 0;
        netpoll_known(sv[0], PD_NOWAIT, stream, true, nb);
        netpoll_known(sv[1], PD_NOWAIT, stream, true, nb);
        netpoll_pair(sv[0], sv[1]);
    }
    return rc;
}

static void pipe_made(int fds[2], int flags)
{
    if (!goshim_on)
        return;
    bool nb = (flags & O_NONBLOCK) != 0, packet = (flags & O_DIRECT) != 0;
    netpoll_known(fds[0], PD_NOWAIT, !packet, false, nb);
    netpoll_known(fds[1], PD_NOWAIT, !packet, false, nb);
    netpoll_pair(fds[0], fds[1]);
}

GOSHIM_EXPORT int pipe(int fds[2])
{
    int rc = REAL(pipe)(fds);
    if (rc == 0)
        pipe_made(fds, 0);
    return rc;
}

GOSHIM_EXPORT int pipe2(int fds[2], int flags)
{
    int rc = REAL(pipe2)(fds, flags);
    if (rc == 0)
        pipe_made(fds, flags);
    return rc;
}

GOSHIM_EXPORT int close(int fd)
{
    if (goshim_on)
        netpoll_close(fd);
    return REAL(close)(fd);
}

GOSHIM_EXPORT int dup(int fd)
{
    int nfd = REAL(dup)(fd);
    if (nfd >= 0 && goshim_on)
        netpoll_dup(fd, nfd);
    return nfd;
}

GOSHIM_EXPORT int dup2(int fd, int nfd)
{
    if (goshim_on && fd != nfd && fcntl(fd, F_GETFD) >= 0)
        netpoll_close(nfd);
    int r = REAL(dup2)(fd, nfd);
    if (r >= 0 && goshim_on && fd != nfd)
        netpoll_dup(fd, r);
    return r;
}

GOSHIM_EXPORT int dup3(int fd, int nfd, int flags)
{
    if (goshim_on && fd != nfd && fcntl(fd, F_GETFD) >= 0)
        netpoll_close(nfd);
    int r = REAL(dup3)(fd, nfd, flags);
    if (r >= 0 && goshim_on)
        netpoll_dup(fd, r);
    return r;
}

GOSHIM_EXPORT int fclose(FILE *fp)
{
    if (goshim_on && fp) {
        int fd = fileno(fp);
        if (fd >= 0)
            netpoll_close(fd);
    }
    return REAL(fclose)(fp);
}

GOSHIM_EXPORT int pclose(FILE *fp)
{
    if (goshim_on && fp) {
        int fd = fileno(fp);
        if (fd >= 0)
            netpoll_close(fd);
    }
    if (io_active())
        return HANDOFF_WITH(entersyscallblock, REAL(pclose)(fp)); /* waits for the child */
    return REAL(pclose)(fp);
}

GOSHIM_EXPORT int closedir(DIR *d)
{
    if (goshim_on) {
        int fd = dirfd(d);
        if (fd >= 0)
            netpoll_close(fd);
    }
    return REAL(closedir)(d);
}

static void close_fds(unsigned first, unsigned last)
{
    for (unsigned fd = first; fd <= last && fd < (unsigned)INT_MAX; fd++) {
        struct pdesc *pd = netpoll_lookup((int)fd);
        if (!pd) {
            fd |= 1023; /* no chunk here: skip it */
            continue;
        }
        if (__atomic_load_n(&pd->init, __ATOMIC_ACQUIRE))
            netpoll_close((int)fd);
    }
}

GOSHIM_EXPORT int close_range(unsigned first, unsigned last, int flags)
{
    if (goshim_on && !(flags & CLOSE_RANGE_CLOEXEC) && first <= last)
        close_fds(first, last);
    return REAL(close_range)(first, last, flags);
}

GOSHIM_EXPORT void closefrom(int lowfd)
{
    if (goshim_on && lowfd >= 0)
        close_fds((unsigned)lowfd, UINT_MAX);
    REAL(closefrom)(lowfd);
}

/* ---- fcntl, ioctl, setsockopt: keep the descriptor's view current ------------------- */

static int do_fcntl(int (*real)(int, int, ...), int fd, int cmd, unsigned long arg)
{
    struct pdesc *pd;
    switch (cmd) {
    case F_GETFL: {
        int r = real(fd, cmd);
        pd = goshim_on ? netpoll_lookup(fd) : NULL;
        if (r >= 0 && pd && __atomic_load_n(&pd->init, __ATOMIC_ACQUIRE) && pd->forced_nb &&
            !pd->user_nb)
            r &= ~O_NONBLOCK; /* ours, not the application's */
        return r;
    }
    case F_SETFL:
        pd = goshim_on ? netpoll_fd(fd) : NULL;
        if (pd) {
            pd->user_nb = (arg & O_NONBLOCK) != 0;
            if (pd->forced_nb)
                arg |= O_NONBLOCK;
        }
        return real(fd, cmd, arg);
    case F_DUPFD:
    case F_DUPFD_CLOEXEC: {
        int r = real(fd, cmd, arg);
        if (r >= 0 && goshim_on)
            netpoll_dup(fd, r);
        return r;
    }
    case F_SETLKW:
    case F_OFD_SETLKW:
        if (io_active())
            return HANDOFF_WITH(entersyscallblock, real(fd, cmd, arg));
        return real(fd, cmd, arg);
    default:
        return real(fd, cmd, arg);
    }
}

GOSHIM_EXPORT int fcntl(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    unsigned long arg = va_arg(ap, unsigned long); /* every argument is a long or a pointer */
    va_end(ap);
    return do_fcntl(REAL(fcntl), fd, cmd, arg);
}

GOSHIM_EXPORT int fcntl64(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    unsigned long arg = va_arg(ap, unsigned long);
    va_end(ap);
    return do_fcntl(REAL(fcntl64), fd, cmd, arg);
}

GOSHIM_EXPORT int ioctl(int fd, unsigned long req, ...)
{
    va_list ap;
    va_start(ap, req);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    struct pdesc *pd;
    if (req == FIONBIO && goshim_on && arg && (pd = netpoll_fd(fd))) {
        pd->user_nb = *(int *)arg != 0;
        if (pd->forced_nb)
            return 0; /* it stays non-blocking underneath */
    }
    return REAL(ioctl)(fd, req, arg);
}

GOSHIM_EXPORT int setsockopt(int fd, int level, int opt, const void *val, socklen_t len)
{
    int r = REAL(setsockopt)(fd, level, opt, val, len);
    struct pdesc *pd;
    if (r == 0 && goshim_on && level == SOL_SOCKET && len >= sizeof(struct timeval) &&
        (opt == SO_RCVTIMEO_OLD || opt == SO_SNDTIMEO_OLD || opt == SO_RCVTIMEO_NEW ||
         opt == SO_SNDTIMEO_NEW) &&
        (pd = netpoll_fd(fd))) {
        /* x86-64: struct timeval and __kernel_sock_timeval have one layout. */
        const struct timeval *tv = val;
        int64_t ns = (int64_t)tv->tv_sec * 1000000000 + (int64_t)tv->tv_usec * 1000;
        bool rcv = opt == SO_RCVTIMEO_OLD || opt == SO_RCVTIMEO_NEW;
        pd->timeo[rcv ? PD_READ : PD_WRITE] = ns > 0 ? ns : 0;
    }
    return r;
}
