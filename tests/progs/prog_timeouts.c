/*
 * Timed waits end on time: not early, and late by less than a generous
 * bound (never a speed claim).
 *
 *   prog_timeouts [MS [SLACK_MS]]  (defaults 30 and 1000)
 *
 * Every case waits MS milliseconds for something that never happens:
 * sleeps (nanosleep, usleep, clock_nanosleep relative and TIMER_ABSTIME on
 * CLOCK_MONOTONIC and CLOCK_REALTIME), pthread_cond_timedwait (realtime
 * and monotonic condattr clock), pthread_mutex_timedlock on a mutex held
 * by another thread, sem_timedwait, pthread_timedjoin_np, poll, ppoll,
 * select, pselect and epoll_wait on a pipe that never becomes readable,
 * and SO_RCVTIMEO (recv on a socketpair and a TCP socket, accept on a
 * listener) failing with EAGAIN. Each must return the timeout result
 * after at least MS (realtime deadlines may be 1 ms early: the program
 * measures on CLOCK_MONOTONIC; SO_RCVTIMEO counts in kernel jiffies and
 * may lose one, so it may be 10 ms early) and before MS + SLACK_MS.
 * Then all cases run again at once, one thread each.
 *
 * Output: "NAME: ok" per case, then "concurrent NAME: ok" per case, in a
 * fixed order; exit 0. A failure is reported on stderr with exit 1.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "prog_check.h"

static long wait_ms = 30, slack_ms = 1000;

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static struct timespec rel(long ms)
{
    return (struct timespec){ms / 1000, (ms % 1000) * 1000000};
}

static void want_rc(const char *name, const char *what, long got, long want, int err)
{
    if (got != want) {
        fprintf(stderr, "prog_timeouts: %s: %s returned %ld (errno %d: %s), want %ld\n", name, what,
                got, err, strerror(err), want);
        exit(1);
    }
}

static void want_errno(const char *name, const char *what, long got, int err, int want)
{
    if (got != -1 || err != want) {
        fprintf(stderr, "prog_timeouts: %s: %s returned %ld (errno %d: %s), want -1 %s\n", name,
                what, got, err, strerror(err), strerror(want));
        exit(1);
    }
}

/* Each case waits ms and returns the nanoseconds it took on CLOCK_MONOTONIC. */

static int64_t c_nanosleep(const char *name, long ms)
{
    struct timespec ts = rel(ms);
    int64_t t0 = mono_ns();
    int r = nanosleep(&ts, NULL);
    int64_t d = mono_ns() - t0;
    want_rc(name, "nanosleep", r, 0, errno);
    return d;
}

static int64_t c_usleep(const char *name, long ms)
{
    int64_t t0 = mono_ns();
    int r = usleep((useconds_t)(ms * 1000));
    int64_t d = mono_ns() - t0;
    want_rc(name, "usleep", r, 0, errno);
    return d;
}

static int64_t clock_rel(const char *name, clockid_t clk, long ms)
{
    struct timespec ts = rel(ms);
    int64_t t0 = mono_ns();
    int r = clock_nanosleep(clk, 0, &ts, NULL);
    int64_t d = mono_ns() - t0;
    want_rc(name, "clock_nanosleep", r, 0, r);
    return d;
}

static int64_t clock_abs(const char *name, clockid_t clk, long ms)
{
    int64_t t0 = mono_ns();
    struct timespec dl = in_ms(clk, ms);
    int r = clock_nanosleep(clk, TIMER_ABSTIME, &dl, NULL);
    int64_t d = mono_ns() - t0;
    want_rc(name, "clock_nanosleep", r, 0, r);
    return d;
}

static int64_t c_clock_mono_rel(const char *name, long ms)
{
    return clock_rel(name, CLOCK_MONOTONIC, ms);
}

static int64_t c_clock_real_rel(const char *name, long ms)
{
    return clock_rel(name, CLOCK_REALTIME, ms);
}

static int64_t c_clock_mono_abs(const char *name, long ms)
{
    return clock_abs(name, CLOCK_MONOTONIC, ms);
}

static int64_t c_clock_real_abs(const char *name, long ms)
{
    return clock_abs(name, CLOCK_REALTIME, ms);
}

