/*
 * The netpoller: Gs that wait for a socket, pipe, FIFO, eventfd, timerfd,
 * signalfd or epoll fd park instead of blocking their M (docs/design.md,
 * rule 5).
 *
 * Every fd the shim sees gets a descriptor (struct pdesc, one per fd
 * number, never freed) telling how to wait on it. A wait is a gfutex wait
 * on the descriptor's read or write sequence word, which goes up whenever
 * the fd may have become ready: an epoll event, a close, or a write by this
 * process to the other end of its own pipe or socketpair. The caller reads
 * the sequence, tries the call non-blocking, and if that says EAGAIN waits
 * for the sequence to move on: no readiness is ever lost between the try
 * and the park.
 *
 * The I/O itself is made non-blocking per call (RWF_NOWAIT, MSG_DONTWAIT),
 * never by setting O_NONBLOCK on the open file, which is shared with stdio
 * (fdopen), with children and with other processes that would then see
 * EAGAIN they never asked for. Listening sockets are the one exception
 * (accept has no per-call flag); fcntl hides it (shim/fd.c).
 */
#ifndef GOSHIM_NETPOLL_H
#define GOSHIM_NETPOLL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api.h" /* the part the shim uses: enum pd_mode, struct pdcall, the protocol */
#include "lock.h"

struct psub;

/*
 * What is known of a descriptor's kind. What open() makes is a regular file, a directory
 * or a device nearly always: read and write take it for one (the kernel's blocking call,
 * the P handed off) without the two system calls of a classification, which were a
 * program's every other system call when it read many small files (ripgrep). A FIFO or a
 * /proc/self/fd path to a pipe is the exception: its reads block in the kernel as natively
 * (an M each) until something that needs its true kind classifies it - poll, select or
 * epoll, fcntl's O_NONBLOCK - after which they park in the netpoller.
 */
enum pd_init {
    PD_UNKNOWN,    /* nothing: classified (fstat, F_GETFL) when first needed */
    PD_CLASSIFIED, /* kind, stream, socket and O_NONBLOCK as the kernel says */
    PD_GUESSED,    /* made by open(): taken for a file (PD_FILE) by read and write,
                    * classified by what needs to know (poll, fcntl); a dup's copy is
                    * PD_UNKNOWN */
};

struct pdesc {
    struct runtime_lock lock; /* subs, peer, epoll registration */
    int fd;
    uint32_t gen;        /* bumped by close; epoll events carry it; atomic */
    uint32_t seq[2];     /* PD_READ / PD_WRITE readiness sequence: gfutex words; atomic */
    uint32_t waiters[2]; /* Gs waiting per mode; atomic */
    uint32_t drained;    /* seq[PD_READ] + 1 when a read found it empty at that seq */
    uint32_t edges;      /* read edges epoll reported (any writer's, seen or not); atomic */
    uint32_t emptyat;    /* edges read before the last try that found it empty */
    uint32_t direct;     /* own pair: writes through goshim that brought data */
    uint32_t writing;    /* own pair: writes through goshim in progress */
    int64_t inflight;    /* own pair: bytes written to it through goshim and not yet read */
    uint8_t init;        /* enum pd_init, for this gen; release-published */
    uint8_t kind;        /* enum pd_kind */
    uint8_t stream;      /* a short read means drained (pipes, FIFOs, stream sockets) */
    uint8_t epoll;       /* 0 not registered, 1 registered, 2 cannot be (EPERM) */
    uint8_t user_nb;     /* the application asked for O_NONBLOCK */
    uint8_t forced_nb;   /* goshim set O_NONBLOCK on it (listening socket) */
    uint8_t socket;
    uint8_t hup;  /* a hang-up or error was reported: reads end (EOF) without new edges */
    uint8_t made; /* fd and peer set (pd_slot): 0 not yet, 1 being set, 2 set; atomic */
    int peer;     /* other end of this process's own pipe/socketpair, or -1 */
    uint32_t peergen;
    int64_t timeo[2];  /* SO_RCVTIMEO / SO_SNDTIMEO in ns, 0 = none */
    struct psub *subs; /* poll/select waiters; lock */
};

/* What the kernel says fd is (fdkind.c): its pd_kind, whether a short read means drained
 * (stream), a socket's and its timeouts (ns, 0 none), O_NONBLOCK. False: not open. */
struct fd_kind {
    int kind;
    bool stream, socket, nonblock;
    int64_t timeo[2];
};
bool fd_kind_of(int fd, struct fd_kind *k);

/* Start (sched_init): no descriptor yet (made at the first registration). 0. */
int netpoll_init(void);

/* The descriptor of fd if it was ever seen, unclassified allowed; else NULL. */
struct pdesc *netpoll_lookup(int fd);
/* A process was forked: in the parent, own pairs are no longer known to
 * be written only through goshim; in the child, the parent's epoll instance
 * closed at once (netpoll_fork_own), a fresh one made when needed, and the
 * descriptors' state reset when the child first needs the runtime
 * (netpoll_fork_child). */
void netpoll_fork_parent(void);
void netpoll_fork_own(void);
void netpoll_fork_child(void);

/*
 * Poll the epoll set: until = absolute monotonic ns to block until, -1 to
 * block until an event or netpoll_break, 0 not to block. Readies the
 * waiting Gs (to the global queue when called off a G). Returns the number
 * of descriptors that had events.
 */
int netpoll(int64_t until);
/* Interrupt a blocking netpoll. False if it may not have reached it (its
 * wake-up eventfd was lost behind goshim's back): find another M. */
bool netpoll_break(void);
/* Gs parked on fds whose readiness only epoll can report (a blocking netpoll
 * is worth an idle M). */
bool netpoll_anywaiters(void);
/* Descriptors registered (a periodic poll is worth it). */
bool netpoll_anyregistered(void);
/* Monotonic ns of the last completed netpoll, 0 while one blocks. */
int64_t netpoll_lastpoll(void);

/* ---- between netpoll.c and netpoll_epoll.c (the epoll instance and the wake-up eventfd) ---- */

struct epoll_event;
/* The instance and the eventfd exist, made now if need be. False if they cannot be (EMFILE). */
bool np_ensure(void);
/* A call on them failed with EBADF or EINVAL: if they were lost behind goshim's back, make them
 * again (true). Not while holding (ownfd_hold). */
bool np_check(void);
/* epoll_ctl on the instance: 0 or -errno (EBADF when there is none). */
long np_ctl(int op, int fd, struct epoll_event *e);
/* Fork child: close the parent's instance and eventfd, make none. */
void np_fork_child(void);
void np_poll_stats(uint64_t *polls, uint64_t *events);
/* netpoll.c: an epoll event for a registered fd (data as registered): ready its waiters. False
 * if the fd was closed since. */
bool netpoll_event(uint64_t data, uint32_t events);
/* netpoll.c: a new instance replaced a lost one: register every registered fd again. */
void netpoll_remade(void);

/* counters for GOSHIM_STATS */
struct netpoll_stats {
    uint64_t parks, polls, events, direct;
    uint64_t classified; /* descriptors whose kind was asked of the kernel (fstat, F_GETFL) */
};
void netpoll_stats(struct netpoll_stats *s);

#endif