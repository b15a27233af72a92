/*
 * The netpoller (contract in netpoll.h), after Go's netpoll.go and
 * netpoll_epoll.go: one epoll instance, edge-triggered, fds registered on
 * their first wait; a wake-up eventfd interrupts a blocking poll.
 *
 * The epoll instance, the eventfd and the poll itself are in
 * netpoll_epoll.c: made at the first registration, never at start-up, and
 * made again if lost.
 *
 * Descriptors live in a two-level table indexed by fd number, chunks of
 * PD_CHUNK allocated on first use and never freed, so a pointer to one
 * stays valid whatever happens to the fd; the generation (bumped by close)
 * tells a waiter or an epoll event that its fd was closed meanwhile.
 *
 * Own pairs. A pipe or socketpair created through the wrapped pipe, pipe2
 * or socketpair has both ends known: a wrapped write to one end readies the
 * other end's reader at once (netpoll_write_end), with no epoll round trip. Such
 * a wait is not counted in epoll_waiters, so a pipe ping-pong never makes an
 * idle M block in epoll_wait. A write that goshim does not see (stdio's
 * internal write, a raw syscall, another process) still raises an epoll
 * edge, which sysmon's periodic poll delivers within a tick; the reader
 * then notices data that no own write brought (direct unchanged since it
 * parked, and no own write in progress) and the pair stops being treated
 * as own (netpoll_read_after_park). The edge may come while no read is
 * parked, when poll, select or epoll_wait takes it and the read follows (a
 * child that got the write end across posix_spawn or vfork and exec writes;
 * the reader polls, then reads): so an own pair's read end is known empty
 * only while no read edge came since a read found it empty (edges), and a
 * read that takes more than own writes brought ends the pair as well.
 * Duplicating an end or forking ends it too.
 *
 * Lock order: pd->lock, then a gfutex bucket lock (through gfutex_wake).
 * Never two pd locks at once. ownfd's lock (np_ensure, np_check) is never
 * taken with a pd lock held; a call held on goshim's fds (np_ctl) may be.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <fcntl.h>
#include <time.h>

#include "gfutex.h"
#include "libc.h"
#include "netpoll.h"
#include "sched.h"
#include "throw.h"

enum { PD_CHUNK = 1024, PD_DIR = 1024, PD_MAX = PD_CHUNK * PD_DIR };

static struct pdesc *pd_dir[PD_DIR] GOSHIM_LARGE;
/* 1 + the highest fd given a slot (atomic): a fork child resets the slots below it only, and
 * reads no page of the others (a page read costs a fork child too: a PVM guest's shadow
 * page table is made on first touch). */
static uint32_t pd_top;

static struct {
    uint32_t epoll_waiters; /* Gs parked that only epoll can wake; atomic */
    uint32_t nregistered;   /* atomic */
    bool no_own_pairs;      /* a fork happened: no pair is known to be written only here */
    uint64_t nparks, ndirect, nclassified;
} np;

static inline long sys(long nr, long a, long b, long c)
{
    return rt_syscall(nr, a, b, c);
}

/*
 * A descriptor's lock, marking the M inside the runtime while it is held:
 * a signal handler that makes a wrapped call meanwhile goes straight to the
 * kernel (shim/net.c) instead of taking the lock again.
 */
static struct m *pd_lock(struct pdesc *pd)
{
    struct m *mp = acquirem();
    runtime_lock(&pd->lock);
    return mp;
}

static void pd_unlock(struct pdesc *pd, struct m *mp)
{
    runtime_unlock(&pd->lock);
    releasem(mp);
}

/* ---- the descriptor table ----------------------------------------------------- */

/* A chunk of PD_CHUNK descriptors is zero pages the kernel gives as they are first touched
 * (rtpool_zeroed), and a descriptor is made at its first use: a calloc and a loop setting
 * all 1,024 wrote every page of a chunk at a process's first open, 20 page faults of every
 * threaded start here (2 us apiece on a PVM guest). The first user sets what is not zero
 * at first; another meanwhile waits. */
