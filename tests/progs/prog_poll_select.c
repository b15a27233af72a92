/*
 * poll, ppoll, select, pselect and epoll_wait across threads.
 *
 *   prog_poll_select
 *
 * A waiter thread blocks (no timeout) on the read ends of four pipes while
 * another thread writes to pipe 2: each call must report exactly that fd
 * with POLLIN. Also: timeout 0 returns 0 when nothing is ready; two
 * ready at once; two threads waiting on the same pipe are both woken;
 * POLLNVAL for a closed fd (select: EBADF); POLLHUP/EPOLLHUP when the
 * write end is closed while a thread waits; POLLOUT on a pipe's write
 * end; EPOLLET reports one event per write, level-triggered epoll reports
 * readiness while data is unread.
 *
 * Output: one line per check in a fixed order, describing what was
 * reported; exit 0. A wrong result is reported on stderr with exit 1.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <unistd.h>

#include "prog_check.h"

#define NP 4

enum mech { M_POLL, M_PPOLL, M_SELECT, M_PSELECT, M_EPOLL };
static const char *const mech_name[] = {"poll", "ppoll", "select", "pselect", "epoll_wait"};

struct waiter {
    enum mech mech;
    int n;
    int fds[NP];
    int ep;         /* M_EPOLL: fds registered with data.u32 = index */
    int timeout_ms; /* -1: none */
    sem_t ready;
    int ret, err;
    unsigned revents[NP];
};

static void do_wait(struct waiter *w)
{
    struct pollfd pf[NP];
    fd_set rs;
    int maxfd = -1;
    struct timeval tv, *tvp = NULL;
    struct timespec ts, *tsp = NULL;
    struct epoll_event ev[NP];

    memset(w->revents, 0, sizeof w->revents);
    if (w->timeout_ms >= 0) {
        tv = (struct timeval){w->timeout_ms / 1000, (w->timeout_ms % 1000) * 1000};
        ts = (struct timespec){w->timeout_ms / 1000, (w->timeout_ms % 1000) * 1000000L};
        tvp = &tv;
        tsp = &ts;
    }
    FD_ZERO(&rs);
    for (int i = 0; i < w->n; i++) {
        pf[i] = (struct pollfd){.fd = w->fds[i], .events = POLLIN};
        FD_SET(w->fds[i], &rs);
        if (w->fds[i] > maxfd)
            maxfd = w->fds[i];
    }
    switch (w->mech) {
    case M_POLL:
        w->ret = poll(pf, (nfds_t)w->n, w->timeout_ms);
        break;
    case M_PPOLL:
        w->ret = ppoll(pf, (nfds_t)w->n, tsp, NULL);
        break;
    case M_SELECT:
        w->ret = select(maxfd + 1, &rs, NULL, NULL, tvp);
        break;
    case M_PSELECT:
        w->ret = pselect(maxfd + 1, &rs, NULL, NULL, tsp, NULL);
        break;
    case M_EPOLL:
        w->ret = epoll_wait(w->ep, ev, NP, w->timeout_ms);
        break;
    }
    w->err = errno;
    if (w->ret <= 0)
        return;
    for (int i = 0; i < w->n; i++) {
        if (w->mech == M_POLL || w->mech == M_PPOLL)
            w->revents[i] = (unsigned)pf[i].revents;
        else if (w->mech == M_SELECT || w->mech == M_PSELECT)
            w->revents[i] = FD_ISSET(w->fds[i], &rs) ? POLLIN : 0;
    }
    if (w->mech == M_EPOLL) {
        for (int k = 0; k < w->ret; k++) {
            if (ev[k].data.u32 >= (uint32_t)w->n) {
                fprintf(stderr, "prog_poll_select: epoll_wait: unknown data %u\n", ev[k].data.u32);
                exit(1);
            }
            w->revents[ev[k].data.u32] = ev[k].events;
        }
    }
}

static void *waiter_fn(void *arg)
{
    struct waiter *w = arg;
    CHECK(sem_post(&w->ready) == 0);
    do_wait(w);
    return NULL;
}

/* What to do to the pipes once the waiters are about to wait. */
struct action {
    int write_fd; /* write a byte here, or -1 */
    int close_fd; /* close this, or -1 */
};