static int64_t cond_wait_on(const char *name, clockid_t clk, long ms)
{
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t c;
    pthread_condattr_t ca;
    EXPECT(pthread_condattr_init(&ca), 0);
    EXPECT(pthread_condattr_setclock(&ca, clk), 0);
    EXPECT(pthread_cond_init(&c, &ca), 0);
    EXPECT(pthread_mutex_lock(&m), 0);
    int64_t t0 = mono_ns();
    struct timespec dl = in_ms(clk, ms);
    int r;
    do
        r = pthread_cond_timedwait(&c, &m, &dl); /* nobody signals: a spurious wake waits again */
    while (r == 0);
    int64_t d = mono_ns() - t0;
    want_rc(name, "pthread_cond_timedwait", r, ETIMEDOUT, r);
    EXPECT(pthread_mutex_unlock(&m), 0);
    EXPECT(pthread_cond_destroy(&c), 0);
    EXPECT(pthread_condattr_destroy(&ca), 0);
    return d;
}

static int64_t c_cond_real(const char *name, long ms)
{
    return cond_wait_on(name, CLOCK_REALTIME, ms);
}

static int64_t c_cond_mono(const char *name, long ms)
{
    return cond_wait_on(name, CLOCK_MONOTONIC, ms);
}

struct holder {
    pthread_mutex_t m;
    sem_t held, release;
};

static void *hold_mutex(void *arg)
{
    struct holder *h = arg;
    EXPECT(pthread_mutex_lock(&h->m), 0);
    CHECK(sem_post(&h->held) == 0);
    CHECK(wait_sem(&h->release) == 0);
    EXPECT(pthread_mutex_unlock(&h->m), 0);
    return NULL;
}

static int64_t c_mutex_timedlock(const char *name, long ms)
{
    struct holder h = {.m = PTHREAD_MUTEX_INITIALIZER};
    CHECK(sem_init(&h.held, 0, 0) == 0 && sem_init(&h.release, 0, 0) == 0);
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, hold_mutex, &h), 0);
    CHECK(wait_sem(&h.held) == 0);
    int64_t t0 = mono_ns();
    struct timespec dl = in_ms(CLOCK_REALTIME, ms);
    int r = pthread_mutex_timedlock(&h.m, &dl);
    int64_t d = mono_ns() - t0;
    want_rc(name, "pthread_mutex_timedlock", r, ETIMEDOUT, r);
    CHECK(sem_post(&h.release) == 0);
    EXPECT(pthread_join(t, NULL), 0);
    EXPECT(pthread_mutex_lock(&h.m), 0); /* released: free again */
    EXPECT(pthread_mutex_unlock(&h.m), 0);
    CHECK(sem_destroy(&h.held) == 0 && sem_destroy(&h.release) == 0);
    return d;
}

static int64_t c_sem_timedwait(const char *name, long ms)
{
    sem_t s;
    CHECK(sem_init(&s, 0, 0) == 0);
    int64_t t0 = mono_ns();
    struct timespec dl = in_ms(CLOCK_REALTIME, ms);
    int r;
    while ((r = sem_timedwait(&s, &dl)) == -1 && errno == EINTR)
        ;
    int64_t d = mono_ns() - t0;
    want_errno(name, "sem_timedwait", r, errno, ETIMEDOUT);
    CHECK(sem_destroy(&s) == 0);
    return d;
}

static void *wait_release(void *arg)
{
    CHECK(wait_sem(arg) == 0);
    return (void *)(intptr_t)42;
}

static int64_t c_timedjoin(const char *name, long ms)
{
    sem_t release;
    CHECK(sem_init(&release, 0, 0) == 0);
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, wait_release, &release), 0);
    int64_t t0 = mono_ns();
    struct timespec dl = in_ms(CLOCK_REALTIME, ms);
    int r = pthread_timedjoin_np(t, NULL, &dl);
    int64_t d = mono_ns() - t0;
    want_rc(name, "pthread_timedjoin_np", r, ETIMEDOUT, r);
    CHECK(sem_post(&release) == 0);
    void *ret = NULL;
    EXPECT(pthread_join(t, &ret), 0);
    want_rc(name, "the joined thread", (long)(intptr_t)ret, 42, 0);
    CHECK(sem_destroy(&release) == 0);
    return d;
}

