/*
 * The netpoller: Gs that wait for a socket, pipe, FIFO, eventfd, timerfd,
 * signalfd or epoll fd park instead of blocking their M (DESIGN rule 5).
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

#include "lock.h"

enum pd_kind {
    PD_NOWAIT = 1, /* pollable and takes RWF_NOWAIT: park on EAGAIN */
    PD_BLOCKING,   /* regular file, block or char device, or no RWF_NOWAIT: hand off the P */
};

enum pd_mode { PD_READ, PD_WRITE };

struct psub;

struct pdesc {
    struct runtime_lock lock; /* subs, peer, epoll registration */
    int fd;
    uint32_t gen;        /* bumped by close; epoll events carry it; atomic */
    uint32_t seq[2];     /* PD_READ / PD_WRITE readiness sequence: gfutex words; atomic */
    uint32_t waiters[2]; /* Gs waiting per mode; atomic */
    uint32_t drained;    /* seq[PD_READ] + 1 when a read found it empty at that seq */
    uint32_t direct;     /* own pair: writes through goshim that brought data */
    uint32_t writing;    /* own pair: writes through goshim in progress */
    int64_t inflight;    /* own pair: bytes written to it through goshim and not yet read */
    uint8_t init;        /* classified for this gen; release-published */
    uint8_t kind;        /* enum pd_kind */
    uint8_t stream;      /* a short read means drained (pipes, FIFOs, stream sockets) */
    uint8_t epoll;       /* 0 not registered, 1 registered, 2 cannot be (EPERM) */
    uint8_t user_nb;     /* the application asked for O_NONBLOCK */
    uint8_t forced_nb;   /* goshim set O_NONBLOCK on it (listening socket) */
    uint8_t socket;
    uint8_t hup; /* a hang-up or error was reported: reads end (EOF) without new edges */
    int peer;    /* other end of this process's own pipe/socketpair, or -1 */
    uint32_t peergen;
    int64_t timeo[2];  /* SO_RCVTIMEO / SO_SNDTIMEO in ns, 0 = none */
    struct psub *subs; /* poll/select waiters; lock */
};

/* A poll/select/epoll_wait waiter subscribed to some descriptors: word is
 * bumped (and woken) whenever one of them may have become ready. */
struct psub {
    struct psub *next, *prev;
    struct pdesc *pd;
    uint32_t *word;
    bool counted; /* in the epoll waiters */
};

/* Start (sched_init). 0 or an errno value. */
int netpoll_init(void);

/* The descriptor of fd, classified (a few system calls, once per fd until
 * it is closed); NULL if fd is not open or out of range. */
struct pdesc *netpoll_fd(int fd);
/* The descriptor of fd if it was ever seen, unclassified allowed; else NULL. */
struct pdesc *netpoll_lookup(int fd);
/* Describe a fd the caller just created (no system call). */
void netpoll_known(int fd, int kind, bool stream, bool socket, bool user_nb);
/* The two ends of a pipe or socketpair this process just created. */
void netpoll_pair(int a, int b);
/* Forget everything about fd (it is being closed or replaced): waiters
 * wake with EBADF, the other end of an own pair becomes readable (EOF) or
 * writable (EPIPE). Before the real close. */
void netpoll_close(int fd);
/* fd was duplicated (dup, dup2, F_DUPFD): another name now writes to it. */
void netpoll_dup(int oldfd, int newfd);
/* A process was forked: in the parent, own pairs are no longer known to
 * be written only through goshim; in the child, a fresh epoll instance. */
void netpoll_fork_parent(void);
void netpoll_fork_child(void);

/* Register fd in the epoll set (edge-triggered, both directions). False if
 * it cannot be (it is then always ready: regular files, /dev/null). */
bool netpoll_arm(struct pdesc *pd);

/*
 * ---- one I/O call: the readiness protocol ----
 *
 * After Go's pollDesc (poll_runtime_pollReset, pollWait, netpollcheckerr),
 * with the try in the caller's hands since the call itself is the
 * application's:
 *
 *      netpoll_reset               is fd for the netpoller, or a hand-off?
 *      loop:
 *          netpoll_try_begin       read the sequence; false: known empty, no try
 *          (the non-blocking try, by the caller)
 *          netpoll_tried           bookkeeping; done, failed, or wait
 *          netpoll_prepare         register fd (false: never ready by epoll)
 *          netpoll_waitcall        park until the sequence moves (through shim_wait)
 *
 * The per-call state lives in struct pdcall on the caller's stack; the
 * caller reads none of it nor any pdesc field.
 */
struct pdcall {
    struct pdesc *pd;
    struct pdesc *peer; /* own pair's other end a write is in progress to */
    int mode;           /* PD_READ / PD_WRITE */
    uint32_t gen;       /* the generation at the start: a close meanwhile is EBADF */
    uint32_t seq;       /* the mode's sequence read before the last try */
    uint32_t direct;    /* pd->direct read with seq */
    uint32_t direct0;   /* direct when it last parked */
    bool parked;
    int64_t deadline; /* SO_RCVTIMEO / SO_SNDTIMEO: monotonic ns, -1 none */
};

