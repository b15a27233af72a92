/*
 * The calls that make, copy and close fds, and those that change how an
 * fd behaves, keep the netpoller's descriptors (sched/netpoll.h) current.
 *
 * socket, socketpair, pipe and pipe2 describe the new fds at once (no
 * system call later to classify them); the two ends of a pipe or
 * socketpair are an own pair, whose writes through goshim ready the other
 * end's reader directly. Closing an fd (close, dup2/dup3 over it, fclose,
 * pclose, closedir, close_range, closefrom) wakes the Gs waiting on it with
 * EBADF, as Go does and unlike Linux (where such a reader would block on
 * until data comes). fcntl(F_SETFL) and ioctl(FIONBIO) record the
 * application's O_NONBLOCK (and keep the one goshim set on a listening
 * socket, which F_GETFL hides); setsockopt records SO_RCVTIMEO and
 * SO_SNDTIMEO, which bound a parked call.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "shim/io.h"
#include "shim/shim.h"

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

GOSHIM_EXPORT int close_range(unsigned first, unsigned last, int flags)
{
    if (goshim_on && !(flags & CLOSE_RANGE_CLOEXEC) && first <= last)
        netpoll_close_range(first, last);
    return REAL(close_range)(first, last, flags);
}

GOSHIM_EXPORT void closefrom(int lowfd)
{
    if (goshim_on && lowfd >= 0)
        netpoll_close_range((unsigned)lowfd, UINT_MAX);
    REAL(closefrom)(lowfd);
}

/* ---- fcntl, ioctl, setsockopt: keep the descriptor's view current ------------------- */

static int do_fcntl(int (*real)(int, int, ...), int fd, int cmd, unsigned long arg)
{
    switch (cmd) {
    case F_GETFL: {
        int r = real(fd, cmd);
        return goshim_on ? netpoll_getfl(fd, r) : r; /* without goshim's own O_NONBLOCK */
    }
    case F_SETFL:
        if (goshim_on && netpoll_set_user_nonblock(fd, (arg & O_NONBLOCK) != 0))
            arg |= O_NONBLOCK; /* goshim's own stays */
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
    if (req == FIONBIO && goshim_on && arg && netpoll_set_user_nonblock(fd, *(int *)arg != 0))
        return 0; /* it stays non-blocking underneath */
    return REAL(ioctl)(fd, req, arg);
}

GOSHIM_EXPORT int setsockopt(int fd, int level, int opt, const void *val, socklen_t len)
{
    int r = REAL(setsockopt)(fd, level, opt, val, len);
    if (r == 0 && goshim_on && level == SOL_SOCKET && len >= sizeof(struct timeval) &&
        (opt == SO_RCVTIMEO_OLD || opt == SO_SNDTIMEO_OLD || opt == SO_RCVTIMEO_NEW ||
         opt == SO_SNDTIMEO_NEW)) {
        /* x86-64: struct timeval and __kernel_sock_timeval have one layout. */
        const struct timeval *tv = val;
        int64_t ns = (int64_t)tv->tv_sec * 1000000000 + (int64_t)tv->tv_usec * 1000;
        bool rcv = opt == SO_RCVTIMEO_OLD || opt == SO_RCVTIMEO_NEW;
        netpoll_set_timeout(fd, rcv ? PD_READ : PD_WRITE, ns);
    }
    return r;
}
