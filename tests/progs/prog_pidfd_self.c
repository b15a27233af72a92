/*
 * pidfd_send_signal to the own process from the main thread: the handler
 * has run when the call returns, as for kill() (the kernel prefers the
 * main thread, which is the caller and does not block the signal).
 * CPython's signal.pidfd_send_signal relies on it (test_signal's
 * test_pidfd_send_signal expects KeyboardInterrupt from the call itself).
 *
 *   prog_pidfd_self [ROUNDS]   (default 300, scaled by GOSHIM_TEST_SCALE)
 *
 * Each round sends SIGUSR1 three ways, by a pidfd of the process and by its
 * /proc directory (the kernel takes both) through syscall(), and by glibc's
 * pidfd_send_signal, after a waitpid with WNOHANG while a worker computes
 * (under a runtime that multiplexes OS threads, the main thread changes OS
 * thread). Prints "handler ran before the call returned: N of N" and exits 0.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "prog_check.h"

static volatile sig_atomic_t handled, stop;

static void note(int sig)
{
    (void)sig;
    handled = 1;
}

static void *worker(void *arg)
{
    (void)arg;
    uint64_t x = 1;
    while (!stop) {
        x = xorshift_work(x, 2000);
        sched_yield();
    }
    return (void *)(uintptr_t)(x & 1);
}

int main(int argc, char **argv)
{
    long rounds = scaled(argc > 1 ? atol(argv[1]) : 300);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = note;
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%d", (int)getpid());
    int fds[2] = {(int)syscall(SYS_pidfd_open, getpid(), 0), open(dir, O_RDONLY | O_DIRECTORY)};
    CHECK(fds[0] >= 0 && fds[1] >= 0);
    sigset_t usr1, old; /* the worker blocks it: the main thread is the one to take it */
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    EXPECT(pthread_sigmask(SIG_BLOCK, &usr1, &old), 0);
    pthread_t w;
    EXPECT(pthread_create(&w, NULL, worker, NULL), 0);
    EXPECT(pthread_sigmask(SIG_SETMASK, &old, NULL), 0);
    long sent = 0, on_time = 0;
    for (long r = 0; r < rounds; r++) {
        for (int how = 0; how < 3; how++) {
            CHECK(waitpid(-1, NULL, WNOHANG) == -1 && errno == ECHILD);
            handled = 0;
            if (how < 2)
                CHECK(syscall(SYS_pidfd_send_signal, fds[how], SIGUSR1, NULL, 0) == 0);
            else
                CHECK(pidfd_send_signal(fds[0], SIGUSR1, NULL, 0) == 0);
            on_time += handled;
            sent++;
            struct timespec deadline = in_ms(CLOCK_MONOTONIC, 10000), now;
            while (!handled) { /* late: wait for it before the next round */
                clock_gettime(CLOCK_MONOTONIC, &now);
                if (now.tv_sec > deadline.tv_sec)
                    break;
                sched_yield();
            }
        }
    }
    stop = 1;
    EXPECT(pthread_join(w, NULL), 0);
    printf("handler ran before the call returned: %ld of %ld\n", on_time, sent);
    return 0;
}