static void *actor_fn(void *arg)
{
    struct action *a = arg;
    if (a->write_fd >= 0)
        CHECK(write(a->write_fd, "w", 1) == 1);
    if (a->close_fd >= 0)
        CHECK(close(a->close_fd) == 0);
    return NULL;
}

static const char *describe(unsigned ev)
{
    static char buf[128];
    buf[0] = '\0';
    if (ev == 0)
        return "none";
    if (ev & POLLIN)
        strcat(buf, "|POLLIN");
    if (ev & POLLOUT)
        strcat(buf, "|POLLOUT");
    if (ev & POLLERR)
        strcat(buf, "|POLLERR");
    if (ev & POLLHUP)
        strcat(buf, "|POLLHUP");
    if (ev & POLLNVAL)
        strcat(buf, "|POLLNVAL");
    unsigned rest = ev & ~(unsigned)(POLLIN | POLLOUT | POLLERR | POLLHUP | POLLNVAL);
    if (rest)
        snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "|%#x", rest);
    return buf + 1;
}

/* w reported ret, and revents[i] == want[i] for every fd. */
static void expect_result(const char *check, const struct waiter *w, int ret, const unsigned *want)
{
    int bad = w->ret != ret;
    for (int i = 0; i < w->n; i++)
        bad |= w->revents[i] != want[i];
    if (!bad)
        return;
    fprintf(stderr, "prog_poll_select: %s: %s returned %d (errno %d: %s), want %d\n", check,
            mech_name[w->mech], w->ret, w->err, strerror(w->err), ret);
    for (int i = 0; i < w->n; i++)
        fprintf(stderr, "  fd %d: %s", i, describe(w->revents[i]));
    for (int i = 0; i < w->n; i++)
        fprintf(stderr, "%s want %s", i ? "," : "\n ", describe(want[i]));
    fprintf(stderr, "\n");
    exit(1);
}

struct pipes {
    int r[NP], w[NP];
};

static void open_pipes(struct pipes *p)
{
    for (int i = 0; i < NP; i++) {
        int fd[2];
        CHECK(pipe2(fd, O_CLOEXEC) == 0);
        p->r[i] = fd[0];
        p->w[i] = fd[1];
    }
}

static void close_pipes(struct pipes *p)
{
    for (int i = 0; i < NP; i++) {
        if (p->r[i] >= 0)
            CHECK(close(p->r[i]) == 0);
        if (p->w[i] >= 0)
            CHECK(close(p->w[i]) == 0);
    }
}

static int epoll_for(const int *fds, int n, uint32_t events)
{
    int ep = epoll_create1(EPOLL_CLOEXEC);
    CHECK(ep >= 0);
    for (int i = 0; i < n; i++) {
        struct epoll_event ev = {.events = events, .data.u32 = (uint32_t)i};
        CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev) == 0);
    }
    return ep;
}

static void init_waiter(struct waiter *w, enum mech m, const int *fds, int n, int timeout_ms)
{
    memset(w, 0, sizeof *w);
    w->mech = m;
    w->n = n;
    memcpy(w->fds, fds, sizeof(int) * (size_t)n);
    w->timeout_ms = timeout_ms;
    w->ep = m == M_EPOLL ? epoll_for(fds, n, EPOLLIN) : -1;
    CHECK(sem_init(&w->ready, 0, 0) == 0);
}

static void fini_waiter(struct waiter *w)
{
    if (w->ep >= 0)
        CHECK(close(w->ep) == 0);
    CHECK(sem_destroy(&w->ready) == 0);
}

/* nw waiters in threads; once all have said they are about to wait, an actor thread acts. */
static void run_threads(struct waiter *ws, int nw, int write_fd, int close_fd)
{
    pthread_t tw[2], ta;
    struct action a = {.write_fd = write_fd, .close_fd = close_fd};
    for (int i = 0; i < nw; i++)
        EXPECT(pthread_create(&tw[i], NULL, waiter_fn, &ws[i]), 0);
    for (int i = 0; i < nw; i++)
        CHECK(wait_sem(&ws[i].ready) == 0);
    EXPECT(pthread_create(&ta, NULL, actor_fn, &a), 0);
    for (int i = 0; i < nw; i++)
        EXPECT(pthread_join(tw[i], NULL), 0);
    EXPECT(pthread_join(ta, NULL), 0);
}

