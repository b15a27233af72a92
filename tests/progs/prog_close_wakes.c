/*
 * close() of a descriptor another thread is blocked on.
 *
 *   prog_close_wakes [SETTLE_MS [WAKE_MS]]   (defaults 20 and 2000)
 *
 * A reader thread blocks in read() on an empty pipe; main closes the read
 * end. Under goshim the netpoller wakes the reader with EBADF (as Go's
 * runtime does). Natively Linux does not wake it: the program notices that
 * (pthread_timedjoin_np with WAKE_MS), closes the write end, and the reader
 * gets EOF. Then the same with recv() on a socketpair.
 *
 * "Blocked in the kernel" cannot be awaited, so main waits for the
 * reader's "about to read" semaphore, then SETTLE_MS, and then (when
 * /proc shows the OS thread that ran the reader) until that thread is
 * asleep, at most WAKE_MS more.
 *
 * Output, exactly one line per case:
 *   read: EBADF                      or  read: EOF after writer closed (native)
 *   recv: EBADF                      or  recv: EOF after writer closed (native)
 * exit 0; anything else is reported on stderr with exit 1.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "prog_check.h"

struct reader {
    int fd;
    int use_recv;
    sem_t ready;
    long tid;
    ssize_t ret;
    int err;
};

static void *reader_fn(void *arg)
{
    struct reader *r = arg;
    char c;
    __atomic_store_n(&r->tid, (long)syscall(SYS_gettid), __ATOMIC_RELEASE);
    CHECK(sem_post(&r->ready) == 0);
    r->ret = r->use_recv ? recv(r->fd, &c, 1, 0) : read(r->fd, &c, 1);
    r->err = errno;
    return NULL;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* 'S' (or 'D') when the OS thread tid sleeps in the kernel; 0 if /proc cannot tell. */
static char thread_state(long tid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/self/task/%ld/stat", tid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the name may contain spaces and parentheses */
    return p && p[1] == ' ' ? p[2] : 0;
}

static void wait_until_blocked(struct reader *r, long settle_ms, long bound_ms)
{
    CHECK(wait_sem(&r->ready) == 0);
    sleep_ms(settle_ms);
    long tid = __atomic_load_n(&r->tid, __ATOMIC_ACQUIRE);
    if (tid == (long)syscall(SYS_gettid))
        return; /* the reader's OS thread runs us now: the reader is parked */
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        char s = thread_state(tid);
        if (s == 0 || s == 'S' || s == 'D' || ms_since(&t0) >= bound_ms)
            return;
        sleep_ms(1);
    }
}

static void run_case(const char *name, int rfd, int wfd, int use_recv, long settle_ms, long wake_ms)
{
    struct reader r = {.fd = rfd, .use_recv = use_recv};
    pthread_t t;
    CHECK(sem_init(&r.ready, 0, 0) == 0);
    EXPECT(pthread_create(&t, NULL, reader_fn, &r), 0);
    wait_until_blocked(&r, settle_ms, wake_ms);
    CHECK(close(rfd) == 0);

    struct timespec deadline = in_ms(CLOCK_REALTIME, wake_ms);
    int err = pthread_timedjoin_np(t, NULL, &deadline);
    int writer_closed = 0;
    if (err == ETIMEDOUT) {
        /* Still blocked (as natively): EOF from the other end releases it. */
        CHECK(close(wfd) == 0);
        writer_closed = 1;
        EXPECT(pthread_join(t, NULL), 0);
    } else if (err != 0) {
        fail(__FILE__, __LINE__, "pthread_timedjoin_np", err, 0);
    }
    if (!writer_closed && r.ret == -1 && r.err == EBADF) {
        printf("%s: EBADF\n", name);
        CHECK(close(wfd) == 0);
    } else if (writer_closed && r.ret == 0) {
        printf("%s: EOF after writer closed\n", name);
    } else {
        fprintf(stderr, "prog_close_wakes: %s: returned %zd (errno %d: %s)%s\n", name, r.ret, r.err,
                strerror(r.err),
                writer_closed ? " after the writer closed" : " before the writer closed");
        exit(1);
    }
    CHECK(sem_destroy(&r.ready) == 0);
}

int main(int argc, char **argv)
{
    long settle_ms = argc > 1 ? atol(argv[1]) : 20;
    long wake_ms = argc > 2 ? atol(argv[2]) : 2000;
    if (settle_ms < 0 || wake_ms < 1) {
        fprintf(stderr, "usage: prog_close_wakes [SETTLE_MS [WAKE_MS]]\n");
        return 1;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);

    int p[2];
    CHECK(pipe(p) == 0);
    run_case("read", p[0], p[1], 0, settle_ms, wake_ms);

    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    run_case("recv", sv[0], sv[1], 1, settle_ms, wake_ms);
    return 0;
}