static void pd_make(struct pdesc *pd, int fd)
{
    uint8_t fresh = 0;
    if (__atomic_compare_exchange_n(&pd->made, &fresh, 1, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE)) {
        pd->fd = fd;
        pd->peer = -1;
        __atomic_store_n(&pd->made, 2, __ATOMIC_RELEASE);
        return;
    }
    while (__atomic_load_n(&pd->made, __ATOMIC_ACQUIRE) != 2)
        __builtin_ia32_pause();
}

static struct pdesc *pd_slot(int fd, bool create)
{
    if (fd < 0 || fd >= PD_MAX)
        return NULL;
    struct pdesc **dirp = &pd_dir[fd / PD_CHUNK];
    struct pdesc *chunk = __atomic_load_n(dirp, __ATOMIC_ACQUIRE);
    if (!chunk) {
        if (!create)
            return NULL;
        struct pdesc *fresh = rtpool_zeroed(PD_CHUNK * sizeof *fresh);
        if (!fresh)
            return NULL;
        if (__atomic_compare_exchange_n(dirp, &chunk, fresh, false, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE))
            chunk = fresh;
        else
            rtpool_zeroed_free(fresh, PD_CHUNK * sizeof *fresh); /* another published one */
    }
    uint32_t top = __atomic_load_n(&pd_top, __ATOMIC_RELAXED);
    while ((uint32_t)fd >= top &&
           !__atomic_compare_exchange_n(&pd_top, &top, (uint32_t)fd + 1, true, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED))
        ;
    struct pdesc *pd = &chunk[fd % PD_CHUNK];
    if (__atomic_load_n(&pd->made, __ATOMIC_ACQUIRE) != 2)
        pd_make(pd, fd);
    return pd;
}

struct pdesc *netpoll_lookup(int fd)
{
    return pd_slot(fd, false);
}

static void pd_set(struct pdesc *pd, int kind, bool stream, bool socket, bool user_nb)
{
    pd->kind = (uint8_t)kind;
    pd->stream = stream;
    pd->socket = socket;
    pd->user_nb = user_nb;
    pd->forced_nb = 0;
    pd->epoll = 0;
    pd->peer = -1;
    pd->timeo[0] = pd->timeo[1] = 0;
    pd->drained = 0;
    pd->emptyat = __atomic_load_n(&pd->edges, __ATOMIC_RELAXED) - 1; /* no drain seen */
    pd->inflight = 0;
    pd->writing = 0;
    pd->hup = 0;
    __atomic_store_n(&pd->init, PD_CLASSIFIED, __ATOMIC_RELEASE);
}

void netpoll_known(int fd, int kind, bool stream, bool socket, bool user_nb)
{
    struct pdesc *pd = pd_slot(fd, true);
    if (!pd)
        return;
    struct m *m_pd = pd_lock(pd);
    pd_set(pd, kind, stream, socket, user_nb);
    pd_unlock(pd, m_pd);
}

/* Classify fd as the kernel answers (fdkind.c). */
static bool classify(struct pdesc *pd)
{
    struct fd_kind k;
    __atomic_add_fetch(&np.nclassified, 1, __ATOMIC_RELAXED);
    if (!fd_kind_of(pd->fd, &k))
        return false;
    pd_set(pd, k.kind, k.stream, k.socket, k.nonblock);
    pd->timeo[PD_READ] = k.timeo[PD_READ];
    pd->timeo[PD_WRITE] = k.timeo[PD_WRITE];
    return true;
}

struct pdesc *netpoll_fd(int fd)
{
    struct pdesc *pd = pd_slot(fd, true);
    if (!pd || __atomic_load_n(&pd->init, __ATOMIC_ACQUIRE) == PD_CLASSIFIED)
        return pd;
    struct m *m_pd = pd_lock(pd);
    bool ok = pd->init == PD_CLASSIFIED || classify(pd);
    pd_unlock(pd, m_pd);
    return ok ? pd : NULL;
}

