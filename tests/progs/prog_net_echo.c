/*
 * Thread-per-connection TCP echo on 127.0.0.1 with plain blocking calls,
 * server and clients in two processes.
 *
 *   prog_net_echo [N [BYTES]]      (defaults: 100 connections, 10000 bytes each)
 *
 * This process is the server: it listens, starts the client process, and
 * an acceptor thread accepts N connections and starts one thread per
 * connection that echoes until EOF. The client process is this program
 * again (fork, then exec of /proc/self/exe at once, with the environment,
 * hence LD_PRELOAD, inherited):
 *
 *   prog_net_echo --client PORT N BYTES SERVER_PID     (internal)
 *
 * Its N client threads each connect, wait until all N are connected (so N
 * connections are really open at once), then send BYTES bytes in chunks (a
 * pattern that depends on the client's index) and read every chunk back,
 * checking each byte; then shut down their sending side, expect the
 * server's EOF, and close. It exits 0 when every byte came back right.
 * The server waits for it and checks that it accepted exactly N
 * connections and echoed exactly BYTES on each.
 *
 * Output: "connections=N bytes=TOTAL ok" (TOTAL = N * BYTES, echoed and
 * verified) and exit 0, or a message on stderr and exit 1.
 *
 * Each process needs N + a few descriptors (two processes, so 10,000
 * connections fit a 20,000 RLIMIT_NOFILE). Natively that is N + 1 threads
 * in each; under goshim the server's main, acceptor and N connection
 * threads are Gs (GOSHIM_STATS: gs_created >= N + 2), the client's main
 * and N client threads too (N + 1), and the blocked reads park on the
 * netpoller. The client prints its GOSHIM_STATS line first: the server
 * prints its own only after waitpid has reaped the client.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "prog_check.h"

#define BUF        4096
#define FD_SPARE   64
#define CLIENT_ARG "--client"

extern char **environ;

static long nconn, nbytes;
static const char *who_am_i = "prog_net_echo"; /* prefix of messages */
static struct sockaddr_in server_addr;
static int listen_fd;
static pthread_barrier_t all_connected;
static pthread_attr_t small_stack;
static long connected, accepted, echoed, verified;

/*
 * Make at least need descriptors available: the soft limit up to need, the
 * hard limit too when it is lower and we may raise it (CAP_SYS_RESOURCE).
 */
static void raise_nofile(long need)
{
    struct rlimit rl;
    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    if (rl.rlim_cur == RLIM_INFINITY || (long)rl.rlim_cur >= need)
        return;
    struct rlimit want = {(rlim_t)need, rl.rlim_max};
    if (rl.rlim_max != RLIM_INFINITY && (long)rl.rlim_max < need)
        want.rlim_max = (rlim_t)need;
    if (setrlimit(RLIMIT_NOFILE, &want) != 0) {
        int err = errno;
        if (want.rlim_max != rl.rlim_max)
            fprintf(stderr,
                    "%s: %ld connections need %ld file descriptors in each process; the "
                    "RLIMIT_NOFILE hard limit is %lu and raising it failed: %s (raise `ulimit "
                    "-Hn` or run with CAP_SYS_RESOURCE)\n",
                    who_am_i, nconn, need, (unsigned long)rl.rlim_max, strerror(err));
        else
            fprintf(stderr, "%s: cannot raise the RLIMIT_NOFILE soft limit to %ld: %s\n", who_am_i,
                    need, strerror(err));
        exit(1);
    }
}

static unsigned char pattern(long client, long off)
{
    return (unsigned char)(client * 131 + off * 7 + (off >> 9));
}

static void write_all(int fd, const unsigned char *p, size_t n, const char *who)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            fprintf(stderr, "%s: %s: write: %s\n", who_am_i, who, strerror(errno));
            exit(1);
        }
        p += w;
        n -= (size_t)w;
    }
}

/* A non-negative number from a command-line word, or -1. */
static long number(const char *s)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    return errno || end == s || *end != '\0' || v < 0 ? -1 : v;
}

