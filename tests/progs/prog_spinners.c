/*
 * prog_spinners: do threads that spin while others work leave the CPU to
 * the workers, as the kernel's scheduler does?
 *
 *   prog_spinners [NSPIN [UNITS]]      (defaults: 3 spinners, 2000 units)
 *
 * NSPIN spinner threads spin on a flag with no calls at all (relaxed
 * atomic loads, as redis's io threads or an adaptive lock's spin phase
 * do) until a worker thread sets it. The worker does UNITS units of work,
 * each some arithmetic and one mutex lock and unlock (a call, as real work
 * makes), then sets the flag. Every thread starts at a barrier. Prints
 *   worker did N units; S spinners stopped
 * and exits 0 (1 when a pthread call fails or on a usage error). With
 * NSPIN 0 the main thread does the work itself: a lone CPU-bound thread,
 * which nothing waits for.
 *
 * Natively, the kernel gives the worker at least its fair share of a CPU.
 * Under goshim with one P the worker progresses only because the spinners
 * are preempted; with the kernel's slice policy each spinner, preempted
 * without having entered goshim, is sent behind the worker (the
 * "spinners_demoted" and "slices_cut" counters of GOSHIM_STATS).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "prog_check.h"

static int flag;
static pthread_barrier_t start;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long units = 2000;
static long done_units;

static void *spinner(void *arg)
{
    uint64_t *spins = arg;
    uint64_t n = 0;
    pthread_barrier_wait(&start);
    while (!__atomic_load_n(&flag, __ATOMIC_RELAXED))
        n++;
    *spins = n;
    return NULL;
}

static void *worker(void *arg)
{
    (void)arg;
    uint64_t x = 88172645463325252ULL;
    pthread_barrier_wait(&start);
    for (long i = 0; i < units; i++) {
        x = xorshift_work(x, 40000);
        EXPECT(pthread_mutex_lock(&lock), 0);
        done_units++;
        EXPECT(pthread_mutex_unlock(&lock), 0);
    }
    __atomic_store_n(&flag, 1, __ATOMIC_RELAXED);
    return (void *)(uintptr_t)(x & 1);
}

int main(int argc, char **argv)
{
    long nspin = 3;
    if (argc > 3 || (argc > 1 && (nspin = atol(argv[1])) < 0) ||
        (argc > 2 && (units = atol(argv[2])) < 1)) {
        fprintf(stderr, "usage: prog_spinners [NSPIN [UNITS]]\n");
        return 1;
    }
    pthread_t *t = calloc((size_t)nspin + 1, sizeof *t);
    uint64_t *spins = calloc((size_t)nspin, sizeof *spins);
    CHECK(t && spins);
    if (nspin == 0) {
        EXPECT(pthread_barrier_init(&start, NULL, 1), 0);
        worker(NULL);
        printf("worker did %ld units; 0 spinners stopped\n", done_units);
        return 0;
    }
    EXPECT(pthread_barrier_init(&start, NULL, (unsigned)nspin + 1), 0);
    for (long i = 0; i < nspin; i++)
        EXPECT(pthread_create(&t[i], NULL, spinner, &spins[i]), 0);
    EXPECT(pthread_create(&t[nspin], NULL, worker, NULL), 0);
    long stopped = 0;
    for (long i = 0; i <= nspin; i++)
        EXPECT(pthread_join(t[i], NULL), 0);
    for (long i = 0; i < nspin; i++)
        stopped += spins[i] > 0 || __atomic_load_n(&flag, __ATOMIC_RELAXED);
    printf("worker did %ld units; %ld spinners stopped\n", done_units, stopped);
    return 0;
}
