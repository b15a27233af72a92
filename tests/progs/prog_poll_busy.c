/*
 * A reader woken by a pipe again and again while another thread computes:
 * a child process (forked before any thread) writes a byte every 2 ms; a
 * thread polls the pipe and reads each byte, while a second thread spins.
 * Under goshim at one P no M goes idle to poll the network, so sysmon's
 * poll is what readies the reader each time; GOSHIM_STATS's sysmon_rounds
 * over the run shows how often sysmon woke for it (tests/test_preload_io.c).
 *
 *   prog_poll_busy [MS]   (default 400: how long to read)
 *
 * Output, exit 0: "reader woke for the writer: ok" and "ran_ms=N" (the
 * reader's time). Exit 1 if it read fewer than a tenth of the bytes sent.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "prog_check.h"

enum { GAP_NS = 2000000 };

static atomic_int stop;

/* Spins; a zero-timeout poll now and then, so that under goshim a spinner whose P was
 * handed off (it stayed in libc at a preemption) takes one back and competes again. */
static void *spin(void *arg)
{
    (void)arg;
    for (unsigned long i = 0; !atomic_load_explicit(&stop, memory_order_relaxed); i++)
        if (i % 100000 == 0)
            poll(NULL, 0, 0);
    return NULL;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The child: a byte every 2 ms until the reader closes its end (EPIPE). */
static void writer(int fd)
{
    signal(SIGPIPE, SIG_IGN);
    struct timespec gap = {0, GAP_NS};
    while (write(fd, "x", 1) == 1)
        nanosleep(&gap, NULL);
    _exit(0);
}

int main(int argc, char **argv)
{
    double ms = argc > 1 ? atof(argv[1]) : 400;
    int pfd[2];
    CHECK(pipe(pfd) == 0);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        close(pfd[0]);
        writer(pfd[1]);
    }
    close(pfd[1]);
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, spin, NULL), 0);
    long got = 0;
    double start = now_ms(), end = start + ms;
    while (now_ms() < end) {
        struct pollfd p = {.fd = pfd[0], .events = POLLIN};
        CHECK(poll(&p, 1, -1) == 1);
        char buf[64];
        ssize_t n = read(pfd[0], buf, sizeof buf);
        CHECK(n > 0);
        got += n;
    }
    double ran = now_ms() - start;
    atomic_store(&stop, 1);
    EXPECT(pthread_join(t, NULL), 0);
    close(pfd[0]);
    int st;
    CHECK(waitpid(child, &st, 0) == child);
    long sent = (long)(ran * 1e6 / GAP_NS);
    if (got * 10 < sent) {
        printf("read %ld bytes of about %ld\n", got, sent);
        return 1;
    }
    printf("reader woke for the writer: ok\nran_ms=%.0f\n", ran);
    return 0;
}