/* The fd-based cases wait on the read end of a pipe nobody writes to. */

static int64_t c_poll(const char *name, long ms)
{
    int p[2];
    CHECK(pipe(p) == 0);
    struct pollfd pf = {.fd = p[0], .events = POLLIN};
    int64_t t0 = mono_ns();
    int r = poll(&pf, 1, (int)ms);
    int64_t d = mono_ns() - t0;
    want_rc(name, "poll", r, 0, errno);
    CHECK(close(p[0]) == 0 && close(p[1]) == 0);
    return d;
}

static int64_t c_ppoll(const char *name, long ms)
{
    int p[2];
    CHECK(pipe(p) == 0);
    struct pollfd pf = {.fd = p[0], .events = POLLIN};
    struct timespec ts = rel(ms);
    int64_t t0 = mono_ns();
    int r = ppoll(&pf, 1, &ts, NULL);
    int64_t d = mono_ns() - t0;
    want_rc(name, "ppoll", r, 0, errno);
    CHECK(close(p[0]) == 0 && close(p[1]) == 0);
    return d;
}

static int64_t c_select(const char *name, long ms)
{
    int p[2];
    CHECK(pipe(p) == 0);
    fd_set rs;
    FD_ZERO(&rs);
    FD_SET(p[0], &rs);
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    int64_t t0 = mono_ns();
    int r = select(p[0] + 1, &rs, NULL, NULL, &tv);
    int64_t d = mono_ns() - t0;
    want_rc(name, "select", r, 0, errno);
    CHECK(close(p[0]) == 0 && close(p[1]) == 0);
    return d;
}

static int64_t c_pselect(const char *name, long ms)
{
    int p[2];
    CHECK(pipe(p) == 0);
    fd_set rs;
    FD_ZERO(&rs);
    FD_SET(p[0], &rs);
    struct timespec ts = rel(ms);
    int64_t t0 = mono_ns();
    int r = pselect(p[0] + 1, &rs, NULL, NULL, &ts, NULL);
    int64_t d = mono_ns() - t0;
    want_rc(name, "pselect", r, 0, errno);
    CHECK(close(p[0]) == 0 && close(p[1]) == 0);
    return d;
}

static int64_t c_epoll_wait(const char *name, long ms)
{
    int p[2];
    CHECK(pipe(p) == 0);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    CHECK(ep >= 0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = p[0]};
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ev) == 0);
    int64_t t0 = mono_ns();
    int r = epoll_wait(ep, &ev, 1, (int)ms);
    int64_t d = mono_ns() - t0;
    want_rc(name, "epoll_wait", r, 0, errno);
    CHECK(close(ep) == 0 && close(p[0]) == 0 && close(p[1]) == 0);
    return d;
}

static void set_rcvtimeo(int fd, long ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    CHECK(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0);
}

static int64_t c_rcvtimeo_unix(const char *name, long ms)
{
    int sv[2];
    char c;
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    set_rcvtimeo(sv[0], ms);
    int64_t t0 = mono_ns();
    ssize_t r = recv(sv[0], &c, 1, 0);
    int64_t d = mono_ns() - t0;
    int err = errno == EWOULDBLOCK ? EAGAIN : errno;
    want_errno(name, "recv", r, err, EAGAIN);
    CHECK(close(sv[0]) == 0 && close(sv[1]) == 0);
    return d;
}

static int tcp_listener(struct sockaddr_in *a)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    memset(a, 0, sizeof *a);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(bind(fd, (struct sockaddr *)a, sizeof *a) == 0);
    socklen_t len = sizeof *a;
    CHECK(getsockname(fd, (struct sockaddr *)a, &len) == 0);
    CHECK(listen(fd, 4) == 0);
    return fd;
}

