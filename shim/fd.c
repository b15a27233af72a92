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
 *
 * goshim's own descriptors (sched/ownfd.c) are not open as far as the
 * program can tell: close, dup, fcntl of one fail with EBADF; close_range
 * and closefrom close around them; dup2 and dup3 onto one move goshim's
 * out of the way first; readdir of /proc/self/fd (or fdinfo) skips them;
 * and syscall() with close, close_range, dup, dup2, dup3 or fcntl does the
 * same (fd_syscall). Except in a signal handler that interrupted goshim's
 * own code, which may hold the lock of those descriptors: there a dup2 or
 * close_range goes straight to the kernel, and should it hit one of them
 * goshim makes it again.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
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

/* The answer for one of goshim's own descriptors: not open. */
static int not_open(void)
{
    errno = EBADF;
    return -1;
}

GOSHIM_EXPORT int close(int fd)
{
    if (goshim_on) {
        if (ownfd_is(fd))
            return not_open();
        netpoll_close(fd);
    }
    return REAL(close)(fd);
}

GOSHIM_EXPORT int dup(int fd)
{
    if (goshim_on && ownfd_is(fd))
        return not_open();
    int nfd = REAL(dup)(fd);
    if (nfd >= 0 && goshim_on)
        netpoll_dup(fd, nfd);
    return nfd;
}

/* dup2 or dup3 of fd onto nfd: goshim's own descriptor at nfd moves out of
 * the way first; call makes the call itself (glibc's, or the system call
 * for syscall()), with flags for dup3. */
static long dup_onto(int fd, int nfd, int flags, long (*call)(int, int, int))
{
    if (!goshim_on || m_in_runtime())
        return call(fd, nfd, flags);
    if (ownfd_is(fd))
        return not_open();
    bool evicted = false;
    if (fd != nfd && REAL(fcntl)(fd, F_GETFD) >= 0) {
        evicted = ownfd_evict(nfd);
        if (!evicted)
            netpoll_close(nfd);
    }
    long r = call(fd, nfd, flags);
    if (r < 0 && evicted) {
        int e = errno;
        REAL(close)(nfd); /* goshim's old copy: nobody's now */
        errno = e;
    }
    if (r >= 0 && fd != nfd)
        netpoll_dup(fd, (int)r);
    return r;
}

static long real_dup2(int fd, int nfd, int flags)
{
    (void)flags;
    return REAL(dup2)(fd, nfd);
}

static long real_dup3(int fd, int nfd, int flags)
{
    return REAL(dup3)(fd, nfd, flags);
}

GOSHIM_EXPORT int dup2(int fd, int nfd)
{
    return (int)dup_onto(fd, nfd, 0, real_dup2);
}

