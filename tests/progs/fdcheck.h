/*
 * Shared by prog_fd_hidden and prog_fd_closeall: what a program sees of
 * its descriptors, and blocking pipe, socket and poll I/O between threads.
 * Plain C and pthreads, no goshim headers (the programs run natively too).
 */
#ifndef GOSHIM_TESTS_FDCHECK_H
#define GOSHIM_TESTS_FDCHECK_H

#include <dirent.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "prog_check.h"

/* The fds to look at: [0, the soft RLIMIT_NOFILE), at most 1 << 16. */
static inline int fd_scan_end(void)
{
    struct rlimit rl;
    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    return rl.rlim_cur > (1 << 16) ? 1 << 16 : (int)rl.rlim_cur;
}

static int fd_cmp(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

/*
 * Print "who: dir=... fcntl=..." : the names in /proc/self/fd in numeric
 * order but the directory's own fd, then every fd below fd_scan_end() that
 * fcntl(F_GETFD) says is open (the directory closed by then). Both must be
 * what the program itself opened or inherited. With show_dirfd, the
 * directory's fd too ("dirfd=N"), the lowest free number: not when the
 * program filled every number up to goshim's own, which then gets its
 * next fd a few numbers higher than natively.
 */
static inline void fd_print(const char *who, int show_dirfd)
{
    static int fds[1 << 16];
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    CHECK(d != NULL);
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.' && atoi(e->d_name) != dirfd(d) &&
            n < (int)(sizeof fds / sizeof *fds))
            fds[n++] = atoi(e->d_name);
    qsort(fds, (size_t)n, sizeof *fds, fd_cmp);
    printf("%s: ", who);
    if (show_dirfd)
        printf("dirfd=%d ", dirfd(d));
    printf("dir=");
    for (int i = 0; i < n; i++)
        printf("%s%d", i ? "," : "", fds[i]);
    CHECK(closedir(d) == 0);
    printf(" fcntl=");
    int end = fd_scan_end(), k = 0;
    for (int fd = 0; fd < end; fd++)
        if (fcntl(fd, F_GETFD) >= 0)
            printf("%s%d", k++ ? "," : "", fd);
    printf("\n");
    fflush(stdout);
}

/* ---- blocking I/O between threads ------------------------------------------------------ */

struct fd_pong {
    int in, out; /* the echoing thread reads in, answers on out */
    int use_poll;
    long rounds;
};

static inline void fd_read1(int fd, unsigned char *c, int use_poll)
{
    for (;;) {
        if (use_poll) {
            struct pollfd p = {fd, POLLIN, 0};
            int r = poll(&p, 1, -1);
            if (r < 0 && errno == EINTR)
                continue;
            CHECK(r == 1);
        }
        ssize_t n = read(fd, c, 1);
        if (n < 0 && errno == EINTR)
            continue;
        CHECK(n == 1);
        return;
    }
}

static inline void fd_write1(int fd, unsigned char c)
{
    ssize_t n;
    while ((n = write(fd, &c, 1)) < 0 && errno == EINTR)
        ;
    CHECK(n == 1);
}

static void *fd_echo(void *arg)
{
    struct fd_pong *p = arg;
    for (long i = 0; i < p->rounds; i++) {
        unsigned char c;
        fd_read1(p->in, &c, p->use_poll);
        fd_write1(p->out, (unsigned char)(c + 1));
    }
    return NULL;
}

/* rounds of ping-pong with a second thread over a pair of pipes (socket: a
 * socketpair instead), each side waiting in a blocking read (use_poll: in
 * poll first); every answer is checked. All fds are closed again. */
static inline void fd_pingpong(int socket, int use_poll, long rounds)
{
    int a[2], b[2];
    if (socket) {
        int s[2];
        CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, s) == 0);
        a[0] = s[1]; /* the echo side reads s[1] and answers on it */
        a[1] = s[0];
        b[0] = s[0];
        b[1] = s[1];
    } else {
        CHECK(pipe(a) == 0);
        CHECK(pipe(b) == 0);
    }
    struct fd_pong p = {a[0], b[1], use_poll, rounds};
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, fd_echo, &p), 0);
    for (long i = 0; i < rounds; i++) {
        unsigned char c;
        fd_write1(a[1], (unsigned char)i);
        fd_read1(b[0], &c, use_poll);
        if (c != (unsigned char)(i + 1)) {
            fprintf(stderr, "round %ld: answer %u, want %u\n", i, c, (unsigned char)(i + 1));
            exit(1);
        }
    }
    EXPECT(pthread_join(t, NULL), 0);
    if (socket) {
        CHECK(close(a[0]) == 0 && close(a[1]) == 0);
    } else {
        CHECK(close(a[0]) == 0 && close(a[1]) == 0 && close(b[0]) == 0 && close(b[1]) == 0);
    }
}

/* Pipes, a socketpair, and pipes waited on with poll. */
static inline void fd_blocking_io(long rounds)
{
    fd_pingpong(0, 0, rounds);
    fd_pingpong(1, 0, rounds);
    fd_pingpong(0, 1, rounds);
}

#endif
