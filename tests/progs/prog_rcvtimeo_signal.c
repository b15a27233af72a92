/*
 * recv on a socket with SO_RCVTIMEO while another thread sends SIGURG, which the program
 * ignores (its default), to the receiving thread and then to the process. The kernel ends
 * such a recv with EINTR at any signal that is caught, SA_RESTART or not, but an ignored
 * one never interrupts it: natively both recvs say EAGAIN when the timeout passes. goshim
 * catches SIGURG (its preemption signal, passed on to the program's disposition) and
 * without a netpoller (GOSHIM_FAULT=poller:1) makes this recv in the kernel: it must not
 * show the program that EINTR (tests/test_preload_fault.c).
 *
 *   prog_rcvtimeo_signal
 *
 * Output, exit 0: one line per target, "SIGURG to the thread: recv timed out (EAGAIN)".
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "prog_check.h"

static pthread_t receiver;

/* 10 ms into the receiver's 60 ms wait: SIGURG to it (arg NULL) or to the process. */
static void *kick(void *arg)
{
    struct timespec gap = {0, 10000000};
    nanosleep(&gap, NULL);
    if (arg)
        CHECK(kill(getpid(), SIGURG) == 0);
    else
        EXPECT(pthread_kill(receiver, SIGURG), 0);
    return NULL;
}

int main(void)
{
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    struct timeval tv = {0, 60000};
    CHECK(setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0);
    receiver = pthread_self();
    for (int k = 0; k < 2; k++) {
        pthread_t t;
        EXPECT(pthread_create(&t, NULL, kick, k ? (void *)1 : NULL), 0);
        char c;
        ssize_t r = recv(sv[0], &c, 1, 0);
        int err = errno;
        EXPECT(pthread_join(t, NULL), 0);
        printf("SIGURG to the %s: ", k ? "process" : "thread");
        if (r == -1 && err == EAGAIN)
            printf("recv timed out (EAGAIN)\n");
        else
            printf("recv returned %zd (%s)\n", r, r < 0 ? strerror(err) : "data");
    }
    return 0;
}
