/*
 * Blocking calls of a process with one thread, then two, then of a forked
 * child with one again: each behaves as natively at every step.
 *
 *   prog_lone [ROUNDS]   (default 1000, scaled by GOSHIM_TEST_SCALE)
 *
 * 1. One thread: an echo child (forked, one thread too) accepts the
 *    parent's connection on a Unix socket, and the two exchange ROUNDS
 *    numbered messages with blocking write and read; the parent's poll, select and epoll_wait on the idle
 *    socket time out (10 ms each); a nanosleep of 10 s is cut short by a
 *    timer's SIGALRM (EINTR).
 * 2. Two threads: a thread blocks in read on a pipe until the main thread
 *    writes it a byte; then the same exchange with a new echo child.
 * 3. Forked children of the two-thread process: one exchanges with the
 *    parent as the one that writes first; another has its nanosleep cut
 *    short by SIGALRM.
 *
 * Each child exits before the next begins (the parent waits for it), so
 * under GOSHIM_STATS=1 the counters of the four children come in that
 * order, then the parent's. Prints one line per step and exits 0; 1 on the
 * first difference.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <poll.h>
#include <stddef.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "prog_check.h"

static long rounds;

/* Read exactly n bytes (a stream socket may return less). */
static void read_all(int fd, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (char *)buf + got, n - got);
        CHECK(r > 0);
        got += (size_t)r;
    }
}

/* ROUNDS messages: first writes i, the other reads it and writes back i + 1. */
static void exchange(int fd, int first)
{
    for (long i = 0; i < rounds; i++) {
        long m = i, back;
        if (first) {
            CHECK(write(fd, &m, sizeof m) == (ssize_t)sizeof m);
            read_all(fd, &back, sizeof back);
            if (back != i + 1) {
                fprintf(stderr, "round %ld: got %ld back, want %ld\n", i, back, i + 1);
                exit(1);
            }
        } else {
            read_all(fd, &m, sizeof m);
            if (m != i) {
                fprintf(stderr, "round %ld: got %ld, want %ld\n", i, m, i);
                exit(1);
            }
            m++;
            CHECK(write(fd, &m, sizeof m) == (ssize_t)sizeof m);
        }
    }
}

/* Fork a child that accepts a connection on a listening Unix socket and runs the exchange
 * on it (as the first writer or not); the parent connects. Returns the parent's end and
 * the child's pid. */
static int echo_child(int child_first, pid_t *pid)
{
    static int n;
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    int len =
        snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "prog_lone-%d-%d", (int)getpid(), n++);
    socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)len);
    int l = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK(l >= 0 && bind(l, (struct sockaddr *)&a, alen) == 0 && listen(l, 1) == 0);
    *pid = fork();
    CHECK(*pid >= 0);
    if (*pid == 0) {
        int c = accept(l, NULL, NULL);
        CHECK(c >= 0);
        exchange(c, child_first);
        exit(0);
    }
    close(l);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&a, alen) == 0);
    return fd;
}

static void reap(pid_t pid)
{
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "child %d ended with status 0x%x\n", (int)pid, st);
        exit(1);
    }
}

/* poll, select and epoll_wait on a socket with nothing to read: each times out. */
static void idle_waits(void)
{
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    int fd = sv[0];
    struct pollfd p = {fd, POLLIN, 0};
    CHECK(poll(&p, 1, 10) == 0);
    fd_set r;
    FD_ZERO(&r);
    FD_SET(fd, &r);
    struct timeval tv = {0, 10000};
    CHECK(select(fd + 1, &r, NULL, NULL, &tv) == 0);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    CHECK(ep >= 0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd}, out;
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == 0);
    CHECK(epoll_wait(ep, &out, 1, 10) == 0);
    close(ep);
    close(sv[0]);
    close(sv[1]);
}

static volatile sig_atomic_t alarms;

static void on_alarm(int sig)
{
    (void)sig;
    alarms++;
}

/* A 10 s nanosleep cut short by SIGALRM 20 ms in: EINTR, most of the time left. */
static void sleep_cut_short(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_alarm;
    CHECK(sigaction(SIGALRM, &sa, NULL) == 0);
    struct itimerval it = {{0, 0}, {0, 20000}};
    CHECK(setitimer(ITIMER_REAL, &it, NULL) == 0);
    struct timespec ts = {10, 0}, rem = {0, 0};
    int r = nanosleep(&ts, &rem);
    CHECK(r == -1 && errno == EINTR && alarms > 0 && rem.tv_sec >= 5);
}

static int pipefd[2];

static void *reader(void *arg)
{
    (void)arg;
    char c;
    CHECK(read(pipefd[0], &c, 1) == 1 && c == 'x');
    return NULL;
}

int main(int argc, char **argv)
{
    rounds = scaled(argc > 1 ? atol(argv[1]) : 1000);
    setvbuf(stdout, NULL, _IONBF, 0); /* nothing buffered for the children to print again */

    pid_t pid;
    int fd = echo_child(0, &pid);
    exchange(fd, 1);
    reap(pid);
    close(fd);
    idle_waits();
    sleep_cut_short();
    printf("one thread: %ld round trips, three idle waits timed out, sleep cut short\n", rounds);

    pthread_t t;
    CHECK(pipe(pipefd) == 0);
    EXPECT(pthread_create(&t, NULL, reader, NULL), 0);
    CHECK(write(pipefd[1], "x", 1) == 1);
    EXPECT(pthread_join(t, NULL), 0);
    fd = echo_child(0, &pid);
    exchange(fd, 1);
    reap(pid);
    close(fd);
    printf("two threads: the reader woke, %ld round trips\n", rounds);

    fd = echo_child(1, &pid);
    exchange(fd, 0);
    reap(pid);
    close(fd);
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        sleep_cut_short();
        exit(0);
    }
    reap(pid);
    printf("forked child: %ld round trips, sleep cut short\n", rounds);
    return 0;
}
