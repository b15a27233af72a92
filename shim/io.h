/*
 * What the netpoller's wrappers share (shim/net.c: read, write and the
 * socket calls; shim/poll.c: poll, select, epoll_wait; shim/fd.c: the
 * calls that make, copy and close fds): when a call is theirs, and how a
 * result becomes the C library's.
 */
#ifndef GOSHIM_SHIM_IO_H
#define GOSHIM_SHIM_IO_H

#include <errno.h>
#include <stdbool.h>

#include "shim/shim.h"

/* A G outside the runtime: not a signal handler that interrupted goshim's
 * own code (holding a descriptor or futex lock), whose calls go straight
 * to the kernel. */
static inline bool io_active(void)
{
    return goshim_active() && !m_in_runtime();
}

/* io_active for read, write and their kin, which count the call only on a descriptor
 * that may wait (netpoll's: a socket, a pipe, a terminal), not a file (goshim_active_file). */
static inline bool io_active_file(void)
{
    return goshim_active_file() && !m_in_runtime();
}

/* A result (count, fd, or -errno) as the C library returns it. */
static inline long io_result(long r)
{
    if (r < 0) {
        errno = (int)-r;
        return -1;
    }
    return r;
}

/* shim/fd.c, for syscall(): close, close_range, dup, dup2, dup3 and fcntl
 * with goshim's own descriptors kept out of the program's way. True if it
 * made the call (result, as syscall() returns it, in *ret); false if the
 * caller makes it. Only when goshim_on. */
bool fd_syscall(long nr, long a, long b, long c, long *ret);

#endif