static void drain(int fd)
{
    char c;
    CHECK(read(fd, &c, 1) == 1);
}

static const unsigned none[NP] = {0, 0, 0, 0};

/* One of four pipes written by another thread while a thread waits. */
static void woken_by_another_thread(void)
{
    struct pipes p;
    struct waiter w[1];
    for (enum mech m = M_POLL; m <= M_EPOLL; m++) {
        open_pipes(&p);
        init_waiter(&w[0], m, p.r, NP, -1);
        run_threads(w, 1, p.w[2], -1);
        const unsigned want[NP] = {0, 0, POLLIN, 0};
        expect_result("one of four written by another thread", &w[0], 1, want);
        printf("%s: woken by another thread: fd 2 of 4 ready, %s\n", mech_name[m],
               describe(w[0].revents[2]));
        fini_waiter(&w[0]);
        close_pipes(&p);
    }
}

/* Timeout 0 with nothing ready: 0 at once. Then two ready before the call: both reported. */
static void timeout_0_and_two_ready(void)
{
    struct pipes p;
    struct waiter w[1];
    open_pipes(&p);
    for (enum mech m = M_POLL; m <= M_EPOLL; m++) {
        init_waiter(&w[0], m, p.r, NP, 0);
        do_wait(&w[0]);
        expect_result("timeout 0, nothing ready", &w[0], 0, none);
        printf("%s: timeout 0, nothing ready: returns 0\n", mech_name[m]);
        fini_waiter(&w[0]);
    }

    CHECK(write(p.w[1], "a", 1) == 1 && write(p.w[3], "b", 1) == 1);
    for (enum mech m = M_POLL; m <= M_EPOLL; m++) {
        init_waiter(&w[0], m, p.r, NP, -1);
        do_wait(&w[0]);
        const unsigned want[NP] = {0, POLLIN, 0, POLLIN};
        expect_result("two ready", &w[0], 2, want);
        printf("%s: two ready: fds 1 and 3\n", mech_name[m]);
        fini_waiter(&w[0]);
    }
    drain(p.r[1]);
    drain(p.r[3]);
    close_pipes(&p);
}

/* Two threads wait on the same pipe: one write wakes both. */
static void two_waiters_one_pipe(void)
{
    struct pipes p;
    struct waiter w[2];
    for (enum mech m = M_POLL; m <= M_EPOLL; m++) {
        open_pipes(&p);
        init_waiter(&w[0], m, p.r, 1, -1);
        init_waiter(&w[1], m, p.r, 1, -1);
        run_threads(w, 2, p.w[0], -1);
        const unsigned want[1] = {POLLIN};
        expect_result("two waiters, same pipe (first)", &w[0], 1, want);
        expect_result("two waiters, same pipe (second)", &w[1], 1, want);
        printf("%s: two threads waiting on one pipe: both woken\n", mech_name[m]);
        fini_waiter(&w[0]);
        fini_waiter(&w[1]);
        close_pipes(&p);
    }
}

/* A closed fd: POLLNVAL from poll (the other fd not ready), EBADF from select. */
static void closed_fd(void)
{
    struct pipes p;
    struct waiter w[1];
    open_pipes(&p);
    /* A high number nobody reuses (a runtime may open descriptors of its own meanwhile). */
    int closed = fcntl(p.r[0], F_DUPFD_CLOEXEC, 512);
    CHECK(closed >= 512 && closed < FD_SETSIZE);
    CHECK(close(closed) == 0);
    int fds[2] = {closed, p.r[1]};
    for (enum mech m = M_POLL; m <= M_PPOLL; m++) {
        init_waiter(&w[0], m, fds, 2, 5000);
        do_wait(&w[0]);
        const unsigned want[2] = {POLLNVAL, 0};
        expect_result("closed fd", &w[0], 1, want);
        printf("%s: closed fd: %s\n", mech_name[m], describe(w[0].revents[0]));
        fini_waiter(&w[0]);
    }
    for (enum mech m = M_SELECT; m <= M_PSELECT; m++) {
        init_waiter(&w[0], m, fds, 2, 5000);
        do_wait(&w[0]);
        if (w[0].ret != -1 || w[0].err != EBADF) {
            fprintf(stderr, "prog_poll_select: %s on a closed fd returned %d (%s), want EBADF\n",
                    mech_name[m], w[0].ret, strerror(w[0].err));
            exit(1);
        }
        printf("%s: closed fd: EBADF\n", mech_name[m]);
        fini_waiter(&w[0]);
    }
    close_pipes(&p);
}