/* What open() made: taken for a file until something needs to know (PD_GUESSED). */
void netpoll_opened(int fd, int flags)
{
    struct pdesc *pd = pd_slot(fd, true);
    if (!pd)
        return;
    struct m *m_pd = pd_lock(pd);
    if (pd->init == PD_UNKNOWN) {
        pd_set(pd, PD_FILE, false, false, (flags & O_NONBLOCK) != 0);
        __atomic_store_n(&pd->init, PD_GUESSED, __ATOMIC_RELEASE);
    }
    pd_unlock(pd, m_pd);
}

/* ---- readiness ---------------------------------------------------------------- */

static bool own_pair(struct pdesc *pd)
{
    return pd->peer >= 0 && !np.no_own_pairs;
}

/* The fd may have become ready in these modes: bump, wake the waiters and
 * the poll subscribers. */
static void pd_ready(struct pdesc *pd, bool r, bool w)
{
    for (int mode = 0; mode < 2; mode++) {
        if (!(mode == PD_READ ? r : w))
            continue;
        __atomic_add_fetch(&pd->seq[mode], 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&pd->waiters[mode], __ATOMIC_SEQ_CST))
            gfutex_wake(&pd->seq[mode], INT_MAX);
    }
    if (__atomic_load_n(&pd->subs, __ATOMIC_ACQUIRE)) {
        struct m *m_pd = pd_lock(pd);
        for (struct psub *s = pd->subs; s; s = s->next) {
            __atomic_add_fetch(s->word, 1, __ATOMIC_SEQ_CST);
            gfutex_wake(s->word, 1);
        }
        pd_unlock(pd, m_pd);
    }
}

/* The other end of an own pair, if it is still that pair; else NULL. */
static struct pdesc *pd_peer(struct pdesc *pd)
{
    int peer = __atomic_load_n(&pd->peer, __ATOMIC_ACQUIRE);
    if (peer < 0 || np.no_own_pairs)
        return NULL;
    struct pdesc *pp = netpoll_lookup(peer);
    if (!pp || __atomic_load_n(&pp->gen, __ATOMIC_ACQUIRE) != pd->peergen)
        return NULL;
    return pp;
}

/* A write goshim did not see reached pd: stop treating its pair as own. */
static void pair_unown(struct pdesc *pd)
{
    struct pdesc *pp = pd_peer(pd);
    struct m *m_pd = pd_lock(pd);
    pd->peer = -1;
    pd_unlock(pd, m_pd);
    if (pp) {
        struct m *m_pp = pd_lock(pp);
        pp->peer = -1;
        pd_unlock(pp, m_pp);
    }
}

/* Around a write to pd: begin returns the other end of an own pair (NULL
 * if pd is not one) and marks a write in progress to it; end (with the
 * result) counts the bytes in flight and readies its reader. */
static struct pdesc *netpoll_write_begin(struct pdesc *pd)
{
    struct pdesc *pp = pd_peer(pd);
    if (pp)
        __atomic_add_fetch(&pp->writing, 1, __ATOMIC_SEQ_CST);
    return pp;
}

static void netpoll_write_end(struct pdesc *pp, long n)
{
    if (!pp)
        return;
    if (n > 0) {
        __atomic_add_fetch(&pp->inflight, n, __ATOMIC_SEQ_CST);
        __atomic_add_fetch(&pp->direct, 1, __ATOMIC_SEQ_CST);
        __atomic_add_fetch(&np.ndirect, 1, __ATOMIC_RELAXED);
    }
    __atomic_sub_fetch(&pp->writing, 1, __ATOMIC_SEQ_CST);
    if (n > 0)
        pd_ready(pp, true, false);
}

/* After a successful read: ready the other end's writer. More read than own
 * writes brought (and none in progress): another writer exists, and pd's pair
 * is no longer treated as own. */
static void netpoll_read_done(struct pdesc *pd, long n)
{
    if (__atomic_sub_fetch(&pd->inflight, n, __ATOMIC_SEQ_CST) < 0 && pd->peer >= 0 &&
        __atomic_load_n(&pd->writing, __ATOMIC_SEQ_CST) == 0)
        pair_unown(pd);
    struct pdesc *pp = pd_peer(pd);
    if (pp && __atomic_load_n(&pp->waiters[PD_WRITE], __ATOMIC_SEQ_CST))
        pd_ready(pp, false, true);
}

