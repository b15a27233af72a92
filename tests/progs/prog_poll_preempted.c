/*
 * poll, select and epoll_wait with nothing ready, made in a loop by a thread
 * that goshim keeps preempting (another thread spins, so every slice of the
 * poller's is cut): none returns EINTR, since the program installs no
 * handler. goshim's own signals (a preemption request, a bell) must not end
 * them as the program's would. The poll lists one descriptor thousands of
 * times (as many as RLIMIT_NOFILE lets it), so that each call lasts long in
 * the kernel and the requests land in it, in two calls in a row too.
 *
 *   prog_poll_preempted [MS]   (default 1500: how long to poll)
 *
 * Output, exit 0: "zero-timeout and 1 ms polls: no EINTR". Otherwise the
 * count of EINTR results, exit 1.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <time.h>
#include <unistd.h>

#include "prog_check.h"

static atomic_int stop;

static void *spin(void *arg)
{
    (void)arg;
    while (!atomic_load_explicit(&stop, memory_order_relaxed))
        ;
    return NULL;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

enum { MANY = 16384 };
static struct pollfd many[MANY];
static nfds_t nmany;

/* One round of the three calls on the empty pipe; the number of them that said EINTR. */
static int round_of_polls(int fd, int ep, int timeout_ms)
{
    int eintr = 0;
    int r = poll(many, nmany, timeout_ms);
    if (r < 0 && errno == EINTR)
        eintr++;
    else
        CHECK(r == 0);
    fd_set set;
    FD_ZERO(&set);
    FD_SET(fd, &set);
    struct timeval tv = {0, timeout_ms * 1000};
    r = select(fd + 1, &set, NULL, NULL, &tv);
    if (r < 0 && errno == EINTR)
        eintr++;
    else
        CHECK(r == 0);
    struct epoll_event ev;
    r = epoll_wait(ep, &ev, 1, timeout_ms);
    if (r < 0 && errno == EINTR)
        eintr++;
    else
        CHECK(r == 0);
    return eintr;
}

int main(int argc, char **argv)
{
    double ms = argc > 1 ? atof(argv[1]) : 1500;
    int pfd[2];
    CHECK(pipe(pfd) == 0);
    struct rlimit rl;
    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    if (rl.rlim_cur < MANY && rl.rlim_max > rl.rlim_cur) {
        rl.rlim_cur = rl.rlim_max < MANY ? rl.rlim_max : MANY;
        CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
    }
    nmany = rl.rlim_cur < MANY ? (nfds_t)rl.rlim_cur : MANY;
    for (nfds_t i = 0; i < nmany; i++)
        many[i] = (struct pollfd){.fd = pfd[0], .events = POLLIN};
    int ep = epoll_create1(0);
    CHECK(ep >= 0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = pfd[0]};
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, pfd[0], &ev) == 0);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, spin, NULL) == 0);
    long calls = 0, eintr = 0;
    double end = now_ms() + ms;
    for (long i = 0; now_ms() < end; i++) {
        eintr += round_of_polls(pfd[0], ep, i % 64 == 63 ? 1 : 0);
        calls += 3;
    }
    atomic_store(&stop, 1);
    CHECK(pthread_join(t, NULL) == 0);
    if (eintr) {
        printf("EINTR in %ld of %ld polls without a handler\n", eintr, calls);
        return 1;
    }
    printf("zero-timeout and 1 ms polls: no EINTR\n");
    return 0;
}
