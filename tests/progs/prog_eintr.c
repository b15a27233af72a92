/*
 * Signals during blocking calls.
 *
 *   prog_eintr [BOUND_MS]          (default 3000: how long to keep signalling)
 *
 * With a SIGUSR1 handler installed WITHOUT SA_RESTART, a thread blocked in
 * read() on an empty pipe, in nanosleep(10 s) or in poll() is signalled
 * with pthread_kill (again every few ms, since a signal that arrives just
 * before the call starts is simply handled) until the call returns; it
 * must return -1/EINTR (nanosleep with 0 < rem < 10 s: the sleep is let
 * age 5 ms before the first signal). Then with
 * SA_RESTART: the handler runs while the thread is blocked in read(), the
 * read is restarted and returns the byte main writes after it has seen
 * the handler run; poll() still returns EINTR (it is never restarted).
 *
 * Output (fixed order), exit 0:
 *   read: EINTR
 *   nanosleep: EINTR rem ok
 *   poll: EINTR
 *   read: restarted
 *   poll: EINTR with SA_RESTART
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "prog_check.h"

static long bound_ms = 3000;
static volatile sig_atomic_t handled;
static sem_t handled_sem;

static void on_usr1(int sig)
{
    (void)sig;
    handled = handled + 1;
    sem_post(&handled_sem); /* async-signal-safe */
}

static void install(int flags)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sa.sa_flags = flags;
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
}

enum kind { K_READ, K_NANOSLEEP, K_POLL };

struct victim {
    enum kind kind;
    int fd;
    sem_t ready, done;
    long tid;
    long ret;
    int err;
    char c;
    struct timespec rem;
};

static void *victim_fn(void *arg)
{
    struct victim *v = arg;
    __atomic_store_n(&v->tid, (long)syscall(SYS_gettid), __ATOMIC_RELEASE);
    CHECK(sem_post(&v->ready) == 0);
    switch (v->kind) {
    case K_READ:
        v->ret = read(v->fd, &v->c, 1);
        break;
    case K_NANOSLEEP: {
        struct timespec ts = {10, 0};
        v->rem = (struct timespec){-1, -1};
        v->ret = nanosleep(&ts, &v->rem);
        break;
    }
    case K_POLL: {
        struct pollfd p = {.fd = v->fd, .events = POLLIN};
        v->ret = poll(&p, 1, -1);
        break;
    }
    }
    v->err = errno;
    CHECK(sem_post(&v->done) == 0);
    return NULL;
}

static void start(struct victim *v, pthread_t *t, enum kind kind, int fd)
{
    memset(v, 0, sizeof *v);
    v->kind = kind;
    v->fd = fd;
    CHECK(sem_init(&v->ready, 0, 0) == 0 && sem_init(&v->done, 0, 0) == 0);
    EXPECT(pthread_create(t, NULL, victim_fn, v), 0);
    CHECK(wait_sem(&v->ready) == 0);
}

static void finish(struct victim *v, pthread_t t)
{
    EXPECT(pthread_join(t, NULL), 0);
    CHECK(sem_destroy(&v->ready) == 0 && sem_destroy(&v->done) == 0);
}

/* Signal t every 5 ms until it reports done; 0 when it did within bound_ms. */
static int poke_until_done(pthread_t t, struct victim *v)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (ms_since(&t0) < bound_ms) {
        EXPECT(pthread_kill(t, SIGUSR1), 0);
        struct timespec dl = in_ms(CLOCK_REALTIME, 5);
        if (sem_timedwait(&v->done, &dl) == 0)
            return 0;
        if (errno != ETIMEDOUT && errno != EINTR)
            CHECK(!"sem_timedwait");
    }
    return -1;
}

/* Until the OS thread that ran the victim sleeps in the kernel (if /proc can tell), bounded. */
static void wait_until_blocked(struct victim *v)
{
    long tid = __atomic_load_n(&v->tid, __ATOMIC_ACQUIRE);
    if (tid == (long)syscall(SYS_gettid))
        return; /* its OS thread runs us now: it is parked */
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%ld/stat", tid);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (ms_since(&t0) < bound_ms) {
        char buf[512];
        FILE *f = fopen(path, "r");
        if (f == NULL)
            return;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        char *p = strrchr(buf, ')');
        if (p == NULL || p[1] != ' ' || p[2] == 'S' || p[2] == 'D')
            return;
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
}