static int64_t c_rcvtimeo_tcp(const char *name, long ms)
{
    struct sockaddr_in a;
    int lfd = tcp_listener(&a);
    int cfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(cfd >= 0);
    CHECK(connect(cfd, (struct sockaddr *)&a, sizeof a) == 0);
    int afd = accept(lfd, NULL, NULL);
    CHECK(afd >= 0);
    set_rcvtimeo(afd, ms);
    char c;
    int64_t t0 = mono_ns();
    ssize_t r = recv(afd, &c, 1, 0);
    int64_t d = mono_ns() - t0;
    int err = errno == EWOULDBLOCK ? EAGAIN : errno;
    want_errno(name, "recv", r, err, EAGAIN);
    CHECK(close(afd) == 0 && close(cfd) == 0 && close(lfd) == 0);
    return d;
}

static int64_t c_rcvtimeo_accept(const char *name, long ms)
{
    struct sockaddr_in a;
    int lfd = tcp_listener(&a);
    set_rcvtimeo(lfd, ms);
    int64_t t0 = mono_ns();
    int r = accept(lfd, NULL, NULL);
    int64_t d = mono_ns() - t0;
    int err = errno == EWOULDBLOCK ? EAGAIN : errno;
    want_errno(name, "accept", r, err, EAGAIN);
    CHECK(close(lfd) == 0);
    return d;
}

struct tcase {
    const char *name;
    int64_t (*fn)(const char *name, long ms);
    long early_ms; /* how early it may end: see the comment at the top */
};

static const struct tcase cases[] = {
    {"nanosleep", c_nanosleep, 0},
    {"usleep", c_usleep, 0},
    {"clock_nanosleep monotonic relative", c_clock_mono_rel, 0},
    {"clock_nanosleep realtime relative", c_clock_real_rel, 0},
    {"clock_nanosleep monotonic abstime", c_clock_mono_abs, 0},
    {"clock_nanosleep realtime abstime", c_clock_real_abs, 1},
    {"pthread_cond_timedwait realtime", c_cond_real, 1},
    {"pthread_cond_timedwait monotonic", c_cond_mono, 0},
    {"pthread_mutex_timedlock", c_mutex_timedlock, 1},
    {"sem_timedwait", c_sem_timedwait, 1},
    {"pthread_timedjoin_np", c_timedjoin, 1},
    {"poll", c_poll, 0},
    {"ppoll", c_ppoll, 0},
    {"select", c_select, 0},
    {"pselect", c_pselect, 0},
    {"epoll_wait", c_epoll_wait, 0},
    {"SO_RCVTIMEO recv socketpair", c_rcvtimeo_unix, 10},
    {"SO_RCVTIMEO recv tcp", c_rcvtimeo_tcp, 10},
    {"SO_RCVTIMEO accept", c_rcvtimeo_accept, 10},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static int check(const char *prefix, const struct tcase *c, int64_t d)
{
    int64_t lo = (int64_t)(wait_ms - c->early_ms) * 1000000;
    int64_t hi = (int64_t)(wait_ms + slack_ms) * 1000000;
    if (d < lo || d >= hi) {
        fprintf(stderr, "prog_timeouts: %s%s: took %.3f ms, want >= %ld ms and < %ld ms\n", prefix,
                c->name, (double)d / 1e6, wait_ms - c->early_ms, wait_ms + slack_ms);
        return 0;
    }
    printf("%s%s: ok\n", prefix, c->name);
    return 1;
}

static int64_t took[NCASES];

static void *run_one(void *arg)
{
    int i = (int)(intptr_t)arg;
    took[i] = cases[i].fn(cases[i].name, wait_ms);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        wait_ms = atol(argv[1]);
    if (argc > 2)
        slack_ms = atol(argv[2]);
    if (wait_ms < 11 || slack_ms < 1) {
        fprintf(stderr, "usage: prog_timeouts [MS>=11 [SLACK_MS>=1]]\n");
        return 1;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    int good = 1;
    for (int i = 0; i < NCASES; i++)
        good &= check("", &cases[i], cases[i].fn(cases[i].name, wait_ms));

    pthread_t t[NCASES];
    for (int i = 0; i < NCASES; i++)
        EXPECT(pthread_create(&t[i], NULL, run_one, (void *)(intptr_t)i), 0);
    for (int i = 0; i < NCASES; i++)
        EXPECT(pthread_join(t[i], NULL), 0);
    for (int i = 0; i < NCASES; i++)
        good &= check("concurrent ", &cases[i], took[i]);
    return good ? 0 : 1;
}
