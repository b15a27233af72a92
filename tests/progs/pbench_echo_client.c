/*
 * pbench_echo_client: the load generator for pbench_echo_server. NATIVE
 * ONLY (scripts/bench_io.sh never preloads it): one thread, epoll,
 * non-blocking sockets.
 *
 *   usage: pbench_echo_client PORTFILE NCONN ROUNDS SIZE
 *
 * Waits (at most 30 s) for PORTFILE to hold the server's port, then:
 *  1. opens NCONN connections to 127.0.0.1:PORT, at most 128 being set up
 *     at a time; a connection counts as open once a 1-byte hello came back
 *     (so the server has accepted it and its thread runs). Connections are
 *     spread over the source addresses 127.0.0.2, 127.0.0.3, ... (10,000
 *     each), so 30,000 of them fit in the 28k ephemeral ports.
 *  2. with all NCONN open at once, each connection does ROUNDS exchanges:
 *     send SIZE bytes, receive the SIZE bytes back, check every byte (the
 *     pattern differs per connection and round), send the next. Only this
 *     phase is timed.
 *  3. closes everything (the server sees EOF on each).
 * Prints one line
 *   "client: conns=N rounds=R bytes=B seconds=S msgs_per_s=M open_seconds=O"
 * (bytes: echoed payload bytes, one way; msgs_per_s: exchanges per second)
 * and exits 0; or prints what went wrong and exits 1 (error or wrong byte),
 * or 4 when nothing happened for PBENCH_STALL_S seconds (default 20):
 * "client: stalled ..." with how far it got.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define WINDOW   128   /* connections being set up at once */
#define PER_ADDR 10000 /* connections per source address */
#define MAX_SIZE (1 << 20)

enum state { CONNECTING, HELLO_SENT, OPEN, REQ_SENDING, RESP_WAIT, DONE };

struct conn {
    int fd;
    enum state st;
    long round;
    size_t sent, got;
};

static struct conn *conns;
static long nconn, rounds;
static long opened, done; /* connections open; connections through all their rounds */
static size_t size;
static int ep;
static unsigned char scratch[65536];

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static _Noreturn void fail(long i, const char *what, int err)
{
    if (err)
        fprintf(stderr, "client: connection #%ld: %s: %s\n", i, what, strerror(err));
    else
        fprintf(stderr, "client: connection #%ld: %s\n", i, what);
    exit(1);
}

/* The byte at offset off of request `round` on connection i. */
static inline unsigned char pattern(long i, long round, size_t off)
{
    uint64_t x = (uint64_t)i * 0x9E3779B97F4A7C15ull + (uint64_t)round * 0xBF58476D1CE4E5B9ull +
                 (uint64_t)off * 0x94D049BB133111EBull;
    x ^= x >> 29;
    return (unsigned char)(x ^ (x >> 17));
}

static int raise_nofile(rlim_t want)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return -1;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want) {
        struct rlimit up = {want, want};
        if (setrlimit(RLIMIT_NOFILE, &up) != 0) {
            fprintf(stderr,
                    "client: need %llu file descriptors, the hard limit is %llu and raising it "
                    "failed: %s (run as root, or raise it with ulimit -Hn / fs.nr_open)\n",
                    (unsigned long long)want, (unsigned long long)rl.rlim_max, strerror(errno));
            return -1;
        }
        return 0;
    }
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
            fprintf(stderr, "client: setrlimit(RLIMIT_NOFILE): %s\n", strerror(errno));
            return -1;
        }
    }
    return 0;
}

