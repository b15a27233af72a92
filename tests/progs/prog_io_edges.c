/*
 * Corners of the read/write family that a blocking program relies on, run
 * natively and under goshim (the same lines must come out):
 *
 *   writev      a blocking writev of three unequal iovecs, far more than a
 *               pipe holds, to a reader that takes small pieces: the whole
 *               count, every byte in order (the buffers advanced across
 *               iovec boundaries, tries after partial transfers)
 *   sendmsg     the same with sendmsg on a stream socketpair
 *   waitall     recv(MSG_WAITALL) while the writer sends small pieces: the
 *               whole length in one call
 *   sndtimeo    send and write on a full socketpair with SO_SNDTIMEO: -1
 *               EAGAIN once the timeout passed (not before, not never)
 *   partial     a blocking writev to a pipe nobody drains, interrupted by a
 *               signal whose handler has no SA_RESTART: the bytes written so
 *               far (more than 0, less than asked), each of them readable
 *   fortify     __read_chk and __recv_chk (-D_FORTIFY_SOURCE's read and
 *               recv) block until another thread writes
 *
 *   usage: prog_io_edges
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "prog_check.h"

ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen);
ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags);

static long bound_ms = 5000;

/* The byte at offset i of every stream here. */
static unsigned char pat(size_t i)
{
    return (unsigned char)(i * 7 + i / 251);
}

static void fill(unsigned char *p, size_t off, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = pat(off + i);
}

/* Read fd in pieces of at most piece bytes until want bytes came (or EOF); check the
 * pattern; return how many came. */
static size_t read_check(const char *name, int fd, size_t want, size_t piece)
{
    unsigned char buf[4096];
    size_t got = 0;
    while (got < want) {
        size_t n = want - got < piece ? want - got : piece;
        ssize_t r = read(fd, buf, n < sizeof buf ? n : sizeof buf);
        if (r == 0)
            break;
        CHECK(r > 0);
        for (ssize_t i = 0; i < r; i++) {
            if (buf[i] != pat(got + (size_t)i)) {
                fprintf(stderr, "prog_io_edges: %s: byte %zu is %u, want %u\n", name,
                        got + (size_t)i, buf[i], pat(got + (size_t)i));
                exit(1);
            }
        }
        got += (size_t)r;
    }
    return got;
}

/* ---- writev, sendmsg: one call, many tries ---------------------------------------- */

enum { NIOV = 3 };
static const size_t iov_len[NIOV] = {70001, 3, 400000};

struct writer {
    int fd;
    bool use_sendmsg;
    ssize_t ret;
    int err;
};

static void *vec_writer(void *arg)
{
    struct writer *w = arg;
    struct iovec iov[NIOV];
    size_t off = 0;
    for (int i = 0; i < NIOV; i++) {
        iov[i].iov_base = malloc(iov_len[i]);
        CHECK(iov[i].iov_base != NULL);
        fill(iov[i].iov_base, off, iov_len[i]);
        iov[i].iov_len = iov_len[i];
        off += iov_len[i];
    }
    if (w->use_sendmsg) {
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = NIOV};
        w->ret = sendmsg(w->fd, &m, 0);
    } else {
        w->ret = writev(w->fd, iov, NIOV);
    }
    w->err = errno;
    CHECK(close(w->fd) == 0); /* a short count ends the reader at EOF */
    for (int i = 0; i < NIOV; i++)
        free(iov[i].iov_base);
    return NULL;
}

static void case_vector(const char *name, bool use_sendmsg)
{
    int fds[2];
    if (use_sendmsg)
        CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
    else
        CHECK(pipe(fds) == 0);
    size_t total = iov_len[0] + iov_len[1] + iov_len[2];
    struct writer w = {.fd = fds[1], .use_sendmsg = use_sendmsg};
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, vec_writer, &w), 0);
    size_t got = read_check(name, fds[0], total, 1000);
    EXPECT(pthread_join(t, NULL), 0);
    if (w.ret != (ssize_t)total || got != total) {
        fprintf(stderr, "prog_io_edges: %s: wrote %zd (errno %d), read %zu, want %zu\n", name,
                w.ret, w.err, got, total);
        exit(1);
    }
    printf("%s: %zu bytes in %d iovecs, all read in order\n", name, total, NIOV);
    close(fds[0]);
}

