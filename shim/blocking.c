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