/* True when the read c is about to try is known to find nothing, without a
 * system call: registered, no hang-up reported, and either an own pair's
 * read end with nothing written through goshim left unread and no epoll
 * edge since a read found it empty, or a stream a read drained at this very
 * seq (c read seq, then edges, before). */
static bool netpoll_known_empty(const struct pdcall *c)
{
    struct pdesc *pd = c->pd;
    if (pd->epoll != 1 || __atomic_load_n(&pd->hup, __ATOMIC_SEQ_CST))
        return false;
    if (pd_peer(pd) != NULL)
        return __atomic_load_n(&pd->inflight, __ATOMIC_SEQ_CST) <= 0 &&
               __atomic_load_n(&pd->emptyat, __ATOMIC_RELAXED) == c->edges;
    return __atomic_load_n(&pd->drained, __ATOMIC_RELAXED) == c->seq + 1;
}

void netpoll_pair(int a, int b)
{
    struct pdesc *pa = netpoll_lookup(a), *pb = netpoll_lookup(b);
    if (!pa || !pb || np.no_own_pairs)
        return;
    struct m *m_pa = pd_lock(pa);
    pa->peer = b;
    pa->peergen = __atomic_load_n(&pb->gen, __ATOMIC_ACQUIRE);
    pd_unlock(pa, m_pa);
    struct m *m_pb = pd_lock(pb);
    pb->peer = a;
    pb->peergen = __atomic_load_n(&pa->gen, __ATOMIC_ACQUIRE);
    pd_unlock(pb, m_pb);
}

bool netpoll_arm(struct pdesc *pd)
{
    if (pd->epoll)
        return pd->epoll == 1;
    if (!np_ensure())
        return false; /* no instance can be made now (EMFILE): not registered, not for good */
    for (int attempt = 0;; attempt++) {
        struct m *m_pd = pd_lock(pd);
        long rc = 0;
        if (pd->epoll == 0) {
            struct epoll_event e = {
                .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLPRI | EPOLLET,
                .data.u64 = (uint64_t)(uint32_t)pd->fd | (uint64_t)pd->gen << 32,
            };
            rc = np_ctl(EPOLL_CTL_ADD, pd->fd, &e);
            if (rc == -EEXIST)
                rc = np_ctl(EPOLL_CTL_MOD, pd->fd, &e);
            if (rc == 0) {
                pd->epoll = 1;
                __atomic_add_fetch(&np.nregistered, 1, __ATOMIC_RELAXED);
            } else if ((rc != -EBADF && rc != -EINVAL) || attempt > 0) {
                pd->epoll = 2; /* EBADF and EINVAL may mean a lost instance: np_check */
            }
        }
        bool ok = pd->epoll == 1;
        bool decided = pd->epoll != 0;
        pd_unlock(pd, m_pd);
        if (decided)
            return ok;
        if (!np_check()) { /* the instance is fine: the fd is the trouble */
            m_pd = pd_lock(pd);
            if (pd->epoll == 0)
                pd->epoll = 2;
            ok = pd->epoll == 1;
            pd_unlock(pd, m_pd);
            return ok;
        }
    }
}

/* Park the calling G until pd's mode sequence differs from seq, or until
 * deadline (monotonic ns, < 0 none). 0: maybe ready; ETIMEDOUT; EINTR;
 * EBADF: closed meanwhile (gen is the generation seen before the try). */
static int netpoll_wait(struct pdesc *pd, int mode, uint32_t seq, uint32_t gen, int64_t deadline)
{
    bool counted = !own_pair(pd);
    __atomic_add_fetch(&pd->waiters[mode], 1, __ATOMIC_SEQ_CST);
    if (counted)
        __atomic_add_fetch(&np.epoll_waiters, 1, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&np.nparks, 1, __ATOMIC_RELAXED);
    int err = gfutex_wait(&pd->seq[mode], seq, deadline);
    if (counted)
        __atomic_sub_fetch(&np.epoll_waiters, 1, __ATOMIC_SEQ_CST);
    __atomic_sub_fetch(&pd->waiters[mode], 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&pd->gen, __ATOMIC_ACQUIRE) != gen)
        return EBADF;
    return err == EAGAIN ? 0 : err;
}