static void expect_eintr(const char *name, struct victim *v, pthread_t t)
{
    handled = 0;
    if (poke_until_done(t, v) != 0) {
        fprintf(stderr,
                "prog_eintr: %s: still blocked after %ld ms of SIGUSR1 (handler ran %d times)\n",
                name, bound_ms, (int)handled);
        exit(1);
    }
    finish(v, t);
    if (v->ret != -1 || v->err != EINTR) {
        fprintf(stderr, "prog_eintr: %s: returned %ld (errno %d: %s), want -1 EINTR\n", name,
                v->ret, v->err, strerror(v->err));
        exit(1);
    }
    if (handled == 0) {
        fprintf(stderr, "prog_eintr: %s: EINTR but the handler never ran\n", name);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    if (argc > 1)
        bound_ms = atol(argv[1]);
    if (bound_ms < 1) {
        fprintf(stderr, "usage: prog_eintr [BOUND_MS]\n");
        return 1;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    CHECK(sem_init(&handled_sem, 0, 0) == 0);
    int p[2];
    CHECK(pipe(p) == 0);
    struct victim v;
    pthread_t t;

    install(0);
    start(&v, &t, K_READ, p[0]);
    expect_eintr("read", &v, t);
    printf("read: EINTR\n");

    start(&v, &t, K_NANOSLEEP, -1);
    /* The kernel's rem counts to the timer's expiry, slack included: it can
     * exceed the request by microseconds if the signal comes at once. Let
     * the sleep age a few ms first (not synchronisation: EINTR is awaited). */
    wait_until_blocked(&v);
    struct timespec age = {0, 5000000};
    nanosleep(&age, NULL);
    expect_eintr("nanosleep", &v, t);
    if (!(v.rem.tv_sec >= 0 && v.rem.tv_nsec >= 0 && v.rem.tv_nsec < 1000000000 &&
          (v.rem.tv_sec > 0 || v.rem.tv_nsec > 0) && v.rem.tv_sec < 10)) {
        fprintf(stderr, "prog_eintr: nanosleep: rem = %ld.%09ld, want 0 < rem < 10 s\n",
                (long)v.rem.tv_sec, v.rem.tv_nsec);
        return 1;
    }
    printf("nanosleep: EINTR rem ok\n");

    start(&v, &t, K_POLL, p[0]);
    expect_eintr("poll", &v, t);
    printf("poll: EINTR\n");

    /* SA_RESTART: the interrupted read goes on and gets the byte written afterwards. */
    install(SA_RESTART);
    while (sem_trywait(&handled_sem) == 0)
        ; /* forget the earlier rounds */
    start(&v, &t, K_READ, p[0]);
    wait_until_blocked(&v);
    EXPECT(pthread_kill(t, SIGUSR1), 0);
    struct timespec dl = in_ms(CLOCK_REALTIME, bound_ms);
    int r;
    while ((r = sem_timedwait(&handled_sem, &dl)) != 0 && errno == EINTR)
        ;
    if (r != 0) {
        fprintf(stderr, "prog_eintr: SA_RESTART: the handler did not run within %ld ms\n",
                bound_ms);
        return 1;
    }
    CHECK(write(p[1], "z", 1) == 1);
    finish(&v, t);
    if (v.ret != 1 || v.c != 'z') {
        fprintf(stderr,
                "prog_eintr: SA_RESTART read returned %ld (errno %d: %s), want the byte 'z'\n",
                v.ret, v.err, strerror(v.err));
        return 1;
    }
    printf("read: restarted\n");

    start(&v, &t, K_POLL, p[0]);
    expect_eintr("poll with SA_RESTART", &v, t);
    printf("poll: EINTR with SA_RESTART\n");
    return 0;
}