/* ---- recv(MSG_WAITALL) -------------------------------------------------------------- */

enum { PIECES = 200, PIECE = 997 };

static void *piece_sender(void *arg)
{
    int fd = *(int *)arg;
    unsigned char buf[PIECE];
    for (size_t i = 0; i < PIECES; i++) {
        fill(buf, i * PIECE, PIECE);
        CHECK(send(fd, buf, PIECE, 0) == PIECE);
        if (i % 20 == 0)
            sched_yield(); /* let the receiver see a part, often */
    }
    return NULL;
}

static void case_waitall(void)
{
    int fds[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
    size_t total = (size_t)PIECES * PIECE;
    unsigned char *buf = malloc(total);
    CHECK(buf != NULL);
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, piece_sender, &fds[1]), 0);
    ssize_t r = recv(fds[0], buf, total, MSG_WAITALL);
    EXPECT(pthread_join(t, NULL), 0);
    if (r != (ssize_t)total) {
        fprintf(stderr, "prog_io_edges: waitall: recv returned %zd (errno %d), want %zu\n", r,
                errno, total);
        exit(1);
    }
    for (size_t i = 0; i < total; i++)
        CHECK(buf[i] == pat(i));
    printf("waitall: recv(MSG_WAITALL) returned all %zu bytes\n", total);
    free(buf);
    close(fds[0]);
    close(fds[1]);
}

/* ---- SO_SNDTIMEO on a full socket ---------------------------------------------------- */