/* A read that parked found data: if no own write brought it (direct still
 * direct0, none in progress), another writer exists and pd's pair is no
 * longer treated as own. */
static void netpoll_read_after_park(struct pdesc *pd, uint32_t direct0)
{
    if (pd->peer >= 0 && __atomic_load_n(&pd->direct, __ATOMIC_SEQ_CST) == direct0 &&
        __atomic_load_n(&pd->writing, __ATOMIC_SEQ_CST) == 0)
        pair_unown(pd);
}

/* ---- one I/O call: the readiness protocol (netpoll.h) --------------------------- */

/* Put O_NONBLOCK on a listening socket for good (accept has no per-call flag). */
static void force_nonblock(struct pdesc *pd)
{
    struct m *m_pd = pd_lock(pd);
    if (!pd->forced_nb && !pd->user_nb) {
        long fl = sys(SYS_fcntl, pd->fd, F_GETFL, 0);
        if (fl >= 0 && sys(SYS_fcntl, pd->fd, F_SETFL, fl | O_NONBLOCK) == 0)
            pd->forced_nb = 1;
    }
    pd_unlock(pd, m_pd);
}

int netpoll_reset(struct pdcall *c, int fd, int mode, bool listening)
{
    struct pdesc *pd = pd_slot(fd, true);
    if (!pd || __atomic_load_n(&pd->init, __ATOMIC_ACQUIRE) != PD_GUESSED)
        pd = netpoll_fd(fd);
    c->pd = pd;
    if (!pd)
        return PD_NOTOPEN;
    uint8_t kind = __atomic_load_n(&pd->kind, __ATOMIC_RELAXED);
    if (kind != PD_NOWAIT)
        return kind == PD_FILE ? PD_FILEWORK : PD_HANDOFF;
    if (listening && !__atomic_load_n(&pd->forced_nb, __ATOMIC_RELAXED) &&
        !__atomic_load_n(&pd->user_nb, __ATOMIC_RELAXED))
        force_nonblock(pd);
    c->mode = mode;
    c->peer = NULL;
    c->parked = false;
    c->direct0 = 0;
    c->gen = __atomic_load_n(&pd->gen, __ATOMIC_ACQUIRE);
    int64_t timeo = __atomic_load_n(&pd->timeo[mode], __ATOMIC_RELAXED);
    c->deadline = timeo > 0 ? nanotime() + timeo : -1;
    return PD_POLL;
}

void netpoll_snapshot(struct pdcall *c)
{
    /* direct before seq: an own write bumps direct, then seq. edges after seq: netpoll
     * bumps edges, then seq, so an edge not counted in c->edges moves seq after c->seq. */
    c->direct = __atomic_load_n(&c->pd->direct, __ATOMIC_SEQ_CST);
    c->seq = __atomic_load_n(&c->pd->seq[c->mode], __ATOMIC_SEQ_CST);
    c->edges = __atomic_load_n(&c->pd->edges, __ATOMIC_SEQ_CST);
}

static bool user_nonblock(const struct pdesc *pd)
{
    return __atomic_load_n(&pd->user_nb, __ATOMIC_RELAXED);
}

bool netpoll_try_begin(struct pdcall *c)
{
    netpoll_snapshot(c);
    /* Known empty (no system call to learn it). Never after a wake-up: it
     * may come from a write goshim did not see. */
    if (!c->parked && c->mode == PD_READ && !user_nonblock(c->pd) && netpoll_known_empty(c))
        return false;
    c->peer = c->mode == PD_WRITE ? netpoll_write_begin(c->pd) : NULL;
    return true;
}

/* The read found the fd empty (EAGAIN, or a short read of a stream) at the
 * sequence and edge count read before the try. */
static void drained(struct pdcall *c, bool eagain)
{
    if (c->mode != PD_READ || !(eagain || c->pd->stream))
        return;
    if (c->pd->stream)
        __atomic_store_n(&c->pd->drained, c->seq + 1, __ATOMIC_RELAXED);
    __atomic_store_n(&c->pd->emptyat, c->edges, __ATOMIC_RELAXED);
}

