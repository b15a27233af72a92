/*
 * prog_spin_after_create: a thread that starts another and then computes
 * must still let it run.
 *
 *   prog_spin_after_create [ROUNDS]     (default 3)
 *
 * Each round, the running thread (main in the first, then the thread the
 * previous round made) creates a thread that only sets a flag, and spins,
 * with no calls at all, until the flag is set; then it joins it. Prints
 * "new thread ran while its creator spun: R rounds" and exits 0 (1 on a
 * usage error or a failed pthread call).
 *
 * Natively the new thread runs on another CPU, or when the kernel's tick
 * preempts its creator. Under goshim with GOSHIM_PROCS=1 it waits in its
 * creator's runnext, the only waiter, and runs only once the creator is
 * cut after a slice of its own (sched/sysmon.c): without that it hangs.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static long rounds;

static void *set_flag(void *arg)
{
    __atomic_store_n((int *)arg, 1, __ATOMIC_RELEASE);
    return NULL;
}

static void *round_of(void *arg)
{
    long r = (long)arg;
    int flag = 0;
    pthread_t t;
    if (pthread_create(&t, NULL, set_flag, &flag) != 0)
        return (void *)1;
    while (!__atomic_load_n(&flag, __ATOMIC_ACQUIRE))
        ; /* no calls: only a preemption lets the new thread in at one P */
    if (pthread_join(t, NULL) != 0)
        return (void *)1;
    if (r + 1 == rounds)
        return NULL;
    void *res;
    if (pthread_create(&t, NULL, round_of, (void *)(r + 1)) != 0 || pthread_join(t, &res) != 0)
        return (void *)1;
    return res;
}

int main(int argc, char **argv)
{
    rounds = argc > 1 ? atol(argv[1]) : 3;
    if (rounds < 1) {
        fprintf(stderr, "usage: %s [ROUNDS]\n", argv[0]);
        return 1;
    }
    if (round_of(0) != NULL) {
        fprintf(stderr, "prog_spin_after_create: a pthread call failed\n");
        return 1;
    }
    printf("new thread ran while its creator spun: %ld rounds\n", rounds);
    return 0;
}