/* ---- client process ------------------------------------------------------------- */

static void *client(void *arg)
{
    long id = (long)(intptr_t)arg;
    unsigned char sbuf[BUF], rbuf[BUF];
    char who[48];
    snprintf(who, sizeof who, "client %ld", id);

    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        fprintf(stderr, "%s: %s: socket: %s\n", who_am_i, who, strerror(errno));
        exit(1);
    }
    int r;
    while ((r = connect(fd, (struct sockaddr *)&server_addr, sizeof server_addr)) < 0 &&
           errno == EINTR)
        ;
    if (r < 0) {
        fprintf(stderr, "%s: %s: connect: %s\n", who_am_i, who, strerror(errno));
        exit(1);
    }
    __atomic_fetch_add(&connected, 1, __ATOMIC_RELAXED);
    r = pthread_barrier_wait(&all_connected); /* all N connections open at once */
    if (r != 0 && r != PTHREAD_BARRIER_SERIAL_THREAD)
        fail(__FILE__, __LINE__, "pthread_barrier_wait", r, 0);
    if (r == PTHREAD_BARRIER_SERIAL_THREAD &&
        __atomic_load_n(&connected, __ATOMIC_RELAXED) != nconn) {
        fprintf(stderr, "%s: barrier passed with %ld of %ld connected\n", who_am_i,
                __atomic_load_n(&connected, __ATOMIC_RELAXED), nconn);
        exit(1);
    }

    long chunk = 1000 + (id % 7) * 500; /* 1000 .. 4000 bytes */
    for (long off = 0; off < nbytes;) {
        long n = nbytes - off < chunk ? nbytes - off : chunk;
        for (long j = 0; j < n; j++)
            sbuf[j] = pattern(id, off + j);
        write_all(fd, sbuf, (size_t)n, who);
        for (long got = 0; got < n;) {
            ssize_t m = read(fd, rbuf + got, (size_t)(n - got));
            if (m < 0 && errno == EINTR)
                continue;
            if (m < 0) {
                fprintf(stderr, "%s: %s: read: %s\n", who_am_i, who, strerror(errno));
                exit(1);
            }
            if (m == 0) {
                fprintf(stderr, "%s: %s: EOF after %ld of %ld bytes\n", who_am_i, who, off + got,
                        nbytes);
                exit(1);
            }
            got += m;
        }
        for (long j = 0; j < n; j++) {
            if (rbuf[j] != sbuf[j]) {
                fprintf(stderr, "%s: %s: byte %ld is %u, sent %u\n", who_am_i, who, off + j,
                        rbuf[j], sbuf[j]);
                exit(1);
            }
        }
        off += n;
    }
    CHECK(shutdown(fd, SHUT_WR) == 0);
    ssize_t m;
    while ((m = read(fd, rbuf, sizeof rbuf)) < 0 && errno == EINTR)
        ;
    if (m != 0) {
        fprintf(stderr, "%s: %s: want EOF from the server, read returned %zd (%s)\n", who_am_i, who,
                m, m < 0 ? strerror(errno) : "extra data");
        exit(1);
    }
    CHECK(close(fd) == 0);
    __atomic_fetch_add(&verified, nbytes, __ATOMIC_RELAXED);
    return NULL;
}