int netpoll_tried(struct pdcall *c, long n, size_t rest)
{
    netpoll_write_end(c->peer, n);
    c->peer = NULL;
    if (n >= 0) {
        if (c->mode == PD_READ) {
            if ((size_t)n < rest)
                drained(c, false);
            if (c->parked && n > 0)
                netpoll_read_after_park(c->pd, c->direct0);
            if (n > 0)
                netpoll_read_done(c->pd, n);
        }
        return PD_DONE;
    }
    if (n != -EAGAIN || user_nonblock(c->pd)) /* made non-blocking meanwhile: as natively */
        return PD_FAIL;
    drained(c, true);
    return PD_WAIT;
}

void netpoll_accepted(struct pdcall *c, int fd, int flags)
{
    struct pdesc *lpd = c->pd;
    netpoll_known(fd, PD_NOWAIT, lpd->stream, true, (flags & SOCK_NONBLOCK) != 0);
    struct pdesc *pd = netpoll_lookup(fd);
    if (!pd)
        return;
    struct m *m_pd = pd_lock(pd);
    for (int mode = 0; mode < 2; mode++)
        pd->timeo[mode] = __atomic_load_n(&lpd->timeo[mode], __ATOMIC_RELAXED);
    pd_unlock(pd, m_pd);
}

bool netpoll_whole(const struct pdcall *c)
{
    return c->pd->stream && !user_nonblock(c->pd);
}

void netpoll_set_blocking(struct pdcall *c)
{
    struct m *m_pd = pd_lock(c->pd);
    __atomic_store_n(&c->pd->kind, PD_BLOCKING, __ATOMIC_RELAXED);
    pd_unlock(c->pd, m_pd);
}

bool netpoll_prepare(struct pdcall *c)
{
    if (netpoll_arm(c->pd))
        return true;
    if (netpoll_never_armed(c->pd))
        netpoll_set_blocking(c);
    return false;
}

bool netpoll_never_armed(const struct pdesc *pd)
{
    return __atomic_load_n(&pd->epoll, __ATOMIC_RELAXED) == 2;
}

int netpoll_waitcall(void *arg)
{
    struct pdcall *c = arg;
    c->direct0 = c->direct;
    c->parked = true;
    return netpoll_wait(c->pd, c->mode, c->seq, c->gen, c->deadline);
}

bool netpoll_blocking_socket(const struct pdcall *c)
{
    return c->pd->socket && !user_nonblock(c->pd);
}

bool netpoll_forced_nonblock(const struct pdcall *c)
{
    return __atomic_load_n(&c->pd->forced_nb, __ATOMIC_RELAXED);
}

/* ---- per-fd state the application sets --------------------------------------------- */

bool netpoll_set_user_nonblock(int fd, bool nb)
{
    struct pdesc *pd = netpoll_fd(fd);
    if (!pd)
        return false;
    struct m *m_pd = pd_lock(pd);
    __atomic_store_n(&pd->user_nb, nb, __ATOMIC_RELAXED);
    bool forced = pd->forced_nb;
    pd_unlock(pd, m_pd);
    return forced;
}

int netpoll_getfl(int fd, int fl)
{
    struct pdesc *pd = netpoll_lookup(fd);
    if (fl >= 0 && pd && __atomic_load_n(&pd->init, __ATOMIC_ACQUIRE) &&
        __atomic_load_n(&pd->forced_nb, __ATOMIC_RELAXED) && !user_nonblock(pd))
        fl &= ~O_NONBLOCK; /* ours, not the application's */
    return fl;
}

void netpoll_set_timeout(int fd, int mode, int64_t ns)
{
    struct pdesc *pd = netpoll_fd(fd);
    if (!pd)
        return;
    struct m *m_pd = pd_lock(pd);
    __atomic_store_n(&pd->timeo[mode], ns > 0 ? ns : 0, __ATOMIC_RELAXED);
    pd_unlock(pd, m_pd);
}