/* The write end closed by another thread while a thread waits: POLLHUP alone. Then POLLOUT
 * on an empty pipe's write end. */
static void hangup_and_pollout(void)
{
    struct pipes p;
    struct waiter w[1];
    for (enum mech m = M_POLL; m <= M_EPOLL; m++) {
        open_pipes(&p);
        init_waiter(&w[0], m, p.r, 1, -1);
        run_threads(w, 1, -1, p.w[0]);
        p.w[0] = -1;
        const unsigned want[1] = {m == M_SELECT || m == M_PSELECT ? POLLIN : POLLHUP};
        expect_result("write end closed", &w[0], 1, want);
        printf("%s: write end closed by another thread: %s\n", mech_name[m],
               m == M_SELECT || m == M_PSELECT ? "readable (EOF)" : describe(w[0].revents[0]));
        fini_waiter(&w[0]);
        close_pipes(&p);
    }

    open_pipes(&p);
    struct pollfd pf = {.fd = p.w[0], .events = POLLOUT | POLLIN};
    EXPECT(poll(&pf, 1, 5000), 1);
    if (pf.revents != POLLOUT) {
        fprintf(stderr, "prog_poll_select: write end: %s, want POLLOUT\n", describe(pf.revents));
        exit(1);
    }
    printf("poll: empty pipe's write end: POLLOUT\n");
    close_pipes(&p);
}

/* Level-triggered epoll: ready as long as data is unread. EPOLLET: one event per write,
 * even with data left unread; waits across threads. */
static void epoll_triggers(void)
{
    struct pipes p;
    struct waiter w[1];
    open_pipes(&p);
    int ep = epoll_for(p.r, 1, EPOLLIN);
    struct epoll_event ev;
    CHECK(write(p.w[0], "x", 1) == 1);
    EXPECT(epoll_wait(ep, &ev, 1, 5000), 1);
    EXPECT(epoll_wait(ep, &ev, 1, 0), 1);
    drain(p.r[0]);
    EXPECT(epoll_wait(ep, &ev, 1, 0), 0);
    printf("epoll_wait: level-triggered: ready while data is unread\n");
    CHECK(close(ep) == 0);
    close_pipes(&p);

    open_pipes(&p);
    init_waiter(&w[0], M_EPOLL, p.r, 1, -1);
    struct epoll_event et = {.events = EPOLLIN | EPOLLET, .data.u32 = 0};
    CHECK(epoll_ctl(w[0].ep, EPOLL_CTL_MOD, p.r[0], &et) == 0);
    const unsigned want_in[1] = {EPOLLIN};
    run_threads(w, 1, p.w[0], -1); /* edge 1, from another thread */
    expect_result("EPOLLET first write", &w[0], 1, want_in);
    EXPECT(epoll_wait(w[0].ep, &ev, 1, 0), 0); /* no new edge: data unread, still 0 */
    run_threads(w, 1, p.w[0], -1);             /* edge 2 */
    expect_result("EPOLLET second write", &w[0], 1, want_in);
    drain(p.r[0]); /* one of two bytes */
    EXPECT(epoll_wait(w[0].ep, &ev, 1, 0), 0);
    printf("epoll_wait: EPOLLET: one event per write, none for unread data\n");
    fini_waiter(&w[0]);
    close_pipes(&p);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    woken_by_another_thread();
    timeout_0_and_two_ready();
    two_waiters_one_pipe();
    closed_fd();
    hangup_and_pollout();
    epoll_triggers();
    return 0;
}
