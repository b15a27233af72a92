/*
 * Descriptors the application made non-blocking stay non-blocking, and the
 * flags it reads back are the ones it set (a netpoller may set O_NONBLOCK
 * on descriptors behind the application's back, but must not show it).
 *
 *   prog_nonblock
 *
 * One line per check, "name: ok", in a fixed order; exit 0. A failed
 * check is reported on stderr with exit 1.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "prog_check.h"

static void ok(const char *name)
{
    printf("%s: ok\n", name);
}

/* The call returned -1 with errno EAGAIN (or EWOULDBLOCK). */
#define EXPECT_EAGAIN(expr)                                                                        \
    do {                                                                                           \
        errno = 0;                                                                                 \
        long r_ = (long)(expr);                                                                    \
        if (r_ != -1 || (errno != EAGAIN && errno != EWOULDBLOCK)) {                               \
            fprintf(stderr, "%s:%d: %s returned %ld (errno %d: %s), want -1 EAGAIN\n", __FILE__,   \
                    __LINE__, #expr, r_, errno, strerror(errno));                                  \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static int getfl(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    CHECK(fl != -1);
    return fl;
}

static void expect_nonblock(int fd, int want, const char *what)
{
    int fl = getfl(fd);
    if (!!(fl & O_NONBLOCK) != want) {
        fprintf(stderr, "prog_nonblock: %s: F_GETFL = %#o, O_NONBLOCK %s\n", what, fl,
                want ? "missing" : "set although the program never set it");
        exit(1);
    }
}

static void set_nonblock(int fd, int on)
{
    int fl = getfl(fd);
    CHECK(fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK) == 0);
}

static struct sockaddr_in loopback(void)
{
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

/* A listening socket on 127.0.0.1 (type may add SOCK_NONBLOCK); its address in *a. */
static int listener(int type, struct sockaddr_in *a)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | type, 0);
    CHECK(fd >= 0);
    *a = loopback();
    CHECK(bind(fd, (struct sockaddr *)a, sizeof *a) == 0);
    socklen_t len = sizeof *a;
    CHECK(getsockname(fd, (struct sockaddr *)a, &len) == 0);
    CHECK(listen(fd, 16) == 0);
    return fd;
}

static int connect_blocking(const struct sockaddr_in *a)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    CHECK(connect(fd, (const struct sockaddr *)a, sizeof *a) == 0);
    return fd;
}

/* ---- a reader thread that must block until main writes -------------------------- */

struct blocker {
    int fd;
    sem_t ready;
    ssize_t ret;
    int err;
    char c;
};

static void *blocking_reader(void *arg)
{
    struct blocker *b = arg;
    CHECK(sem_post(&b->ready) == 0);
    b->ret = read(b->fd, &b->c, 1);
    b->err = errno;
    return NULL;
}

/* fd had O_NONBLOCK cleared: a read in another thread waits for main's write to wfd. */
static void expect_blocks_again(int fd, int wfd, const char *name)
{
    struct blocker b = {.fd = fd};
    pthread_t t;
    CHECK(sem_init(&b.ready, 0, 0) == 0);
    EXPECT(pthread_create(&t, NULL, blocking_reader, &b), 0);
    CHECK(wait_sem(&b.ready) == 0);
    CHECK(write(wfd, "x", 1) == 1);
    EXPECT(pthread_join(t, NULL), 0);
    if (b.ret != 1 || b.c != 'x') {
        fprintf(stderr, "prog_nonblock: %s: read returned %zd (errno %d: %s), want the byte\n",
                name, b.ret, b.err, strerror(b.err));
        exit(1);
    }
    CHECK(sem_destroy(&b.ready) == 0);
    ok(name);
}

/* Write pages to fd until it says EAGAIN; the bytes it took (more than limit: exit 1). */
static long fill(int fd, long limit, const char *what)
{
    static char page[4096];
    long total = 0;
    for (;;) {
        ssize_t w = write(fd, page, sizeof page);
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return total;
        CHECK(w > 0);
        total += w;
        if (total > limit) {
            fprintf(stderr, "prog_nonblock: %s never filled\n", what);
            exit(1);
        }
    }
}

/* pipe2(O_NONBLOCK): empty read gives EAGAIN, both ends report O_NONBLOCK; cleared with
 * F_SETFL, the read end blocks again until main writes. */
static void pipe2_checks(void)
{
    char c;
    int p[2];
    CHECK(pipe2(p, O_NONBLOCK | O_CLOEXEC) == 0);
    EXPECT_EAGAIN(read(p[0], &c, 1));
    expect_nonblock(p[0], 1, "pipe2 read end");
    expect_nonblock(p[1], 1, "pipe2 write end");
    ok("pipe2_nonblock_read_eagain");

    set_nonblock(p[0], 0);
    expect_nonblock(p[0], 0, "pipe2 read end after F_SETFL clear");
    expect_blocks_again(p[0], p[1], "pipe_cleared_nonblock_blocks_again");
    CHECK(close(p[0]) == 0 && close(p[1]) == 0);
}

