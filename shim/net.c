/*
 * Network and pipe I/O (docs/design.md, rule 5): a G
 * that would block on a socket, pipe, FIFO, eventfd, timerfd, signalfd or
 * epoll fd parks on the netpoller (sched/netpoll.h) and its M runs other
 * Gs.
 *
 * Each call is tried non-blocking for that call only: read and write as
 * preadv2/pwritev2 with RWF_NOWAIT (the same system call cost), the socket
 * calls with MSG_DONTWAIT. O_NONBLOCK is never set on the application's open
 * files, which stdio, children and other processes share, except on a
 * listening socket (accept has no per-call flag), where fcntl and ioctl hide
 * it (shim/fd.c). If the try says EAGAIN, the G waits for the fd's readiness
 * sequence to move, then tries again; a blocking write is completed in as
 * many tries as it takes, as the kernel would. Files, block and character
 * devices (ttys) and anything without RWF_NOWAIT hand the P off instead
 * (shim/blocking.c). An fd the application made non-blocking gets EAGAIN as
 * natively. The readiness protocol (what to try, when to park, what a
 * wake-up means) is the netpoller's (netpoll_reset ... netpoll_waitcall):
 * this file knows the calls, not the descriptors.
 *
 * The wrappers come from one table, shim/io.def: each line says how the
 * call's arguments become a struct io (the buffers, the socket flags and
 * address), and what goes back to the caller; one body (IO below) runs it.
 *
 * A signal sent to a waiting G with pthread_kill interrupts the wait: the
 * handler runs on the G, then the call fails with EINTR unless the handler
 * has SA_RESTART (shim_wait). poll, select and epoll_wait: shim/poll.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "shim/cancel.h"
#include "shim/io.h"
#include "shim/shim.h"
#include "shim/sigdeliver.h"

/* glibc's fortified entry points (-D_FORTIFY_SOURCE), declared only inside
 * its bits/ headers. */
ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen);
ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags);
ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags, __SOCKADDR_ARG addr,
                       socklen_t *len);
int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen);

/* ---- one call: struct io ------------------------------------------------------------ */

enum op { OP_RW, OP_RECVMSG, OP_SENDMSG, OP_ACCEPT };

struct io {
    int fd;
    int mode;          /* PD_READ / PD_WRITE */
    int op;            /* enum op */
    int flags;         /* socket flags (MSG_*, MSG_DONTWAIT taken out), accept4 flags */
    struct msghdr msg; /* the buffers: msg_iov always, the rest for sockets */
    struct iovec one;
    struct iovec *owned;   /* an advanced copy of the caller's iovec, malloc'd */
    struct sockaddr *addr; /* accept */
    socklen_t *alen;
    size_t want;
    size_t done;   /* transferred so far */
    bool all;      /* complete the whole length (blocking write, MSG_WAITALL) */
    bool dontwait; /* MSG_DONTWAIT: one try, never a wait */
    bool handoff;  /* not for the netpoller whatever the fd (recvmsg with MSG_WAITALL) */
};

static size_t iov_total(const struct iovec *iov, int n)
{
    size_t t = 0;
    for (int i = 0; i < n; i++)
        t += iov[i].iov_len;
    return t;
}

/* The setters of io.def's lines. */
static void io_iov(struct io *io, int fd, int mode, int op, const struct iovec *iov, int iovcnt)
{
    memset(io, 0, sizeof *io);
    io->fd = fd;
    io->mode = mode;
    io->op = op;
    io->msg.msg_iov = (struct iovec *)iov;
    io->msg.msg_iovlen = (size_t)(iovcnt < 0 ? 0 : iovcnt);
    io->want = iov_total(iov, iovcnt < 0 ? 0 : iovcnt);
}

static void io_buf(struct io *io, int fd, int mode, int op, const void *buf, size_t n)
{
    io_iov(io, fd, mode, op, NULL, 0);
    io->one = (struct iovec){(void *)buf, n};
    io->msg.msg_iov = &io->one;
    io->msg.msg_iovlen = 1;
    io->want = n;
}

/* recvmsg, sendmsg: the caller's msghdr, unless handoff (then untouched). */
static void io_msg(struct io *io, int fd, int mode, const struct msghdr *msg, bool handoff)
{
    int op = mode == PD_READ ? OP_RECVMSG : OP_SENDMSG;
    if (handoff) {
        io_iov(io, fd, mode, op, NULL, 0);
        io->handoff = true;
        return;
    }
    io_iov(io, fd, mode, op, msg->msg_iov, (int)msg->msg_iovlen);
    io->msg = *msg;
}

static void io_name(struct io *io, const void *addr, socklen_t len)
{
    io->msg.msg_name = (void *)addr;
    io->msg.msg_namelen = addr ? len : 0;
}

static void io_sock(struct io *io, int flags)
{
    io->flags = flags & ~MSG_DONTWAIT;
    io->all = io->mode == PD_WRITE || (flags & MSG_WAITALL);
    io->dontwait = (flags & MSG_DONTWAIT) != 0; /* the caller asked for a non-blocking call */
}

