/*
 * Accept storm: K client threads connect at once to a listener whose one
 * thread accepts all K with plain blocking accept().
 *
 *   prog_accept_storm [K]          (default 1000)
 *
 * The clients wait at a barrier, then all connect, send their index (4
 * bytes) and close. The server accepts all K first (they are all open at
 * once), then reads each index and expects EOF after it; every index must
 * be seen exactly once. Output: "accepted=K ok", exit 0.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "prog_check.h"

static long k_clients;
static int listen_fd;
static struct sockaddr_in addr;
static pthread_barrier_t start;
static pthread_attr_t small_stack;

/* Soft RLIMIT_NOFILE up to the hard limit; the hard one too if it is lower and we may. */
static void raise_nofile(long need)
{
    struct rlimit rl;
    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    if (rl.rlim_cur == RLIM_INFINITY || (long)rl.rlim_cur >= need)
        return;
    if (rl.rlim_max != RLIM_INFINITY && (long)rl.rlim_max < need) {
        struct rlimit want = {(rlim_t)need, (rlim_t)need};
        if (setrlimit(RLIMIT_NOFILE, &want) != 0) {
            fprintf(stderr,
                    "prog_accept_storm: need %ld file descriptors, RLIMIT_NOFILE hard limit is "
                    "%lu and raising it failed: %s (run as root or raise `ulimit -Hn`)\n",
                    need, (unsigned long)rl.rlim_max, strerror(errno));
            exit(1);
        }
        return;
    }
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
        fprintf(stderr, "prog_accept_storm: cannot raise RLIMIT_NOFILE to %lu: %s\n",
                (unsigned long)rl.rlim_max, strerror(errno));
        exit(1);
    }
}

static void *client(void *arg)
{
    uint32_t id = (uint32_t)(uintptr_t)arg;
    int r = pthread_barrier_wait(&start);
    if (r != 0 && r != PTHREAD_BARRIER_SERIAL_THREAD)
        fail(__FILE__, __LINE__, "pthread_barrier_wait", r, 0);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    while ((r = connect(fd, (struct sockaddr *)&addr, sizeof addr)) < 0 && errno == EINTR)
        ;
    if (r < 0) {
        fprintf(stderr, "prog_accept_storm: client %u: connect: %s\n", id, strerror(errno));
        exit(1);
    }
    ssize_t w;
    while ((w = write(fd, &id, sizeof id)) < 0 && errno == EINTR)
        ;
    if (w != (ssize_t)sizeof id) {
        fprintf(stderr, "prog_accept_storm: client %u: write returned %zd (%s)\n", id, w,
                strerror(errno));
        exit(1);
    }
    CHECK(close(fd) == 0);
    return NULL;
}

static void *server(void *arg)
{
    (void)arg;
    int *fds = calloc((size_t)k_clients, sizeof *fds);
    unsigned char *seen = calloc((size_t)k_clients, 1);
    CHECK(fds != NULL && seen != NULL);
    for (long k = 0; k < k_clients; k++) {
        int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0 && (errno == EINTR || errno == ECONNABORTED)) {
            k--;
            continue;
        }
        if (fd < 0) {
            fprintf(stderr, "prog_accept_storm: accept after %ld: %s\n", k, strerror(errno));
            exit(1);
        }
        fds[k] = fd;
    }
    for (long k = 0; k < k_clients; k++) {
        uint32_t id;
        size_t got = 0;
        while (got < sizeof id) {
            ssize_t n = read(fds[k], (char *)&id + got, sizeof id - got);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                fprintf(stderr, "prog_accept_storm: connection %ld: read returned %zd (%s)\n", k, n,
                        n < 0 ? strerror(errno) : "EOF before the index");
                exit(1);
            }
            got += (size_t)n;
        }
        char extra;
        ssize_t n;
        while ((n = read(fds[k], &extra, 1)) < 0 && errno == EINTR)
            ;
        if (n != 0) {
            fprintf(stderr, "prog_accept_storm: connection %ld: want EOF after the index\n", k);
            exit(1);
        }
        if (id >= (uint32_t)k_clients || seen[id]) {
            fprintf(stderr, "prog_accept_storm: index %u %s\n", id,
                    id >= (uint32_t)k_clients ? "out of range" : "seen twice");
            exit(1);
        }
        seen[id] = 1;
        CHECK(close(fds[k]) == 0);
    }
    for (long i = 0; i < k_clients; i++) {
        if (!seen[i]) {
            fprintf(stderr, "prog_accept_storm: index %ld never seen\n", i);
            exit(1);
        }
    }
    free(fds);
    free(seen);
    return NULL;
}

int main(int argc, char **argv)
{
    k_clients = argc > 1 ? atol(argv[1]) : 1000;
    if (k_clients < 1) {
        fprintf(stderr, "usage: prog_accept_storm [K>=1]\n");
        return 1;
    }
    raise_nofile(2 * k_clients + 64);
    listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(listen_fd >= 0);
    int one = 1;
    CHECK(setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0);
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(bind(listen_fd, (struct sockaddr *)&addr, sizeof addr) == 0);
    socklen_t alen = sizeof addr;
    CHECK(getsockname(listen_fd, (struct sockaddr *)&addr, &alen) == 0);
    /* A backlog for all at once (the kernel caps it at net.core.somaxconn). */
    int backlog = k_clients > SOMAXCONN ? (int)(k_clients < 65535 ? k_clients : 65535) : SOMAXCONN;
    CHECK(listen(listen_fd, backlog) == 0);

    EXPECT(pthread_attr_init(&small_stack), 0);
    EXPECT(pthread_attr_setstacksize(&small_stack, 64 * 1024), 0);
    EXPECT(pthread_barrier_init(&start, NULL, (unsigned)k_clients), 0);
    pthread_t srv;
    EXPECT(pthread_create(&srv, &small_stack, server, NULL), 0);
    pthread_t *t = calloc((size_t)k_clients, sizeof *t);
    CHECK(t != NULL);
    for (long i = 0; i < k_clients; i++) {
        int err = pthread_create(&t[i], &small_stack, client, (void *)(uintptr_t)i);
        if (err) {
            fprintf(stderr, "prog_accept_storm: pthread_create (client %ld): %s\n", i,
                    strerror(err));
            exit(1);
        }
    }
    for (long i = 0; i < k_clients; i++)
        EXPECT(pthread_join(t[i], NULL), 0);
    EXPECT(pthread_join(srv, NULL), 0);
    CHECK(close(listen_fd) == 0);
    free(t);
    printf("accepted=%ld ok\n", k_clients);
    return 0;
}