/* prog_net_echo --client PORT N BYTES SERVER_PID: exit 0 if every byte came back. */
static int client_main(int argc, char **argv)
{
    who_am_i = "prog_net_echo (client process)";
    long port = argc == 6 ? number(argv[2]) : -1;
    nconn = argc == 6 ? number(argv[3]) : -1;
    nbytes = argc == 6 ? number(argv[4]) : -1;
    long server = argc == 6 ? number(argv[5]) : -1;
    if (port < 1 || port > 65535 || nconn < 1 || nbytes < 0 || server < 1) {
        fprintf(stderr, "%s: usage: prog_net_echo " CLIENT_ARG " PORT N BYTES SERVER_PID\n",
                who_am_i);
        return 1;
    }
    /* Die with the server (the thread that forked: main natively, an M
     * under goshim, which never exits), and never outlive it unnoticed. */
    CHECK(prctl(PR_SET_PDEATHSIG, SIGKILL) == 0);
    if (getppid() != (pid_t)server) {
        fprintf(stderr, "%s: the server (pid %ld) is gone\n", who_am_i, server);
        return 1;
    }
    raise_nofile(nconn + FD_SPARE);

    memset(&server_addr, 0, sizeof server_addr);
    server_addr.sin_family = AF_INET;
    server_addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    server_addr.sin_port = htons((uint16_t)port);

    EXPECT(pthread_attr_init(&small_stack), 0);
    EXPECT(pthread_attr_setstacksize(&small_stack, 64 * 1024), 0); /* natively, spare memory */
    EXPECT(pthread_barrier_init(&all_connected, NULL, (unsigned)nconn), 0);
    pthread_t *cl = calloc((size_t)nconn, sizeof *cl);
    CHECK(cl != NULL);
    for (long i = 0; i < nconn; i++) {
        int err = pthread_create(&cl[i], &small_stack, client, (void *)(intptr_t)i);
        if (err) {
            fprintf(stderr, "%s: pthread_create (client %ld): %s\n", who_am_i, i, strerror(err));
            exit(1);
        }
    }
    for (long i = 0; i < nconn; i++)
        EXPECT(pthread_join(cl[i], NULL), 0);
    free(cl);
    if (verified != nconn * nbytes) {
        fprintf(stderr, "%s: verified %ld bytes, want %ld\n", who_am_i, verified, nconn * nbytes);
        return 1;
    }
    return 0;
}

/* ---- server process ------------------------------------------------------------- */

static void *echo_conn(void *arg)
{
    int fd = (int)(intptr_t)arg;
    unsigned char buf[BUF];
    long total = 0;
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            fprintf(stderr, "%s: server read: %s\n", who_am_i, strerror(errno));
            exit(1);
        }
        if (n == 0)
            break;
        write_all(fd, buf, (size_t)n, "server");
        total += n;
    }
    CHECK(close(fd) == 0);
    if (total != nbytes) {
        fprintf(stderr, "%s: server: a connection echoed %ld bytes, want %ld\n", who_am_i, total,
                nbytes);
        exit(1);
    }
    __atomic_fetch_add(&echoed, total, __ATOMIC_RELAXED);
    return NULL;
}

static void *acceptor(void *arg)
{
    (void)arg;
    pthread_t *t = calloc((size_t)nconn, sizeof *t);
    CHECK(t != NULL);
    for (long k = 0; k < nconn; k++) {
        int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0 && (errno == EINTR || errno == ECONNABORTED)) {
            k--;
            continue;
        }
        if (fd < 0) {
            fprintf(stderr, "%s: accept after %ld connections: %s\n", who_am_i, k, strerror(errno));
            exit(1);
        }
        __atomic_fetch_add(&accepted, 1, __ATOMIC_RELAXED);
        int err = pthread_create(&t[k], &small_stack, echo_conn, (void *)(intptr_t)fd);
        if (err) {
            fprintf(stderr, "%s: pthread_create (server, connection %ld): %s\n", who_am_i, k,
                    strerror(err));
            exit(1);
        }
    }
    for (long k = 0; k < nconn; k++)
        EXPECT(pthread_join(t[k], NULL), 0);
    free(t);
    return NULL;
}

/*
 * Start the client process: fork, and in the child only async-signal-safe
 * calls before execve (the parent may run under goshim, with other threads
 * holding locks the child would inherit held). Everything the child needs is
 * prepared here first. The listening socket is close-on-exec.
 */
