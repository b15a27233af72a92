/*
 * The real libc functions behind goshim's interposers (list: real.def).
 * REAL(name) is the function the program would have called without goshim.
 * The table is filled once, by goshim_real_init, from the constructor;
 * wrappers never call dlsym (it may allocate, and they may run inside the
 * loader or malloc).
 */
#ifndef GOSHIM_REAL_H
#define GOSHIM_REAL_H

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/msg.h>
#include <sys/resource.h>
#include <sys/sem.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <semaphore.h>
#include <threads.h>
#include <time.h>
#include <unistd.h>

struct real_syms {
#define REAL_SYM(name, ret, args) ret(*name) args;
#include "shim/real.def"
#undef REAL_SYM
};

extern struct real_syms goshim_real;
/* Resolved at start-up; an interposer reached earlier still (another
 * library's constructor, with GOSHIM_DISABLE=1 too) resolves the table first. */
#define REAL(name)                                                                                 \
    (__builtin_expect(goshim_real.name != NULL, 1) ? goshim_real.name                              \
                                                   : (goshim_real_init(), goshim_real.name))

/* Resolve every entry once (later calls return the first result); returns
 * the number that could not be found (each named on stderr). */
int goshim_real_init(void);

#endif