static void io_accept(struct io *io, int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
    io_iov(io, fd, PD_READ, OP_ACCEPT, NULL, 0);
    io->addr = addr;
    io->alen = len;
    io->flags = flags;
}

/* ---- running it ---------------------------------------------------------------------- */

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

enum {
    IO_HANDOFF = LONG_MIN, /* not for the netpoller: make the call with the P handed off */
    IO_WAIT,               /* (io_step) wait for readiness, then try again */
    IO_MORE,               /* try again at once */
};

/* What io has come to, given the result res of its last step: the bytes
 * transferred if any, else res. */
static long io_outcome(const struct io *io, long res)
{
    return io->done ? (long)io->done : res;
}

/* One try (unless the fd is known to have nothing): its result to return,
 * IO_WAIT, IO_MORE (a blocking stream call not complete yet) or IO_HANDOFF. */
static long io_step(struct io *io, struct pdcall *c)
{
    if (!netpoll_try_begin(c))
        return IO_WAIT;
    long n = io_try(io);
    if (io->op == OP_ACCEPT && n >= 0) {
        netpoll_accepted(c, (int)n, io->flags);
        return n;
    }
    switch (netpoll_tried(c, n, io->want - io->done)) {
    case PD_WAIT:
        return IO_WAIT;
    case PD_FAIL:
        if (n == -EOPNOTSUPP && io->done == 0 && io->op == OP_RW) { /* no RWF_NOWAIT here */
            netpoll_set_blocking(c);
            return IO_HANDOFF;
        }
        return io_outcome(io, n);
    }
    io->done += (size_t)n;
    /* Stream sockets and pipes: a blocking write (or MSG_WAITALL read) goes on until all is
     * done; not past EOF. */
    if (!io->all || !netpoll_whole(c) || io->done >= io->want || n == 0 ||
        !io_advance(io, (size_t)n))
        return (long)io->done;
    return IO_MORE;
}

/*
 * Not ready by epoll (for good, or no instance now: RLIMIT_NOFILE, GOSHIM_FAULT=poller), for
 * a call that the kernel's blocking call cannot finish: a blocking write or MSG_WAITALL read
 * partly done (the rest is still to transfer, not a short count), or an accept on a
 * listening socket goshim made non-blocking (the kernel would say EAGAIN). Wait for the fd
 * in the kernel, the P handed off, then try again: IO_MORE, or the result to return.
 */
static long io_kernel_wait(struct io *io, struct pdcall *c)
{
    struct pollfd pfd = {io->fd, io->mode == PD_READ ? POLLIN : POLLOUT, 0};
    struct timespec ts, *tsp = NULL;
    if (c->deadline >= 0) { /* SO_RCVTIMEO / SO_SNDTIMEO */
        int64_t left = c->deadline - nanotime();
        if (left <= 0)
            return io_outcome(io, -EAGAIN);
        ts = (struct timespec){left / 1000000000, left % 1000000000};
        tsp = &ts;
    }
    uint32_t ran = shim_handlers_ran();
    long r =
        HANDOFF_WITH(entersyscallblock, rt_syscall6(SYS_ppoll, (long)&pfd, 1, (long)tsp, 0, 8, 0));
    if (r == 0)
        return io_outcome(io, -EAGAIN);
    if (r == -EINTR && shim_handlers_ran() != ran)
        return io_outcome(io, -EINTR);
    return IO_MORE; /* ready, an error the next try reports, or goshim's own signal */
}

/* Park until the fd may be ready: IO_MORE, or the result to return. */
static long io_park(struct io *io, struct pdcall *c)
{
    if (!netpoll_prepare(c)) { /* not ready by epoll (for good, or no instance now) */
        if (io->done || netpoll_forced_nonblock(c))
            return io_kernel_wait(io, c);
        return IO_HANDOFF;
    }
    switch (shim_wait(WAIT_IO, (void *)(intptr_t)io->fd, netpoll_waitcall, c, SHIM_WAIT_CANCEL)) {
    case SHIM_WAIT_CLOSED:
        return io_outcome(io, -EBADF);
    case SHIM_WAIT_TIMEDOUT:
        return io_outcome(io, -EAGAIN); /* SO_RCVTIMEO / SO_SNDTIMEO */
    case SHIM_WAIT_INTERRUPTED:
        return io_outcome(io, -EINTR);
    default: /* maybe ready, or a handler with SA_RESTART ran, or nothing did: again */
        return IO_MORE;
    }
}

/*
 * Run io to completion, parking on EAGAIN: the byte count (or fd), -errno,
 * or IO_HANDOFF when the fd is not pollable (nothing was transferred).
 */