/* pipe() + F_SETFL O_NONBLOCK on the write end: fill to EAGAIN, exactly the capacity; then
 * F_GETFL reports exactly what was set: clearing restores the original flags. */
static void pipe_fcntl_checks(void)
{
    int p[2];
    CHECK(pipe(p) == 0);
    int before_r = getfl(p[0]), before_w = getfl(p[1]);
    expect_nonblock(p[0], 0, "fresh pipe read end");
    expect_nonblock(p[1], 0, "fresh pipe write end");
    set_nonblock(p[1], 1);
    expect_nonblock(p[1], 1, "pipe write end after F_SETFL");
    expect_nonblock(p[0], 0, "pipe read end (other end set)");
    int cap = fcntl(p[1], F_GETPIPE_SZ);
    CHECK(cap > 0);
    long total = fill(p[1], 64L * 1024 * 1024, "pipe");
    if (total != cap) {
        fprintf(stderr, "prog_nonblock: pipe took %ld bytes before EAGAIN, capacity %d\n", total,
                cap);
        exit(1);
    }
    ok("pipe_fcntl_nonblock_write_full_eagain");

    set_nonblock(p[1], 0);
    if (getfl(p[1]) != before_w || getfl(p[0]) != before_r) {
        fprintf(stderr, "prog_nonblock: F_GETFL after set+clear: %#o/%#o, before %#o/%#o\n",
                getfl(p[0]), getfl(p[1]), before_r, before_w);
        exit(1);
    }
    ok("fcntl_getfl_reports_flags_as_set");
    CHECK(close(p[0]) == 0 && close(p[1]) == 0);
}

/* socket(SOCK_NONBLOCK) listener: accept with nobody connecting gives EAGAIN; and (Linux)
 * accept() does not pass the listener's O_NONBLOCK on. */
static void listener_checks(void)
{
    struct sockaddr_in a;
    int lfd = listener(SOCK_NONBLOCK, &a);
    expect_nonblock(lfd, 1, "SOCK_NONBLOCK listener");
    EXPECT_EAGAIN(accept(lfd, NULL, NULL));
    EXPECT_EAGAIN(accept4(lfd, NULL, NULL, SOCK_NONBLOCK));
    ok("socket_nonblock_accept_eagain");

    int cfd = connect_blocking(&a);
    struct pollfd pfd = {.fd = lfd, .events = POLLIN};
    EXPECT(poll(&pfd, 1, 5000), 1);
    int afd = accept(lfd, NULL, NULL);
    CHECK(afd >= 0);
    expect_nonblock(afd, 0, "socket accepted from a non-blocking listener");
    CHECK(close(afd) == 0 && close(cfd) == 0 && close(lfd) == 0);
    ok("accept_does_not_inherit_nonblock");
}

/* accept4(SOCK_NONBLOCK): the accepted socket's recv gives EAGAIN, then data; MSG_DONTWAIT
 * on a blocking socket: EAGAIN for that call only; cleared with F_SETFL, the accepted
 * socket blocks again until main sends. */
static void accept4_checks(void)
{
    char c;
    struct sockaddr_in a;
    int lfd = listener(0, &a);
    expect_nonblock(lfd, 0, "blocking listener");
    int cfd = connect_blocking(&a);
    int afd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    CHECK(afd >= 0);
    expect_nonblock(afd, 1, "accept4(SOCK_NONBLOCK) socket");
    EXPECT_EAGAIN(recv(afd, &c, 1, 0));
    EXPECT_EAGAIN(read(afd, &c, 1));
    CHECK(send(cfd, "y", 1, 0) == 1);
    struct pollfd pfd = {.fd = afd, .events = POLLIN};
    EXPECT(poll(&pfd, 1, 5000), 1);
    CHECK(recv(afd, &c, 1, 0) == 1 && c == 'y');
    EXPECT_EAGAIN(recv(afd, &c, 1, 0));
    ok("accept4_nonblock_recv_eagain");

    EXPECT_EAGAIN(recv(cfd, &c, 1, MSG_DONTWAIT));
    expect_nonblock(cfd, 0, "blocking socket after recv(MSG_DONTWAIT)");
    ok("recv_msg_dontwait_eagain");

    set_nonblock(afd, 0);
    expect_nonblock(afd, 0, "accept4 socket after F_SETFL clear");
    expect_blocks_again(afd, cfd, "socket_cleared_nonblock_blocks_again");
    CHECK(close(afd) == 0 && close(cfd) == 0 && close(lfd) == 0);
}

