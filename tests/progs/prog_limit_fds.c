/*
 * prog_limit_fds [ROUNDS]: threads talking over pipes while the process
 * has as many descriptors open as RLIMIT_NOFILE allows (run it under a
 * small limit, nofile=16, with tests/progs/prog_limits_exec).
 *
 * Two threads ping-pong a byte over two pipes ROUNDS times (default 200:
 * blocking reads, the kind goshim's netpoller waits for); then the main
 * thread opens /dev/null until open fails, and says how; then the two
 * threads ping-pong again, the table full; then it closes what it opened
 * and the threads play a third time. The same run natively and under
 * goshim must print the same: goshim's own descriptors must not take the
 * program's (a table one short natively is one short under goshim too).
 *
 * Output: "pingpong 1 ok", "opened N more, then EMFILE", "pingpong 2 ok",
 * "pingpong 3 ok". Exit 0; 1 on an unexpected error.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "prog_check.h"

static int ping[2], pong[2];
static long rounds = 200;

static void *ponger(void *arg)
{
    (void)arg;
    char c;
    for (;;) {
        ssize_t n = read(ping[0], &c, 1);
        CHECK(n == 1);
        if (c == 'q')
            return NULL;
        CHECK(write(pong[1], &c, 1) == 1);
    }
}

static void play(int round)
{
    char c = 'x';
    for (long i = 0; i < rounds; i++) {
        CHECK(write(ping[1], &c, 1) == 1);
        CHECK(read(pong[0], &c, 1) == 1);
    }
    printf("pingpong %d ok\n", round);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        rounds = atol(argv[1]);
    CHECK(pipe(ping) == 0 && pipe(pong) == 0);
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, ponger, NULL), 0);
    play(1);

    int fds[4096];
    int n = 0, err = 0;
    while (n < (int)(sizeof fds / sizeof fds[0])) {
        int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            err = errno;
            break;
        }
        fds[n++] = fd;
    }
    printf("opened %d more, then %s\n", n, err == EMFILE ? "EMFILE" : strerror(err));
    fflush(stdout);
    play(2);
    for (int i = 0; i < n; i++)
        CHECK(close(fds[i]) == 0);
    play(3);
    char q = 'q';
    CHECK(write(ping[1], &q, 1) == 1);
    EXPECT(pthread_join(t, NULL), 0);
    return 0;
}