static long io_run(struct io *io)
{
    struct pdcall c;
    bool lone = sched_lone(); /* (a listening socket is then left blocking) */
    switch (netpoll_reset(&c, io->fd, io->mode, io->op == OP_ACCEPT && !lone)) {
    case PD_NOTOPEN:
        return io_try(io); /* the kernel says EBADF */
    case PD_FILEWORK:
        return IO_HANDOFF; /* not a call that waits (io_active_file) */
    case PD_HANDOFF:
        sched_note_call();
        return IO_HANDOFF;
    }
    sched_note_call();
    shim_testcancel();
    chaos_point();
    shim_deliver_signals(); /* a signal sent before the call: handled, the call goes on */
    if (lone && !netpoll_forced_nonblock(&c))
        return IO_HANDOFF; /* the only thread: the kernel's blocking call (rule 5) */
    for (;;) {
        long r = io_step(io, &c);
        if (r == IO_WAIT)
            r = io_park(io, &c);
        if (r != IO_MORE)
            return r;
    }
}

/* io_run, or one try for MSG_DONTWAIT; IO_HANDOFF for io.def's handoff lines. */
static long io_call(struct io *io)
{
    if (io->handoff)
        return IO_HANDOFF;
    if (io->dontwait)
        return io_try(io);
    long r = io_run(io);
    if (io->owned)
        free(io->owned);
    return r;
}

/* ---- the wrappers (shim/io.def) ------------------------------------------------------ */

#define IO(ret, name, params, args, pass, setup, after)                                            \
    GOSHIM_EXPORT ret name params                                                                  \
    {                                                                                              \
        if (!io_active_file() || (pass))                                                           \
            return REAL(name) args;                                                                \
        struct io io;                                                                              \
        setup;                                                                                     \
        long r = io_call(&io);                                                                     \
        if (r == IO_HANDOFF)                                                                       \
            return HANDOFF_WITH_NO_GOSHIM_EINTR(ret, entersyscall, SHIM_CALL_GOES_ON, 0,           \
                                                REAL(name) args);                                  \
        if (r >= 0) {                                                                              \
            after;                                                                                 \
        }                                                                                          \
        return (ret)io_result(r);                                                                  \
    }
#define FORWARD(ret, name, base, params, baseargs)                                                 \
    GOSHIM_EXPORT ret name params                                                                  \
    {                                                                                              \
        return base baseargs;                                                                      \
    }
#define CHK(ret, name, base, params, args, baseargs, overflow)                                     \
    GOSHIM_EXPORT ret name params                                                                  \
    {                                                                                              \
        if ((overflow) || !io_active_file())                                                       \
            return REAL(name) args; /* glibc reports the overflow */                               \
        return base baseargs;                                                                      \
    }
#include "shim/io.def"
#undef IO
#undef FORWARD
#undef CHK

/* ---- connect ----------------------------------------------------------------------- */

/* Wait for connect's EINPROGRESS to end: SO_ERROR says how it went. */
static int connect_wait(int fd, struct pdcall *c)
{
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
        switch (shim_wait(WAIT_IO, (void *)(intptr_t)fd, netpoll_waitcall, c, SHIM_WAIT_CANCEL)) {
        case SHIM_WAIT_CLOSED:
            return (int)io_result(-EBADF);
        case SHIM_WAIT_TIMEDOUT:
            return (int)io_result(-EINPROGRESS);
        case SHIM_WAIT_INTERRUPTED:
            return (int)io_result(-EINTR); /* as Linux: the connection goes on */
        default:
            break;
        }
        netpoll_snapshot(c);
    }
}

/*
 * connect: made non-blocking for the call (O_NONBLOCK set and restored:
 * connect has no per-call flag); EINPROGRESS waits for writability, then
 * SO_ERROR says how it went. SO_SNDTIMEO bounds the wait (EINPROGRESS).
 */
GOSHIM_EXPORT int connect(int fd, __CONST_SOCKADDR_ARG addr, socklen_t len)
{
    if (!io_active())
        return REAL(connect)(fd, addr, len);
    struct pdcall c;
    if (netpoll_reset(&c, fd, PD_WRITE, false) != PD_POLL || !netpoll_blocking_socket(&c) ||
        sched_lone())
        return HANDOFF(REAL(connect)(fd, addr, len));
    shim_testcancel();
    long fl = rt_syscall(SYS_fcntl, fd, F_GETFL, 0);
    if (fl < 0 || rt_syscall(SYS_fcntl, fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return HANDOFF(REAL(connect)(fd, addr, len));
    netpoll_snapshot(&c);
    long r = rt_syscall(SYS_connect, fd, addr.__sockaddr__, len);
    if (!netpoll_forced_nonblock(&c))
        rt_syscall(SYS_fcntl, fd, F_SETFL, fl);
    if (r != -EINPROGRESS)
        return (int)io_result(r);
    if (!netpoll_prepare(&c)) { /* no epoll instance now: wait in the kernel */
        struct pollfd p = {fd, POLLOUT, 0};
        if (HANDOFF_WITH(entersyscallblock, REAL(poll)(&p, 1, -1)) < 0)
            return -1;
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        long gr = rt_syscall6(SYS_getsockopt, fd, SOL_SOCKET, SO_ERROR, (long)&soerr, (long)&sl, 0);
        return (int)io_result(gr < 0 ? gr : soerr ? -soerr : 0);
    }
    return connect_wait(fd, &c);
}