GOSHIM_EXPORT int dup3(int fd, int nfd, int flags)
{
    return (int)dup_onto(fd, nfd, flags, real_dup3);
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
        return HANDOFF_WITH(entersyscallblock_waiting, REAL(pclose)(fp)); /* waits for the child */
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

/* close_range's parts around goshim's own descriptors (ownfd_close_range). */
struct range_call {
    int flags;
    bool from_on; /* closefrom: the last part is closefrom's (it falls back to /proc/self/fd) */
    long (*call)(unsigned, unsigned, int);
    long err; /* the errno of the first part that failed */
};

static int range_part(unsigned from, unsigned to, void *arg)
{
    struct range_call *rc = arg;
    if (rc->from_on && to == UINT_MAX) {
        REAL(closefrom)((int)from);
        return 0;
    }
    if (rc->call(from, to, rc->flags) == 0)
        return 0;
    if (rc->from_on && errno == ENOSYS) { /* a kernel before close_range: as glibc's closefrom */
        for (unsigned fd = from; fd <= to; fd++)
            REAL(close)((int)fd);
        return 0;
    }
    rc->err = errno;
    return -1;
}

/* close_range(first, last, flags) with call, or closefrom(first) (from_on). */
static long close_around(unsigned first, unsigned last, int flags, bool from_on,
                         long (*call)(unsigned, unsigned, int))
{
    if (!goshim_on || m_in_runtime()) {
        if (!from_on)
            return call(first, last, flags);
        REAL(closefrom)((int)first);
        return 0;
    }
    if (!(flags & CLOSE_RANGE_CLOEXEC) && first <= last)
        netpoll_close_range(first, last);
    if (first > last || (flags & ~(CLOSE_RANGE_CLOEXEC | CLOSE_RANGE_UNSHARE)))
        return call(first, last, flags); /* EINVAL, as the kernel says it */
    struct range_call rc = {flags, from_on, call, 0};
    if (ownfd_close_range(first, last, range_part, &rc) == 0)
        return 0;
    errno = (int)rc.err;
    return -1;
}

static long real_close_range(unsigned first, unsigned last, int flags)
{
    return REAL(close_range)(first, last, flags);
}

GOSHIM_EXPORT int close_range(unsigned first, unsigned last, int flags)
{
    return (int)close_around(first, last, flags, false, real_close_range);
}

GOSHIM_EXPORT void closefrom(int lowfd)
{
    if (lowfd < 0) {
        REAL(closefrom)(lowfd);
        return;
    }
    close_around((unsigned)lowfd, UINT_MAX, 0, true, real_close_range);
}

/* ---- listings of /proc/self/fd ---------------------------------------------------------- */

/* The number a directory entry's name spells, or -1. */
static int entry_fd(const char *name)
{
    long n = 0;
    if (*name == '\0')
        return -1;
    for (const char *p = name; *p; p++) {
        if (*p < '0' || *p > '9' || n > INT_MAX / 10)
            return -1;
        n = n * 10 + (*p - '0');
    }
    return n <= INT_MAX ? (int)n : -1;
}

/* d is this process's fd or fdinfo directory in /proc (by its real path:
 * /proc/PID/fd, /proc/PID/task/TID/fd, or fdinfo; /proc/self, /dev/fd and
 * /proc/thread-self lead there). */
static bool own_fd_dir(DIR *d)
{
    char link[64], path[128];
    snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd(d));
    long n = rt_syscall6(SYS_readlinkat, AT_FDCWD, (long)link, (long)path, sizeof path - 1, 0, 0);
    if (n <= 0)
        return false;
    path[n] = '\0';
    char self[32];
    int len = snprintf(self, sizeof self, "/proc/%d/", (int)getpid());
    if (strncmp(path, self, (size_t)len) != 0)
        return false;
    const char *rest = path + len;
    if (strncmp(rest, "task/", 5) == 0) {
        rest = strchr(rest + 5, '/');
        if (!rest)
            return false;
        rest++;
    }
    return strcmp(rest, "fd") == 0 || strcmp(rest, "fdinfo") == 0;
}

/* A listing of /proc/self/fd leaves goshim's own descriptors out. The name
 * is checked first (one of goshim's numbers: rare), the directory only
 * then. */
#define READDIR(name, type)                                                                        \
    GOSHIM_EXPORT type *name(DIR *d)                                                               \
    {                                                                                              \
        type *e;                                                                                   \
        do                                                                                         \
            e = REAL(name)(d);                                                                     \
        while (e && goshim_on && ownfd_is(entry_fd(e->d_name)) && own_fd_dir(d));                  \
        return e;                                                                                  \
    }
READDIR(readdir, struct dirent)
READDIR(readdir64, struct dirent64)
#undef READDIR

/* ---- syscall() with the calls above -------------------------------------------------------- */

static long sys_close_range(unsigned first, unsigned last, int flags)
{
    return REAL(syscall)(SYS_close_range, (long)first, (long)last, (long)flags);
}

static long sys_dup2(int fd, int nfd, int flags)
{
    (void)flags;
    return REAL(syscall)(SYS_dup2, (long)fd, (long)nfd);
}

static long sys_dup3(int fd, int nfd, int flags)
{
    return REAL(syscall)(SYS_dup3, (long)fd, (long)nfd, (long)flags);
}

bool fd_syscall(long nr, long a, long b, long c, long *ret)
{
    switch (nr) {
    case SYS_close:
        if (ownfd_is((int)a)) {
            *ret = not_open();
            return true;
        }
        netpoll_close((int)a);
        return false;
    case SYS_close_range:
        *ret = close_around((unsigned)a, (unsigned)b, (int)c, false, sys_close_range);
        return true;
    case SYS_dup2:
        *ret = dup_onto((int)a, (int)b, 0, sys_dup2);
        return true;
    case SYS_dup3:
        *ret = dup_onto((int)a, (int)b, (int)c, sys_dup3);
        return true;
    case SYS_dup:
    case SYS_fcntl:
        if (ownfd_is((int)a)) {
            *ret = not_open();
            return true;
        }
        return false;
    default:
        return false;
    }
}

/* ---- fcntl, ioctl, setsockopt: keep the descriptor's view current ------------------- */

static int do_fcntl(int (*real)(int, int, ...), int fd, int cmd, unsigned long arg)
{
    if (goshim_on && ownfd_is(fd))
        return not_open();
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
            return HANDOFF_WITH(entersyscallblock_waiting, real(fd, cmd, arg));
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