/* A new epoll instance replaced a lost one (netpoll_epoll.c): register
 * again every fd that was, and wake their waiters and poll subscribers to
 * look again. */
void netpoll_remade(void)
{
    for (int d = 0; d < PD_DIR; d++) {
        struct pdesc *chunk = __atomic_load_n(&pd_dir[d], __ATOMIC_ACQUIRE);
        for (int i = 0; chunk && i < PD_CHUNK; i++) {
            struct pdesc *pd = &chunk[i];
            if (__atomic_load_n(&pd->epoll, __ATOMIC_RELAXED) != 1)
                continue;
            struct m *m_pd = pd_lock(pd);
            if (pd->epoll == 1) {
                struct epoll_event e = {
                    .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLPRI | EPOLLET,
                    .data.u64 = (uint64_t)(uint32_t)pd->fd | (uint64_t)pd->gen << 32,
                };
                long rc = np_ctl(EPOLL_CTL_ADD, pd->fd, &e);
                if (rc != 0 && rc != -EEXIST) { /* registered again at its next wait */
                    pd->epoll = 0;
                    __atomic_sub_fetch(&np.nregistered, 1, __ATOMIC_RELAXED);
                }
            }
            pd_unlock(pd, m_pd);
            pd_ready(pd, true, true);
        }
    }
}

/* ---- close, dup, fork ----------------------------------------------------------- */

void netpoll_close(int fd)
{
    struct pdesc *pd = netpoll_lookup(fd);
    if (!pd)
        return;
    struct pdesc *pp = pd_peer(pd);
    struct m *m_pd = pd_lock(pd);
    __atomic_add_fetch(&pd->gen, 1, __ATOMIC_SEQ_CST);
    if (pd->epoll == 1) {
        np_ctl(EPOLL_CTL_DEL, fd, NULL);
        __atomic_sub_fetch(&np.nregistered, 1, __ATOMIC_RELAXED);
    }
    pd->epoll = 0;
    pd->peer = -1;
    __atomic_store_n(&pd->init, PD_UNKNOWN, __ATOMIC_RELEASE);
    pd_unlock(pd, m_pd);
    pd_ready(pd, true, true); /* waiters see the new generation: EBADF */
    if (pp) {
        struct m *m_pp = pd_lock(pp);
        pp->peer = -1;
        pd_unlock(pp, m_pp);
        __atomic_store_n(&pp->hup, 1, __ATOMIC_SEQ_CST);
        pd_ready(pp, true, true); /* EOF for a reader, EPIPE for a writer */
    }
}

void netpoll_close_range(unsigned first, unsigned last)
{
    for (unsigned fd = first; fd <= last && fd < (unsigned)INT_MAX; fd++) {
        struct pdesc *pd = netpoll_lookup((int)fd);
        if (!pd) {
            fd |= PD_CHUNK - 1; /* no chunk here: skip it */
            continue;
        }
        if (__atomic_load_n(&pd->init, __ATOMIC_ACQUIRE) && !ownfd_is((int)fd))
            netpoll_close((int)fd);
    }
}

void netpoll_dup(int oldfd, int newfd)
{
    struct pdesc *pd = netpoll_lookup(oldfd);
    if (pd && pd->peer >= 0)
        pair_unown(pd);
    struct pdesc *old =
        pd && __atomic_load_n(&pd->init, __ATOMIC_ACQUIRE) == PD_CLASSIFIED ? pd : NULL;
    if (old && newfd >= 0) {
        /* Same open file: same kind, same O_NONBLOCK (ours and the user's). */
        struct pdesc *nd = pd_slot(newfd, true);
        if (nd) {
            struct m *m_nd = pd_lock(nd);
            pd_set(nd, old->kind, old->stream, old->socket, old->user_nb);
            nd->forced_nb = old->forced_nb;
            nd->timeo[0] = old->timeo[0];
            nd->timeo[1] = old->timeo[1];
            pd_unlock(nd, m_nd);
        }
    }
}

void netpoll_fork_parent(void)
{
    FORK_SET(np.no_own_pairs, true);
}

