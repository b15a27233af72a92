/*
 * Helpers shared by the plain pthread test programs in tests/progs
 * (prog_sync_*): checking return values, loop scaling and deadlines. These
 * programs run natively as well as under LD_PRELOAD=libgoshim.so, so this
 * header must stay free of goshim headers. Everything is static inline (or
 * a macro) so a program that uses only part of it still builds with -Werror.
 */
#ifndef GOSHIM_TESTS_PROG_CHECK_H
#define GOSHIM_TESTS_PROG_CHECK_H

#include <errno.h>
#include <stdint.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Report that what (at file:line) returned the error number got, not want; exit 1. */
static inline void fail(const char *file, int line, const char *what, int got, int want)
{
    fprintf(stderr, "%s:%d: %s returned %d (%s), want %d (%s)\n", file, line, what, got,
            strerror(got), want, strerror(want));
    exit(1);
}

/* expr (a pthread_* call, say) must return want. */
#define EXPECT(expr, want)                                                                         \
    do {                                                                                           \
        int got_ = (expr);                                                                         \
        if (got_ != (want))                                                                        \
            fail(__FILE__, __LINE__, #expr, got_, (want));                                         \
    } while (0)

/* cond must hold; otherwise report errno and exit 1 (for calls that set errno). */
#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: %s failed (errno %d: %s)\n", __FILE__, __LINE__, #cond, errno, \
                    strerror(errno));                                                              \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* n scaled by GOSHIM_TEST_SCALE (a factor, default 1), at least 1. */
static inline long scaled(long n)
{
    const char *s = getenv("GOSHIM_TEST_SCALE");
    double f = s ? atof(s) : 1.0;
    long r = f > 0 ? (long)(n * f) : n;
    return r < 1 ? 1 : r;
}

/* The time ms milliseconds from now on clock clk, as an absolute deadline. */
static inline struct timespec in_ms(clockid_t clk, long ms)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    return ts;
}

/* Sleep in 10 us steps (clock_nanosleep, TIMER_ABSTIME, as CPython's time.sleep) until a
 * signal handler has counted *count up to want; 0 if it did not within 10 s. */
static inline int await_count(volatile sig_atomic_t *count, int want)
{
    struct timespec deadline = in_ms(CLOCK_MONOTONIC, 10000), now;
    while (*count < want) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec > deadline.tv_sec ||
            (now.tv_sec == deadline.tv_sec && now.tv_nsec > deadline.tv_nsec))
            return 0;
        now.tv_nsec += 10000;
        if (now.tv_nsec >= 1000000000) {
            now.tv_sec++;
            now.tv_nsec -= 1000000000;
        }
        int r = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &now, NULL);
        if (r != 0 && r != EINTR)
            fail(__FILE__, __LINE__, "clock_nanosleep", r, 0);
    }
    return 1;
}

/* Milliseconds from a to b. */
static inline long elapsed_ms(const struct timespec *a, const struct timespec *b)
{
    return (b->tv_sec - a->tv_sec) * 1000 + (b->tv_nsec - a->tv_nsec) / 1000000;
}

/* Milliseconds since t0 on CLOCK_MONOTONIC. */
static inline long ms_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return elapsed_ms(t0, &t1);
}

/* sem_wait, retried on EINTR (glibc reports it when a handler interrupts the wait). */
static inline int wait_sem(sem_t *s)
{
    int r;
    while ((r = sem_wait(s)) == -1 && errno == EINTR)
        ;
    return r;
}

/* Arithmetic the compiler cannot drop, n xorshift steps from x: a unit of a
 * worker's work. */
static inline uint64_t xorshift_work(uint64_t x, int n)
{
    for (int i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    return x;
}

#endif
