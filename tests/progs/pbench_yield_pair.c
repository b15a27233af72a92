/*
 * pbench_yield_pair: two threads take turns through sched_yield; ns per
 * switch from one thread to the other. Under goshim with GOSHIM_PROCS=1
 * each sched_yield is a Gosched between two tasks (one FS-base write per
 * switch); natively, run it on one CPU (taskset -c 0) so that each yield
 * is a kernel context switch.
 *
 *   usage: pbench_yield_pair ROUNDS     (each thread yields ROUNDS times)
 *
 * Prints one line: "ns_per_op=X switches=N". Each thread checks that its
 * own __thread counter and errno survived every switch; exit 3 if not.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long rounds;
static __thread long mine;
static int bad;

static void *yielder(void *arg)
{
    long id = (long)arg;
    for (long i = 0; i < rounds; i++) {
        mine = i + id;
        errno = (int)id + 1;
        sched_yield();
        if (mine != i + id || errno != (int)id + 1)
            __atomic_store_n(&bad, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    rounds = argc > 1 ? atol(argv[1]) : 100000;
    if (rounds < 1) {
        fprintf(stderr, "usage: %s ROUNDS\n", argv[0]);
        return 1;
    }
    pthread_t t[2];
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < 2; i++)
        if (pthread_create(&t[i], NULL, yielder, (void *)i) != 0) {
            fprintf(stderr, "pbench_yield_pair: pthread_create failed\n");
            return 2;
        }
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    if (bad) {
        fprintf(stderr, "pbench_yield_pair: a thread's __thread or errno changed across a yield\n");
        return 3;
    }
    double ns = (double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec);
    printf("ns_per_op=%.1f switches=%ld\n", ns / (double)(2 * rounds), 2 * rounds);
    return 0;
}