static int read_port(const char *path)
{
    double deadline = now_s() + 30;
    for (;;) {
        FILE *f = fopen(path, "r");
        if (f != NULL) {
            int port = 0;
            int ok = fscanf(f, "%d", &port) == 1 && port > 0 && port < 65536;
            fclose(f);
            if (ok)
                return port;
            fprintf(stderr, "client: %s does not hold a port number\n", path);
            exit(1);
        }
        if (now_s() > deadline) {
            fprintf(stderr, "client: %s did not appear within 30 s (server not started?)\n", path);
            exit(1);
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

static void watch(long i, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.u64 = (uint64_t)i};
    if (epoll_ctl(ep, EPOLL_CTL_MOD, conns[i].fd, &ev) != 0)
        fail(i, "epoll_ctl", errno);
}

static void start_connect(long i, int port)
{
    struct conn *c = &conns[i];
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0)
        fail(i, "socket", errno);
    int one = 1;
    setsockopt(c->fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
    struct sockaddr_in src = {.sin_family = AF_INET, .sin_port = 0};
    src.sin_addr.s_addr = htonl(0x7f000002u + (uint32_t)(i / PER_ADDR));
    if (bind(c->fd, (struct sockaddr *)&src, sizeof src) != 0)
        fail(i, "bind to a 127.0.0.x source address", errno);
    struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(c->fd, (struct sockaddr *)&dst, sizeof dst) != 0 && errno != EINPROGRESS)
        fail(i, "connect", errno);
    c->st = CONNECTING;
    struct epoll_event ev = {.events = EPOLLOUT, .data.u64 = (uint64_t)i};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev) != 0)
        fail(i, "epoll_ctl", errno);
}

/* Send what is left of the current request; returns 1 when all of it is sent. */
static int send_more(long i)
{
    struct conn *c = &conns[i];
    while (c->sent < size) {
        size_t n = size - c->sent;
        if (n > sizeof scratch)
            n = sizeof scratch;
        for (size_t k = 0; k < n; k++)
            scratch[k] = pattern(i, c->round, c->sent + k);
        ssize_t w = send(c->fd, scratch, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN)
            return 0;
        if (w < 0)
            fail(i, "send", errno);
        c->sent += (size_t)w;
    }
    return 1;
}

static void begin_request(long i)
{
    struct conn *c = &conns[i];
    c->sent = c->got = 0;
    c->st = REQ_SENDING;
    if (send_more(i)) {
        c->st = RESP_WAIT;
        watch(i, EPOLLIN);
    } else {
        watch(i, EPOLLIN | EPOLLOUT);
    }
}

/* CONNECTING, writable: the connect finished; send the hello. */
static void on_connected(long i)
{
    struct conn *c = &conns[i];
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    if (err)
        fail(i, "connect", err);
    char h = 'h';
    ssize_t w = send(c->fd, &h, 1, MSG_NOSIGNAL);
    if (w != 1)
        fail(i, "send hello", w < 0 ? errno : 0);
    c->st = HELLO_SENT;
    watch(i, EPOLLIN);
}

/* HELLO_SENT, readable: the hello came back; the connection is open. */
static void on_hello(long i)
{
    struct conn *c = &conns[i];
    char h;
    ssize_t r = recv(c->fd, &h, 1, 0);
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (r == 0)
        fail(i, "server closed the connection while it was being opened", 0);
    if (r < 0)
        fail(i, "recv hello", errno);
    if (h != 'h')
        fail(i, "wrong hello echoed", 0);
    c->st = OPEN;
    opened++;
}

/* Receive what the server echoed so far, checking every byte (exits 1 on a wrong one). */
static void recv_echo(long i)
{
    struct conn *c = &conns[i];
    for (;;) {
        size_t want = c->sent - c->got; /* never read past what was sent */
        if (want == 0)
            break;
        if (want > sizeof scratch)
            want = sizeof scratch;
        ssize_t r = recv(c->fd, scratch, want, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && errno == EAGAIN)
            break;
        if (r < 0)
            fail(i, "recv", errno);
        if (r == 0)
            fail(i, "server closed the connection in the middle of an exchange", 0);
        for (ssize_t k = 0; k < r; k++)
            if (scratch[k] != pattern(i, c->round, c->got + (size_t)k)) {
                fprintf(stderr,
                        "client: connection #%ld round %ld byte %zu: got 0x%02x, sent 0x%02x\n", i,
                        c->round, c->got + (size_t)k, scratch[k],
                        pattern(i, c->round, c->got + (size_t)k));
                exit(1);
            }
        c->got += (size_t)r;
    }
}