/* ioctl(FIONBIO) on a socketpair: read gives EAGAIN; F_GETFL agrees; FIONBIO 0 clears.
 * socketpair(SOCK_NONBLOCK): write until the buffer is full, then EAGAIN. */
static void socketpair_checks(void)
{
    char c;
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    int on = 1;
    CHECK(ioctl(sv[0], FIONBIO, &on) == 0);
    expect_nonblock(sv[0], 1, "socketpair after FIONBIO 1");
    expect_nonblock(sv[1], 0, "the other end of the socketpair");
    EXPECT_EAGAIN(read(sv[0], &c, 1));
    on = 0;
    CHECK(ioctl(sv[0], FIONBIO, &on) == 0);
    expect_nonblock(sv[0], 0, "socketpair after FIONBIO 0");
    ok("ioctl_fionbio_socketpair_read_eagain");
    CHECK(close(sv[0]) == 0 && close(sv[1]) == 0);

    static char page[4096];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0);
    fill(sv[0], 256L * 1024 * 1024, "socketpair");
    EXPECT_EAGAIN(send(sv[0], page, sizeof page, 0));
    ok("socketpair_nonblock_write_full_eagain");
    CHECK(close(sv[0]) == 0 && close(sv[1]) == 0);
}

/* SO_ERROR of fd, once poll says it is writable (a non-blocking connect has ended). */
static int connect_result(int fd, short *revents)
{
    struct pollfd pfd = {.fd = fd, .events = POLLOUT};
    EXPECT(poll(&pfd, 1, 5000), 1);
    *revents = pfd.revents;
    int soerr = -1;
    socklen_t slen = sizeof soerr;
    CHECK(getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &slen) == 0);
    return soerr;
}

/* Non-blocking connect to a listener: 0 or EINPROGRESS, then POLLOUT and SO_ERROR 0. */
static void connect_checks(void)
{
    struct sockaddr_in a;
    int lfd = listener(0, &a);
    int cfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    CHECK(cfd >= 0);
    int r = connect(cfd, (struct sockaddr *)&a, sizeof a);
    if (r != 0 && errno != EINPROGRESS) {
        fprintf(stderr, "prog_nonblock: non-blocking connect: %s\n", strerror(errno));
        exit(1);
    }
    short revents;
    EXPECT(connect_result(cfd, &revents), 0);
    if (!(revents & POLLOUT) || (revents & (POLLERR | POLLHUP))) {
        fprintf(stderr, "prog_nonblock: connect: revents %#x, want POLLOUT\n", revents);
        exit(1);
    }
    expect_nonblock(cfd, 1, "non-blocking connected socket");
    int afd = accept(lfd, NULL, NULL);
    CHECK(afd >= 0);
    CHECK(close(afd) == 0 && close(cfd) == 0 && close(lfd) == 0);
    ok("nonblock_connect_pollout_so_error_0");
}

/* A port bound but not listening refuses: blocking connect gives ECONNREFUSED; without
 * blocking, the refusal arrives through poll and SO_ERROR. */
static void refused_checks(void)
{
    int bound = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(bound >= 0);
    struct sockaddr_in a = loopback();
    CHECK(bind(bound, (struct sockaddr *)&a, sizeof a) == 0); /* holds the port */
    socklen_t slen = sizeof a;
    CHECK(getsockname(bound, (struct sockaddr *)&a, &slen) == 0);
    int cfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(cfd >= 0);
    errno = 0;
    int r = connect(cfd, (struct sockaddr *)&a, sizeof a);
    if (r != -1 || errno != ECONNREFUSED) {
        fprintf(stderr, "prog_nonblock: connect to a closed port returned %d (%s)\n", r,
                strerror(errno));
        exit(1);
    }
    CHECK(close(cfd) == 0);
    ok("blocking_connect_refused");

    cfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    CHECK(cfd >= 0);
    errno = 0;
    r = connect(cfd, (struct sockaddr *)&a, sizeof a);
    if (r == 0 || (errno != EINPROGRESS && errno != ECONNREFUSED)) {
        fprintf(stderr, "prog_nonblock: non-blocking connect to a closed port: %d (%s)\n", r,
                strerror(errno));
        exit(1);
    }
    short revents;
    if (errno == EINPROGRESS)
        EXPECT(connect_result(cfd, &revents), ECONNREFUSED);
    CHECK(close(cfd) == 0 && close(bound) == 0);
    ok("nonblock_connect_refused");
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    pipe2_checks();
    pipe_fcntl_checks();
    listener_checks();
    accept4_checks();
    socketpair_checks();
    connect_checks();
    refused_checks();
    return 0;
}