/* Fork child, at once: the parent's epoll instance closed, never touched again. */
FORK_TEXT void netpoll_fork_own(void)
{
    FORK_SET(np.no_own_pairs, true);
    np_fork_child();
}

/* Fork child, when it first needs the runtime (sched_fork_settle): the descriptors' state
 * was the parent's threads'. */
void netpoll_fork_child(void)
{
    uint32_t top = pd_top;
    for (uint32_t d = 0; d * PD_CHUNK < top; d++) {
        struct pdesc *chunk = pd_dir[d];
        for (uint32_t i = 0; chunk && i < PD_CHUNK && d * PD_CHUNK + i < top; i++) {
            struct pdesc *pd = &chunk[i];
            if (pd->made == 1) { /* a thread the child does not have was making it */
                pd->fd = (int)(d * PD_CHUNK + i);
                pd->peer = -1;
                pd->made = 2;
            }
            if (pd->lock.key == 0 && pd->epoll == 0 && pd->subs == NULL && pd->waiters[0] == 0 &&
                pd->waiters[1] == 0)
                continue;     /* a read: writing a chunk's 1,024 entries copied all its pages */
            pd->lock.key = 0; /* a thread the child does not have may have held it */
            pd->epoll = 0;
            pd->subs = NULL;
            pd->waiters[0] = pd->waiters[1] = 0;
        }
    }
    FORK_SET(np.epoll_waiters, 0);
    FORK_SET(np.nregistered, 0);
}

/* ---- poll subscribers --------------------------------------------------------- */

void netpoll_subscribe(struct pdesc *pd, struct psub *s, uint32_t *word)
{
    s->pd = pd;
    s->word = word;
    s->prev = NULL;
    struct m *m_pd = pd_lock(pd);
    s->next = pd->subs;
    if (pd->subs)
        pd->subs->prev = s;
    __atomic_store_n(&pd->subs, s, __ATOMIC_RELEASE);
    pd_unlock(pd, m_pd);
    s->counted = !own_pair(pd);
    if (s->counted)
        __atomic_add_fetch(&np.epoll_waiters, 1, __ATOMIC_SEQ_CST);
}

void netpoll_unsubscribe(struct psub *s)
{
    struct pdesc *pd = s->pd;
    struct m *m_pd = pd_lock(pd);
    if (s->prev)
        s->prev->next = s->next;
    else
        __atomic_store_n(&pd->subs, s->next, __ATOMIC_RELEASE);
    if (s->next)
        s->next->prev = s->prev;
    pd_unlock(pd, m_pd);
    if (s->counted)
        __atomic_sub_fetch(&np.epoll_waiters, 1, __ATOMIC_SEQ_CST);
}

bool netpoll_event(uint64_t data, uint32_t e)
{
    int fd = (int)(uint32_t)data;
    uint32_t gen = (uint32_t)(data >> 32);
    struct pdesc *pd = netpoll_lookup(fd);
    if (!pd || __atomic_load_n(&pd->gen, __ATOMIC_ACQUIRE) != gen)
        return false;
    bool r = e & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR | EPOLLPRI);
    bool w = e & (EPOLLOUT | EPOLLHUP | EPOLLERR);
    if (e & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
        __atomic_store_n(&pd->hup, 1, __ATOMIC_SEQ_CST); /* before the seq moves */
    if (r)
        __atomic_add_fetch(&pd->edges, 1, __ATOMIC_SEQ_CST); /* before the seq moves */
    pd_ready(pd, r, w);
    return true;
}

bool netpoll_anywaiters(void)
{
    return __atomic_load_n(&np.epoll_waiters, __ATOMIC_SEQ_CST) != 0;
}

bool netpoll_anyregistered(void)
{
    return __atomic_load_n(&np.nregistered, __ATOMIC_RELAXED) != 0;
}

void netpoll_stats(struct netpoll_stats *s)
{
    np_poll_stats(&s->polls, &s->events);
    s->parks = __atomic_load_n(&np.nparks, __ATOMIC_RELAXED);
    s->direct = __atomic_load_n(&np.ndirect, __ATOMIC_RELAXED);
    s->classified = __atomic_load_n(&np.nclassified, __ATOMIC_RELAXED);
}
