/*
 * prog_preempt_spin: can a thread that never makes a call be interrupted?
 *
 *   prog_preempt_spin [BOUND [SPINNERS]]
 *
 * A "counter" thread increments a shared counter and calls sched_yield()
 * every iteration until told to stop. Once it has started, SPINNERS
 * (default 1, at most 64) "spinner" threads each record the counter and
 * spin, with no calls at all (a loop of relaxed atomic loads), until the
 * counter has advanced by at least 100, or until it has spun BOUND
 * iterations (default: UINT64_MAX, i.e. unbounded; 0 means that too).
 * Then the program prints exactly one of
 *   counter advanced while spinning
 *   counter did not advance while spinning
 * (advanced: for every spinner), stops the counter, and exits 0 (1 on a
 * usage error or when a pthread call fails). As many spinners as the
 * process has Ps leave the counter no P of its own.
 *
 * Natively (2 CPUs, or one CPU with the kernel's preemptive scheduler) the
 * counter advances. Under goshim with GOSHIM_PROCS=1 it advances only
 * because the spinner is preempted: with one P and no preemption
 * (GOSHIM_PREEMPT=0) nothing else runs while the spinner spins, so with a
 * finite BOUND (a number of iterations) it prints "did not
 * advance", and without one it hangs.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prog_check.h"

#define ADVANCE 100

static uint64_t counter; /* written by the counter thread only */
static int stop;         /* set by the spinner when it is done */
static uint64_t bound = UINT64_MAX;
static int stalled; /* spinners whose counter did not advance */

static void *counter_fn(void *arg)
{
    (void)arg;
    while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
        __atomic_store_n(&counter, __atomic_load_n(&counter, __ATOMIC_RELAXED) + 1,
                         __ATOMIC_RELEASE);
        sched_yield();
    }
    return NULL;
}

/* No calls between reading start and the end of the loop: only loads, compares, adds. */
static __attribute__((noinline)) int spin(void)
{
    uint64_t start = __atomic_load_n(&counter, __ATOMIC_ACQUIRE);
    uint64_t i = 0;

    while (__atomic_load_n(&counter, __ATOMIC_RELAXED) - start < ADVANCE) {
        if (++i >= bound)
            return 0;
    }
    return 1;
}

static void *spinner_fn(void *arg)
{
    (void)arg;
    if (!spin())
        __atomic_add_fetch(&stalled, 1, __ATOMIC_RELAXED);
    return NULL;
}

int main(int argc, char **argv)
{
    pthread_t ct, st[64];
    long nspin = 1;

    if (argc > 3) {
        fprintf(stderr, "usage: prog_preempt_spin [BOUND [SPINNERS]]\n");
        return 1;
    }
    if (argc >= 2) {
        char *end;
        errno = 0;
        bound = strtoull(argv[1], &end, 10);
        if (errno != 0 || *end != '\0' || end == argv[1]) {
            fprintf(stderr, "prog_preempt_spin: BOUND must be a number, not '%s'\n", argv[1]);
            return 1;
        }
        if (bound == 0)
            bound = UINT64_MAX;
    }
    if (argc == 3) {
        char *end;
        nspin = strtol(argv[2], &end, 10);
        if (*end != '\0' || end == argv[2] || nspin < 1 || nspin > 64) {
            fprintf(stderr, "prog_preempt_spin: SPINNERS must be 1 to 64, not '%s'\n", argv[2]);
            return 1;
        }
    }
    EXPECT(pthread_create(&ct, NULL, counter_fn, NULL), 0);
    /* The counter is surely running (and yielding) before the spinner exists. */
    while (__atomic_load_n(&counter, __ATOMIC_ACQUIRE) == 0)
        sched_yield();
    for (long i = 0; i < nspin; i++)
        EXPECT(pthread_create(&st[i], NULL, spinner_fn, NULL), 0);
    for (long i = 0; i < nspin; i++)
        EXPECT(pthread_join(st[i], NULL), 0);
    printf("counter %s while spinning\n", stalled ? "did not advance" : "advanced");
    fflush(stdout);
    __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
    EXPECT(pthread_join(ct, NULL), 0);
    return 0;
}
