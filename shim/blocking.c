/*
 * Blocking calls (list: blocking.def) hand their P to another M for the
 * duration of the call (sched/syscall.c), so a thread blocked in the kernel
 * never stops the Gs that would unblock it. One body for all, by X-macro.
 *
 * This is the whole story only until the netpoller lands: network and pipe
 * waits will then park the G instead of holding an M, and sysmon will let
 * short calls keep their P. errno is the G's own (its TCB stays installed
 * on this M through the call).
 */
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/msg.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shim/shim.h"

#define BLOCKING(ret, name, params, args)                                                          \
    GOSHIM_EXPORT ret name params                                                                  \
    {                                                                                              \
        if (!goshim_active())                                                                      \
            return REAL(name) args;                                                                \
        if (!entersyscall())                                                                       \
            return REAL(name) args;                                                                \
        ret res_ = REAL(name) args;                                                                \
        exitsyscall();                                                                             \
        return res_;                                                                               \
    }
#include "shim/blocking.def"
#undef BLOCKING

/*
 * open and openat take their mode as a variadic argument (read only with
 * O_CREAT or O_TMPFILE). Opening a FIFO blocks until the other end is
 * opened, by another thread of this very program as often as not.
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
        if (!goshim_active() || !entersyscall())                                                   \
            return REAL(name) args;                                                                \
        int fd = REAL(name) args;                                                                  \
        exitsyscall();                                                                             \
        return fd;                                                                                 \
    }
OPEN_WRAPPER(open, (const char *path, int flags, ...), (path, flags, mode))
OPEN_WRAPPER(open64, (const char *path, int flags, ...), (path, flags, mode))
OPEN_WRAPPER(openat, (int dirfd, const char *path, int flags, ...), (dirfd, path, flags, mode))
OPEN_WRAPPER(openat64, (int dirfd, const char *path, int flags, ...), (dirfd, path, flags, mode))
#undef OPEN_WRAPPER
