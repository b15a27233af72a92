/*
 * Two threads play ping-pong over two pipes with plain blocking reads and
 * writes.
 *
 *   prog_pipe_pingpong [R]         (default 10000 rounds)
 *
 * Round i: the pinger writes one byte (i % 251) and a second byte (i % 7)
 * into pipe A; the ponger reads both, answers (sum + 1) % 256 on pipe B;
 * the pinger checks the answer and adds it up. With one P under goshim
 * every round hands the P from one thread to the other through a blocked
 * read. Output: "rounds=R sum=S" (S depends only on R), exit 0.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "prog_check.h"

static int ab[2], ba[2];
static long rounds;

static void read_full(int fd, unsigned char *p, size_t n, const char *who)
{
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            fprintf(stderr, "prog_pipe_pingpong: %s: read returned %zd (%s)\n", who, r,
                    r < 0 ? strerror(errno) : "EOF");
            exit(1);
        }
        p += r;
        n -= (size_t)r;
    }
}

static void write_full(int fd, const unsigned char *p, size_t n, const char *who)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            fprintf(stderr, "prog_pipe_pingpong: %s: write: %s\n", who, strerror(errno));
            exit(1);
        }
        p += w;
        n -= (size_t)w;
    }
}

static void *ponger(void *arg)
{
    (void)arg;
    for (long i = 0; i < rounds; i++) {
        unsigned char m[2], r;
        read_full(ab[0], m, 2, "ponger");
        r = (unsigned char)(m[0] + m[1] + 1);
        write_full(ba[1], &r, 1, "ponger");
    }
    return NULL;
}

static long sum;

static void *pinger(void *arg)
{
    (void)arg;
    for (long i = 0; i < rounds; i++) {
        unsigned char m[2] = {(unsigned char)(i % 251), (unsigned char)(i % 7)}, r;
        write_full(ab[1], m, 2, "pinger");
        read_full(ba[0], &r, 1, "pinger");
        unsigned char want = (unsigned char)(m[0] + m[1] + 1);
        if (r != want) {
            fprintf(stderr, "prog_pipe_pingpong: round %ld: answer %u, want %u\n", i, r, want);
            exit(1);
        }
        sum += r;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    rounds = argc > 1 ? atol(argv[1]) : 10000;
    if (rounds < 1) {
        fprintf(stderr, "usage: prog_pipe_pingpong [ROUNDS>=1]\n");
        return 1;
    }
    CHECK(pipe(ab) == 0 && pipe(ba) == 0);
    pthread_t a, b;
    EXPECT(pthread_create(&b, NULL, ponger, NULL), 0);
    EXPECT(pthread_create(&a, NULL, pinger, NULL), 0);
    EXPECT(pthread_join(a, NULL), 0);
    EXPECT(pthread_join(b, NULL), 0);
    /* Nothing may be left over in either pipe. */
    CHECK(close(ab[1]) == 0 && close(ba[1]) == 0);
    unsigned char c;
    if (read(ab[0], &c, 1) != 0 || read(ba[0], &c, 1) != 0) {
        fprintf(stderr, "prog_pipe_pingpong: bytes left in a pipe\n");
        return 1;
    }
    printf("rounds=%ld sum=%ld\n", rounds, sum);
    return 0;
}