static pid_t start_client(const char *argv0)
{
    char port[16], n[24], bytes[24], server[24];
    snprintf(port, sizeof port, "%u", (unsigned)ntohs(server_addr.sin_port));
    snprintf(n, sizeof n, "%ld", nconn);
    snprintf(bytes, sizeof bytes, "%ld", nbytes);
    snprintf(server, sizeof server, "%ld", (long)getpid());
    char *const cargv[] = {(char *)argv0, CLIENT_ARG, port, n, bytes, server, NULL};
    static const char exec_failed[] = "prog_net_echo: cannot exec /proc/self/exe for the "
                                      "client process\n";

    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "%s: fork (client process): %s\n", who_am_i, strerror(errno));
        exit(1);
    }
    if (pid == 0) {
        execve("/proc/self/exe", cargv, environ);
        ssize_t w = write(STDERR_FILENO, exec_failed, sizeof exec_failed - 1);
        (void)w;
        _exit(127);
    }
    return pid;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], CLIENT_ARG) == 0)
        return client_main(argc, argv);

    nconn = argc > 1 ? number(argv[1]) : 100;
    nbytes = argc > 2 ? number(argv[2]) : 10000;
    if (argc > 3 || nconn < 1 || nbytes < 0 || nconn > INT32_MAX || nbytes > INT64_MAX / nconn) {
        fprintf(stderr, "usage: prog_net_echo [N>=1 [BYTES>=0]]\n");
        return 1;
    }
    raise_nofile(nconn + FD_SPARE);

    listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(listen_fd >= 0);
    int one = 1;
    CHECK(setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0);
    memset(&server_addr, 0, sizeof server_addr);
    server_addr.sin_family = AF_INET;
    server_addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    server_addr.sin_port = 0;
    CHECK(bind(listen_fd, (struct sockaddr *)&server_addr, sizeof server_addr) == 0);
    socklen_t alen = sizeof server_addr;
    CHECK(getsockname(listen_fd, (struct sockaddr *)&server_addr, &alen) == 0);
    /* A backlog for all at once (the kernel caps it at net.core.somaxconn). */
    int backlog = nconn > SOMAXCONN ? (int)(nconn < 65535 ? nconn : 65535) : SOMAXCONN;
    CHECK(listen(listen_fd, backlog) == 0);

    EXPECT(pthread_attr_init(&small_stack), 0);
    EXPECT(pthread_attr_setstacksize(&small_stack, 64 * 1024), 0); /* natively, spare memory */

    /* Before any thread of ours exists; its connections wait in the backlog. */
    pid_t child = start_client(argv[0]);

    pthread_t srv;
    EXPECT(pthread_create(&srv, &small_stack, acceptor, NULL), 0);

    /* The client first: if it fails, the acceptor may wait for connections forever. */
    int st;
    pid_t w;
    while ((w = waitpid(child, &st, 0)) < 0 && errno == EINTR)
        ;
    CHECK(w == child);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        if (WIFSIGNALED(st))
            fprintf(stderr, "%s: the client process was killed by signal %d (%s)\n", who_am_i,
                    WTERMSIG(st), strsignal(WTERMSIG(st)));
        else
            fprintf(stderr, "%s: the client process failed (exit status %d%s)\n", who_am_i,
                    WEXITSTATUS(st), WEXITSTATUS(st) == 127 ? ": could not exec" : "");
        return 1;
    }
    EXPECT(pthread_join(srv, NULL), 0);

    /* Exactly N: no further connection waits in the backlog. */
    int fl = fcntl(listen_fd, F_GETFL);
    CHECK(fl >= 0 && fcntl(listen_fd, F_SETFL, fl | O_NONBLOCK) == 0);
    int extra = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (extra >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
        fprintf(stderr, "%s: accepted %ld connections, want exactly %ld (%s)\n", who_am_i,
                accepted + (extra >= 0), nconn,
                extra >= 0 ? "another one was pending" : strerror(errno));
        return 1;
    }
    CHECK(close(listen_fd) == 0);

    long total = nconn * nbytes;
    if (accepted != nconn || echoed != total) {
        fprintf(stderr, "%s: accepted %ld connections and echoed %ld bytes, want %ld and %ld\n",
                who_am_i, accepted, echoed, nconn, total);
        return 1;
    }
    printf("connections=%ld bytes=%ld ok\n", nconn, total);
    return 0;
}
