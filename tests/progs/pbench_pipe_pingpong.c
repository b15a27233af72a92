/*
 * pbench_pipe_pingpong: two threads bounce a small message over two pipes
 * with plain blocking read and write; ns per round trip.
 *
 *   usage: pbench_pipe_pingpong ROUNDS [procs]
 *
 * With "procs", ping and pong are two processes of one thread each (pong a
 * forked child): no thread is ever created.
 *
 * Thread "ping" writes a 16-byte message into pipe A and reads the answer
 * from pipe B; thread "pong" reads pipe A and writes the message back,
 * incremented, into pipe B. One round trip = 2 writes + 2 reads. The time
 * is taken by ping with CLOCK_MONOTONIC around its loop only (after both
 * threads exist). Every answer is checked. A plain pthread program for
 * scripts/bench_io.sh, which runs it natively and under the preload.
 * Prints one line: "rounds=R ns_per_roundtrip=X"; exit 0, or 1 (usage),
 * 2 (a system call failed), 3 (a wrong answer).
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#define MSG_SIZE 16

static int pipe_a[2], pipe_b[2]; /* [0] read end, [1] write end */
static long rounds;
static double elapsed_ns;
static pthread_barrier_t start;

struct msg {
    uint64_t seq;
    uint64_t check;
};

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void die(const char *what)
{
    fprintf(stderr, "pbench_pipe_pingpong: %s: %s\n", what, strerror(errno));
    exit(2);
}

/* Read exactly MSG_SIZE bytes (a pipe may, in theory, split them). */
static void read_msg(int fd, struct msg *m)
{
    char *p = (char *)m;
    size_t got = 0;
    while (got < MSG_SIZE) {
        ssize_t n = read(fd, p + got, MSG_SIZE - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            die("read");
        if (n == 0) {
            fprintf(stderr, "pbench_pipe_pingpong: unexpected end of pipe\n");
            exit(2);
        }
        got += (size_t)n;
    }
}

static void write_msg(int fd, const struct msg *m)
{
    const char *p = (const char *)m;
    size_t put = 0;
    while (put < MSG_SIZE) {
        ssize_t n = write(fd, p + put, MSG_SIZE - put);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            die("write");
        put += (size_t)n;
    }
}

static void *ping(void *arg)
{
    if (!arg)
        pthread_barrier_wait(&start);
    double t0 = now_ns();
    for (long i = 0; i < rounds; i++) {
        struct msg m = {(uint64_t)i, ~(uint64_t)i};
        write_msg(pipe_a[1], &m);
        read_msg(pipe_b[0], &m);
        if (m.seq != (uint64_t)i + 1 || m.check != ~((uint64_t)i + 1)) {
            fprintf(stderr, "pbench_pipe_pingpong: round %ld: got seq %llu, expected %ld\n", i,
                    (unsigned long long)m.seq, i + 1);
            exit(3);
        }
    }
    elapsed_ns = now_ns() - t0;
    return NULL;
}

static void *pong(void *arg)
{
    if (!arg)
        pthread_barrier_wait(&start);
    for (long i = 0; i < rounds; i++) {
        struct msg m;
        read_msg(pipe_a[0], &m);
        if (m.seq != (uint64_t)i || m.check != ~(uint64_t)i) {
            fprintf(stderr, "pbench_pipe_pingpong: pong round %ld: got seq %llu\n", i,
                    (unsigned long long)m.seq);
            exit(3);
        }
        m.seq++;
        m.check = ~m.seq;
        write_msg(pipe_b[1], &m);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    rounds = argc > 1 ? atol(argv[1]) : 10000;
    bool procs = argc == 3 && strcmp(argv[2], "procs") == 0;
    if ((argc != 2 && !procs) || rounds < 1) {
        fprintf(stderr, "usage: %s ROUNDS [procs]\n", argv[0]);
        return 1;
    }
    if (pipe(pipe_a) != 0 || pipe(pipe_b) != 0)
        die("pipe");
    if (procs) { /* (a non-NULL argument: no barrier, the processes start as they are) */
        pid_t pid = fork();
        if (pid < 0)
            die("fork");
        if (pid == 0) {
            pong(&rounds);
            exit(0);
        }
        ping(&rounds);
        int st;
        if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "pbench_pipe_pingpong: pong process failed\n");
            return 2;
        }
        printf("rounds=%ld ns_per_roundtrip=%.1f\n", rounds, elapsed_ns / (double)rounds);
        return 0;
    }
    pthread_barrier_init(&start, NULL, 2);
    pthread_t t[2];
    int err;
    if ((err = pthread_create(&t[0], NULL, pong, NULL)) != 0 ||
        (err = pthread_create(&t[1], NULL, ping, NULL)) != 0) {
        fprintf(stderr, "pbench_pipe_pingpong: pthread_create: %s\n", strerror(err));
        return 2;
    }
    pthread_join(t[0], NULL);
    pthread_join(t[1], NULL);
    printf("rounds=%ld ns_per_roundtrip=%.1f\n", rounds, elapsed_ns / (double)rounds);
    return 0;
}
