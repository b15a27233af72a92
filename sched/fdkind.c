/*
 * What kind of descriptor an fd is, for the netpoller (netpoll.c classifies each fd it
 * has not seen made): the kernel's answers to fstat, getsockopt and F_GETFL, nothing of
 * goshim's own state.
 *
 * Files, block devices and directories are file work (PD_FILE): their calls are made
 * with the P kept in a system call, and they wait for no other thread (shim/shim.h,
 * goshim_active_file). So are the memory devices (major 1: /dev/null, zero, full,
 * urandom), which answer at once; kmsg (1:11) waits for the kernel's next message, and
 * the other character devices (ttys) for someone: PD_BLOCKING, a call that waits.
 * Pipes, FIFOs, sockets and anonymous inodes are the netpoller's (PD_NOWAIT).
 */
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <time.h>

#include "netpoll.h"
#include "sched.h"

static int64_t timeval_ns(const struct timeval *tv)
{
    return (int64_t)tv->tv_sec * 1000000000 + (int64_t)tv->tv_usec * 1000;
}

static long sockopt(int fd, int opt, void *val, socklen_t len)
{
    return rt_syscall6(SYS_getsockopt, fd, SOL_SOCKET, opt, (long)val, (long)&len, 0);
}

bool fd_kind_of(int fd, struct fd_kind *k)
{
    struct stat st;
    *k = (struct fd_kind){.kind = PD_NOWAIT};
    if (rt_syscall(SYS_fstat, fd, (long)&st, 0) < 0)
        return false;
    switch (st.st_mode & S_IFMT) {
    case S_IFREG:
    case S_IFBLK:
    case S_IFDIR:
        k->kind = PD_FILE;
        break;
    case S_IFCHR: /* no RWF_NOWAIT; poll() still registers them */
        k->kind = major(st.st_rdev) == 1 && minor(st.st_rdev) != 11 ? PD_FILE : PD_BLOCKING;
        break;
    case S_IFIFO:
        k->stream = true;
        break;
    case S_IFSOCK: {
        k->socket = true;
        int type = 0;
        if (sockopt(fd, SO_TYPE, &type, sizeof type) == 0)
            k->stream = type == SOCK_STREAM;
        struct timeval tv;
        if (sockopt(fd, SO_RCVTIMEO, &tv, sizeof tv) == 0)
            k->timeo[PD_READ] = timeval_ns(&tv);
        if (sockopt(fd, SO_SNDTIMEO, &tv, sizeof tv) == 0)
            k->timeo[PD_WRITE] = timeval_ns(&tv);
        break;
    }
    default: /* anonymous inodes: eventfd, timerfd, signalfd, epoll, inotify... */
        break;
    }
    long fl = rt_syscall(SYS_fcntl, fd, F_GETFL, 0);
    if (fl < 0)
        return false;
    k->nonblock = (fl & O_NONBLOCK) != 0;
    return true;
}