/* REQ_SENDING or RESP_WAIT: send more, receive the echo, start the next round or finish. */
static void on_exchange(long i, uint32_t ev)
{
    struct conn *c = &conns[i];
    if (c->st == REQ_SENDING && (ev & EPOLLOUT) && send_more(i)) {
        c->st = RESP_WAIT;
        watch(i, EPOLLIN);
    }
    if (!(ev & (EPOLLIN | EPOLLHUP | EPOLLERR)))
        return;
    recv_echo(i);
    if (c->got != size)
        return;
    if (++c->round == rounds) {
        c->st = DONE;
        done++;
        if (epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL) != 0)
            fail(i, "epoll_ctl", errno);
    } else {
        begin_request(i);
    }
}

static void on_event(long i, uint32_t ev)
{
    switch (conns[i].st) {
    case CONNECTING:
        on_connected(i);
        break;
    case HELLO_SENT:
        on_hello(i);
        break;
    case OPEN:
    case DONE:
        /* Nothing is expected: data or EOF here means the server misbehaved. */
        fail(i,
             (ev & (EPOLLHUP | EPOLLERR)) ? "connection reset or closed by the server"
                                          : "unexpected data from the server",
             0);
    case REQ_SENDING:
    case RESP_WAIT:
        on_exchange(i, ev);
        break;
    }
}

/* Phase 1 opens every connection, WINDOW at a time; phase 2 (timed from
 * *t0) runs the rounds. Returns 0, 1 on an epoll error, 4 on a stall. */
static int run(int port, double stall_s, double *t0)
{
    double last = now_s();
    long started = 0;
    int phase = 1;
    struct epoll_event evs[512];
    for (;;) {
        while (phase == 1 && started < nconn && started - opened < WINDOW)
            start_connect(started++, port);
        if (phase == 1 && opened == nconn) {
            phase = 2;
            *t0 = now_s();
            for (long i = 0; i < nconn; i++)
                begin_request(i);
        }
        if (phase == 2 && done == nconn)
            return 0;
        int n = epoll_wait(ep, evs, 512, 1000);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            fprintf(stderr, "client: epoll_wait: %s\n", strerror(errno));
            return 1;
        }
        double t = now_s();
        if (n == 0) {
            if (t - last > stall_s) {
                fprintf(stderr,
                        "client: stalled: nothing happened for %.0f s; %s: %ld of %ld "
                        "connections open, %ld finished their %ld rounds\n",
                        stall_s, phase == 1 ? "opening" : "exchanging", opened, nconn, done,
                        rounds);
                return 4;
            }
            continue;
        }
        last = t;
        for (int e = 0; e < n; e++)
            on_event((long)evs[e].data.u64, evs[e].events);
    }
}

int main(int argc, char **argv)
{
    if (argc != 5 || (nconn = atol(argv[2])) < 1 || (rounds = atol(argv[3])) < 1 ||
        atol(argv[4]) < 1 || atol(argv[4]) > MAX_SIZE) {
        fprintf(stderr, "usage: %s PORTFILE NCONN ROUNDS SIZE   (SIZE 1..%d bytes)\n", argv[0],
                MAX_SIZE);
        return 1;
    }
    size = (size_t)atol(argv[4]);
    double stall_s = 20;
    const char *st = getenv("PBENCH_STALL_S");
    if (st != NULL && atof(st) > 0)
        stall_s = atof(st);
    if (raise_nofile((rlim_t)nconn + 64) != 0)
        return 1;
    conns = calloc((size_t)nconn, sizeof *conns);
    ep = epoll_create1(EPOLL_CLOEXEC);
    if (conns == NULL || ep < 0) {
        fprintf(stderr, "client: out of memory or epoll_create1: %s\n", strerror(errno));
        return 1;
    }
    int port = read_port(argv[1]);

    double t_open = now_s(), t0 = 0;
    int rc = run(port, stall_s, &t0);
    if (rc != 0)
        return rc;
    double secs = now_s() - t0;
    for (long i = 0; i < nconn; i++)
        close(conns[i].fd);
    printf("client: conns=%ld rounds=%ld bytes=%.0f seconds=%.3f msgs_per_s=%.0f "
           "open_seconds=%.3f\n",
           nconn, rounds, (double)nconn * (double)rounds * (double)size, secs,
           (double)nconn * (double)rounds / secs, t0 - t_open);
    return 0;
}