enum pd_reset {
    PD_POLL,    /* park on EAGAIN */
    PD_HANDOFF, /* not for the netpoller (files, ttys): hand the P off */
    PD_NOTOPEN, /* fd not open (or out of range): let the kernel say EBADF */
};

/* Start a call on fd for mode: its descriptor, classified, its timeout
 * started. listening: accept, which needs O_NONBLOCK on the socket (set
 * once, hidden by netpoll_getfl). Returns enum pd_reset. */
int netpoll_reset(struct pdcall *c, int fd, int mode, bool listening);
/* Before each try: read the readiness sequence (and, writing to an own
 * pair, mark the write in progress). False when a read is known to find
 * nothing (no system call needed): the caller goes straight to waiting. */
bool netpoll_try_begin(struct pdcall *c);
/* Read the sequence again without a try (connect: before it looks again). */
void netpoll_snapshot(struct pdcall *c);

enum pd_tried {
    PD_DONE, /* n >= 0: transferred */
    PD_FAIL, /* -errno to return, EAGAIN included when the application asked for it */
    PD_WAIT, /* EAGAIN: wait for readiness, then try again */
};

/* After the try that netpoll_try_begin allowed: n bytes or -errno; rest:
 * the bytes the call still wanted (a short read drains a stream). Returns
 * enum pd_tried. */
int netpoll_tried(struct pdcall *c, long n, size_t rest);
/* accept's try gave fd (instead of netpoll_tried): it inherits the listener's
 * kind and timeouts (Linux copies the socket options), not its O_NONBLOCK. */
void netpoll_accepted(struct pdcall *c, int fd, int flags);
/* A blocking stream (pipe, FIFO, stream socket, not made non-blocking): a
 * blocking write, or a MSG_WAITALL read, goes on until all is done. */
bool netpoll_whole(const struct pdcall *c);
/* The fd is not for per-call non-blocking tries (no RWF_NOWAIT, or cannot
 * be registered): every later call hands off. */
void netpoll_set_blocking(struct pdcall *c);
/* Ready to park: the fd registered. False if it cannot be. */
bool netpoll_prepare(struct pdcall *c);
/*
 * Park the calling G (arg: its struct pdcall) until the sequence read by the
 * last netpoll_try_begin/netpoll_snapshot moves, or until the deadline. 0:
 * maybe ready, try again; ETIMEDOUT; EINTR (cancellation or a signal for
 * this thread); EBADF: closed meanwhile. The shape of a shim_wait park.
 */
int netpoll_waitcall(void *arg);
/* The descriptor is a socket the application left blocking (connect). */
bool netpoll_blocking_socket(const struct pdcall *c);
/* goshim set O_NONBLOCK on it for good (connect must not clear it). */
bool netpoll_forced_nonblock(const struct pdcall *c);

/* ---- per-fd state the application sets (taken under the descriptor's lock) ---- */

/* F_SETFL / FIONBIO: the application's O_NONBLOCK. True if goshim keeps
 * O_NONBLOCK set underneath (a listening socket): the caller then keeps it. */
bool netpoll_set_user_nonblock(int fd, bool nb);
/* F_GETFL's result fl for fd, without the O_NONBLOCK goshim set itself. */
int netpoll_getfl(int fd, int fl);
/* SO_RCVTIMEO (PD_READ) / SO_SNDTIMEO (PD_WRITE) in ns, 0 none. */
void netpoll_set_timeout(int fd, int mode, int64_t ns);
/* close_range/closefrom: netpoll_close for every known fd in [first, last]. */
void netpoll_close_range(unsigned first, unsigned last);

/* Subscribe/unsubscribe a poll-style waiter. */
void netpoll_subscribe(struct pdesc *pd, struct psub *s, uint32_t *word);
void netpoll_unsubscribe(struct psub *s);

/*
 * Poll the epoll set: until = absolute monotonic ns to block until, -1 to
 * block until an event or netpoll_break, 0 not to block. Readies the
 * waiting Gs (to the global queue when called off a G). Returns the number
 * of descriptors that had events.
 */
int netpoll(int64_t until);
/* Interrupt a blocking netpoll. */
void netpoll_break(void);
/* Gs parked on fds whose readiness only epoll can report (a blocking netpoll
 * is worth an idle M). */
bool netpoll_anywaiters(void);
/* Descriptors registered (a periodic poll is worth it). */
bool netpoll_anyregistered(void);
/* Monotonic ns of the last completed netpoll, 0 while one blocks. */
int64_t netpoll_lastpoll(void);

/* counters for GOSHIM_STATS */
struct netpoll_stats {
    uint64_t parks, polls, events, direct;
};
void netpoll_stats(struct netpoll_stats *s);

#endif
