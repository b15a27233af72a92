/*
 * prog_preempt_walk: stacks the safety walk of async preemption must
 * refuse, or pass.
 *
 *   prog_preempt_walk CONTEXT [strict|seen]
 *
 * A "subject" thread does ROUNDS rounds; in each it enters CONTEXT, sets
 * the global flag inside, computes for a while (no calls), clears inside
 * and leaves; then it computes a little outside. CONTEXT is
 *   jit      a call through code generated at run time (an mmap'ed page
 *            without unwind information, as a JIT's) that calls back a
 *            function of the program, which computes;
 *   signal   a handler of SIGUSR1 the thread raised for itself, which
 *            computes (on the thread's stack, above the signal frame);
 *   deep:N   N nested calls of a recursive function, the deepest of
 *            which computes.
 * A "watcher" thread computes (no calls) until the subject is done,
 * counting the times it finds inside set.
 *
 * strict: the threads never run at the same time (GOSHIM_PROCS=1 under
 * goshim, without the hand-off of a refused thread's P); then the watcher
 * must never find inside set: if it does, the subject was switched out
 * inside CONTEXT. seen: the watcher must find inside set at least once
 * (natively: the threads run at once; under goshim at one P: the subject
 * was switched out inside CONTEXT). Neither: no check.
 *
 * Output "walk: ok", exit 0; otherwise what went wrong, exit 1. ROUNDS 10,
 * and the work of a round (tens of ms), are scaled by GOSHIM_TEST_SCALE.
 */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "prog_check.h"

static long rounds, work;
static int inside;       /* 1 while the subject computes inside its context */
static int subject_done; /* the subject has finished */
static uint64_t sink;

/* The work of a round, with inside set. */
static void compute_inside(void)
{
    __atomic_store_n(&inside, 1, __ATOMIC_RELAXED);
    uint64_t x = sink | 1;
    for (long i = 0; i < work; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        __asm__ volatile("" : "+r"(x));
    }
    sink += x;
    __atomic_store_n(&inside, 0, __ATOMIC_RELAXED);
}

/* ---- the contexts ------------------------------------------------------------------- */

/* x86-64: sub $8,%rsp; call *%rdi; add $8,%rsp; ret (a frameless stub
 * that calls its argument, as generated code calls into its runtime). */
static const unsigned char stub[] = {0x48, 0x83, 0xec, 0x08, 0xff, 0xd7,
                                     0x48, 0x83, 0xc4, 0x08, 0xc3};
static void (*jit)(void (*)(void));

static void in_jit(void)
{
    jit(compute_inside);
}

static void on_usr1(int sig)
{
    (void)sig;
    compute_inside();
}

static void in_signal(void)
{
    CHECK(raise(SIGUSR1) == 0);
}

static long depth;

/* Not a tail call, not inlined: a frame per level. */
__attribute__((noinline)) static long recurse(long n)
{
    if (n <= 1) {
        compute_inside();
        return 1;
    }
    long r = recurse(n - 1);
    __asm__ volatile("" : "+r"(r));
    return r + 1;
}

static void in_deep(void)
{
    if (recurse(depth) != depth)
        abort();
}

/* ---- the threads ---------------------------------------------------------------------- */

static void (*enter)(void);

static void *subject(void *arg)
{
    (void)arg;
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    for (long r = 0; r < rounds; r++) {
        enter();
        for (long i = 0; i < work / 4; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            __asm__ volatile("" : "+r"(x));
        }
    }
    __atomic_store_n(&subject_done, 1, __ATOMIC_RELEASE);
    return (void *)(uintptr_t)(x & 1);
}

static void *watcher(void *arg)
{
    long *seen = arg;
    while (!__atomic_load_n(&subject_done, __ATOMIC_ACQUIRE))
        if (__atomic_load_n(&inside, __ATOMIC_RELAXED))
            ++*seen;
    return NULL;
}

static int usage(void)
{
    fprintf(stderr, "usage: prog_preempt_walk jit|signal|deep:N [strict|seen]\n");
    return 1;
}

static void setup_jit(void)
{
    void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(page != MAP_FAILED);
    memcpy(page, stub, sizeof stub);
    CHECK(mprotect(page, 4096, PROT_READ | PROT_EXEC) == 0);
    jit = (void (*)(void (*)(void)))page;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3)
        return usage();
    const char *check = argc == 3 ? argv[2] : "";
    if (strcmp(argv[1], "jit") == 0) {
        setup_jit();
        enter = in_jit;
    } else if (strcmp(argv[1], "signal") == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_usr1;
        CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
        enter = in_signal;
    } else if (strncmp(argv[1], "deep:", 5) == 0 && (depth = atol(argv[1] + 5)) > 0) {
        enter = in_deep;
    } else {
        return usage();
    }
    if (*check && strcmp(check, "strict") != 0 && strcmp(check, "seen") != 0)
        return usage();
    rounds = scaled(10);
    work = scaled(5000000);
    long seen = 0;
    pthread_t s, w;
    EXPECT(pthread_create(&w, NULL, watcher, &seen), 0);
    EXPECT(pthread_create(&s, NULL, subject, NULL), 0);
    EXPECT(pthread_join(s, NULL), 0);
    EXPECT(pthread_join(w, NULL), 0);
    if (strcmp(check, "strict") == 0 && seen) {
        printf("walk: the watcher ran while the subject was inside %s (%ld times)\n", argv[1],
               seen);
        return 1;
    }
    if (strcmp(check, "seen") == 0 && !seen) {
        printf("walk: the watcher never ran while the subject was inside %s\n", argv[1]);
        return 1;
    }
    printf("walk: ok\n");
    return 0;
}