static void case_sndtimeo(void)
{
    int fds[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
    static unsigned char buf[4096];
    while (send(fds[1], buf, sizeof buf, MSG_DONTWAIT) > 0)
        ;
    CHECK(errno == EAGAIN);
    long ms = 40;
    struct timeval tv = {0, ms * 1000};
    CHECK(setsockopt(fds[1], SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) == 0);
    for (int k = 0; k < 2; k++) {
        const char *call = k == 0 ? "send" : "write";
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        ssize_t r = k == 0 ? send(fds[1], buf, sizeof buf, 0) : write(fds[1], buf, sizeof buf);
        int err = errno;
        long took = ms_since(&t0);
        if (r != -1 || err != EAGAIN) {
            fprintf(stderr, "prog_io_edges: sndtimeo: %s returned %zd (errno %d), want -1 EAGAIN\n",
                    call, r, err);
            exit(1);
        }
        /* The kernel counts SO_SNDTIMEO in jiffies: a few ms early, and in a VM whose
         * ticks catch up after the host stole the CPU, more (a native run gave up after
         * 25 ms of 40 here); a call that did not wait at all is what this must catch. */
        if (took < ms / 2 || took > bound_ms) {
            fprintf(stderr, "prog_io_edges: sndtimeo: %s gave up after %ld ms, want %ld\n", call,
                    took, ms);
            exit(1);
        }
        printf("sndtimeo: %s on a full socket: -1 EAGAIN after the timeout\n", call);
    }
    close(fds[0]);
    close(fds[1]);
}

/* ---- a blocking writev cut short by a signal without SA_RESTART ---------------------- */

static volatile sig_atomic_t handled;

static void on_usr1(int sig)
{
    (void)sig;
    handled = handled + 1;
}

struct partial {
    int fd;
    size_t total;
    ssize_t ret;
    int err;
    sem_t done;
};

static void *partial_writer(void *arg)
{
    struct partial *p = arg;
    size_t half = p->total / 2;
    unsigned char *buf = malloc(p->total);
    CHECK(buf != NULL);
    fill(buf, 0, p->total);
    struct iovec iov[2] = {{buf, half}, {buf + half, p->total - half}};
    p->ret = writev(p->fd, iov, 2);
    p->err = errno;
    free(buf);
    CHECK(sem_post(&p->done) == 0);
    return NULL;
}

static void case_partial(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0); /* no SA_RESTART */
    int fds[2];
    CHECK(pipe(fds) == 0);
    struct partial p = {.fd = fds[1], .total = 1 << 20};
    CHECK(sem_init(&p.done, 0, 0) == 0);
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, partial_writer, &p), 0);
    size_t first = 100000;
    CHECK(read_check("partial", fds[0], first, 4096) == first);
    /* The pipe fills up again and the writer blocks: signal it until its writev returns. */
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        EXPECT(pthread_kill(t, SIGUSR1), 0);
        struct timespec dl = in_ms(CLOCK_REALTIME, 5);
        if (sem_timedwait(&p.done, &dl) == 0)
            break;
        CHECK(errno == ETIMEDOUT || errno == EINTR);
        if (ms_since(&t0) > bound_ms) {
            fprintf(stderr, "prog_io_edges: partial: writev still blocked after %ld ms\n",
                    bound_ms);
            exit(1);
        }
    }
    EXPECT(pthread_join(t, NULL), 0);
    if (p.ret <= (ssize_t)first || p.ret >= (ssize_t)p.total || handled == 0) {
        fprintf(stderr,
                "prog_io_edges: partial: writev returned %zd (errno %d), handler ran %d times; "
                "want more than %zu, less than %zu\n",
                p.ret, p.err, (int)handled, first, p.total);
        exit(1);
    }
    CHECK(close(fds[1]) == 0);
    /* The rest of what it wrote, then EOF: exactly the count it returned. */
    size_t rest = (size_t)p.ret - first;
    unsigned char buf[4096];
    size_t got = 0;
    for (;;) {
        ssize_t r = read(fds[0], buf, sizeof buf);
        CHECK(r >= 0);
        if (r == 0)
            break;
        for (ssize_t i = 0; i < r; i++)
            CHECK(buf[i] == pat(first + got + (size_t)i));
        got += (size_t)r;
    }
    if (got != rest) {
        fprintf(stderr, "prog_io_edges: partial: writev said %zd, the pipe held %zu more\n", p.ret,
                got);
        exit(1);
    }
    printf("partial: writev cut short by a signal: the count written, every byte readable\n");
    CHECK(close(fds[0]) == 0);
    CHECK(sem_destroy(&p.done) == 0);
    sa.sa_handler = SIG_DFL;
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
}

/* ---- the fortified entry points ------------------------------------------------------ */

static void *late_writer(void *arg)
{
    int *fds = arg;
    sched_yield();
    CHECK(write(fds[0], "p", 1) == 1);
    CHECK(send(fds[1], "s", 1, 0) == 1);
    return NULL;
}

static void case_fortify(void)
{
    int pfd[2], sfd[2];
    CHECK(pipe(pfd) == 0);
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sfd) == 0);
    int wr[2] = {pfd[1], sfd[1]};
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, late_writer, wr), 0);
    char a = 0, b = 0;
    ssize_t r1 = __read_chk(pfd[0], &a, 1, sizeof a);
    ssize_t r2 = __recv_chk(sfd[0], &b, 1, sizeof b, 0);
    EXPECT(pthread_join(t, NULL), 0);
    if (r1 != 1 || a != 'p' || r2 != 1 || b != 's') {
        fprintf(stderr, "prog_io_edges: fortify: __read_chk %zd '%c', __recv_chk %zd '%c'\n", r1, a,
                r2, b);
        exit(1);
    }
    printf("fortify: __read_chk and __recv_chk waited for the writer\n");
    close(pfd[0]);
    close(pfd[1]);
    close(sfd[0]);
    close(sfd[1]);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    case_vector("writev", false);
    case_vector("sendmsg", true);
    case_waitall();
    case_sndtimeo();
    case_partial();
    case_fortify();
    return 0;
}
