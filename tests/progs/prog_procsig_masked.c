/*
 * A signal sent to the process reaches a thread that waits with a call
 * whose own mask lets it through (issue 13): for that call the call's mask
 * is the thread's.
 *
 *   prog_procsig_masked ppoll|pselect|epoll_pwait|epoll_pwait2
 *       main and a worker block SIGUSR1; main waits on a pipe nobody writes
 *       with a mask that lets SIGUSR1 through, with it pending already (sent
 *       to the process), sent by a child during the wait, and sent by a
 *       thread (kill of the process) while another thread takes it too (the
 *       kernel prefers the main thread): the call fails with EINTR, the
 *       handler ran on main before it returned, SIGUSR1 is blocked again
 *       afterwards (in the last case an EINTR whose signal the other thread
 *       took first is waited again, as the kernel allows it)
 *
 * The other process-signal cases are prog_procsig's (shared code in
 * procsig.h). Output is fixed for each mode; exit 0.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <time.h>
#include <unistd.h>

#include "prog_check.h"
#include "procsig.h"

static int worker_stop_fd[2];
static volatile int wait_over;

/* Takes SIGUSR1 (on_other if it runs its handler) until told to stop. */
static void *usr1_taker(void *arg)
{
    int fd = *(int *)arg;
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    EXPECT(pthread_sigmask(SIG_UNBLOCK, &usr1, NULL), 0);
    char c;
    while (read(fd, &c, 1) < 0 && errno == EINTR)
        ;
    return NULL;
}

/* Blocks SIGUSR1 (inherited) and sends it to the process every 20 ms while main waits. */
static void *usr1_sender(void *arg)
{
    (void)arg;
    for (int i = 0; i < 250 && !wait_over; i++) {
        kill(getpid(), SIGUSR1);
        struct timespec ts = {0, 20 * 1000 * 1000}; /* pacing, not synchronisation */
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static void *blocking_worker(void *arg)
{
    (void)arg;
    char c;
    while (read(worker_stop_fd[0], &c, 1) < 0 && errno == EINTR) /* parked, SIGUSR1 blocked */
        ;
    return NULL;
}

/* One wait of the kind mode names on fd (never readable), 5 s at most, with mask. */
static int masked_wait(const char *mode, int fd, int epfd, const sigset_t *mask)
{
    struct timespec five = {5, 0};
    if (!strcmp(mode, "ppoll")) {
        struct pollfd pfd = {fd, POLLIN, 0};
        return ppoll(&pfd, 1, &five, mask);
    }
    if (!strcmp(mode, "pselect")) {
        fd_set r;
        FD_ZERO(&r);
        FD_SET(fd, &r);
        return pselect(fd + 1, &r, NULL, NULL, &five, mask);
    }
    struct epoll_event ev;
    if (!strcmp(mode, "epoll_pwait"))
        return epoll_pwait(epfd, &ev, 1, 5000, mask);
    return epoll_pwait2(epfd, &ev, 1, &five, mask);
}

/* The never-readable pipe's read end (in *fd) and an epoll instance watching it. */
static int epoll_on_a_pipe(int *fd)
{
    int p[2];
    CHECK(pipe(p) == 0);
    int epfd = epoll_create1(0);
    CHECK(epfd >= 0);
    struct epoll_event ev = {.events = EPOLLIN};
    ev.data.fd = p[0];
    CHECK(epoll_ctl(epfd, EPOLL_CTL_ADD, p[0], &ev) == 0);
    *fd = p[0]; /* p[1] stays open and unwritten: no data, no EOF */
    return epfd;
}

/*
 * Round 0: SIGUSR1 is pending for the process before the call; round 1: a
 * child sends it during the call; round 2: a thread sends it while another
 * thread takes it too. True if the call failed with EINTR after the handler
 * ran on main, and SIGUSR1 is blocked again afterwards.
 */
static bool masked_round(const char *mode, int round, int fd, int epfd, const sigset_t *open_set)
{
    handled = on_main = on_other = 0;
    int stopfd[2];
    pthread_t taker, sender;
    if (round == 0) {
        CHECK(kill(getpid(), SIGUSR1) == 0); /* pending for the process: nobody takes it */
    } else if (round == 1) {
        close(killer(SIGUSR1, 250));
    } else {
        CHECK(pipe(stopfd) == 0);
        wait_over = 0;
        EXPECT(pthread_create(&taker, NULL, usr1_taker, &stopfd[0]), 0);
        EXPECT(pthread_create(&sender, NULL, usr1_sender, NULL), 0);
    }
    int r = masked_wait(mode, fd, epfd, open_set);
    int e = errno;
    /* Round 2: the kernel may wake main for a signal that the taker, running,
     * dequeues first; main's call then fails with EINTR and no handler (seen once
     * natively, under load). Its next wait gets the sender's next signal. */
    for (int again = 0; round == 2 && r == -1 && e == EINTR && !on_main && again < 20; again++) {
        r = masked_wait(mode, fd, epfd, open_set);
        e = errno;
    }
    int ran = on_main; /* main blocks SIGUSR1 but during the call */
    if (round == 1)
        end_killer();
    if (round == 2) {
        wait_over = 1;
        EXPECT(pthread_join(sender, NULL), 0);
        CHECK(write(stopfd[1], "x", 1) == 1);
        EXPECT(pthread_join(taker, NULL), 0);
        close(stopfd[0]);
        close(stopfd[1]);
    }
    sigset_t now;
    pthread_sigmask(SIG_BLOCK, NULL, &now);
    /* Before the call the taker of round 2 may get some: not main. */
    bool ok = r == -1 && e == EINTR && ran && (round == 2 || !on_other) &&
              sigismember(&now, SIGUSR1) == 1;
    if (!ok)
        fprintf(stderr, "%s round %d: returned %d errno %d, handled %d on main %d other %d\n", mode,
                round, r, e, (int)handled, ran, (int)on_other);
    return ok;
}

static int mode_masked(const char *mode)
{
    install(SIGUSR1, note, 0);
    sigset_t usr1, open_set;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    EXPECT(pthread_sigmask(SIG_BLOCK, &usr1, NULL), 0);
    CHECK(pipe(worker_stop_fd) == 0);
    pthread_t w;
    EXPECT(pthread_create(&w, NULL, blocking_worker, NULL), 0); /* blocks SIGUSR1 too */
    int fd;
    int epfd = epoll_on_a_pipe(&fd);
    pthread_sigmask(SIG_BLOCK, NULL, &open_set);
    sigdelset(&open_set, SIGUSR1);
    bool ok[3];
    for (int round = 0; round < 3; round++)
        ok[round] = masked_round(mode, round, fd, epfd, &open_set);
    CHECK(write(worker_stop_fd[1], "x", 1) == 1);
    EXPECT(pthread_join(w, NULL), 0);
    sigset_t pend;
    sigpending(&pend);
    printf("%s: EINTR after the handler ran on main: pending before: %s, from a child: %s, from "
           "a thread while another takes it: %s; blocked again, none pending: %s\n",
           mode, ok[0] ? "yes" : "no", ok[1] ? "yes" : "no", ok[2] ? "yes" : "no",
           sigismember(&pend, SIGUSR1) == 0 ? "yes" : "no");
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    expected = pthread_self();
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!strcmp(mode, "ppoll") || !strcmp(mode, "pselect") || !strcmp(mode, "epoll_pwait") ||
        !strcmp(mode, "epoll_pwait2"))
        return mode_masked(mode);
    fprintf(stderr, "usage: prog_procsig_masked ppoll|pselect|epoll_pwait|epoll_pwait2\n");
    return 2;
}
