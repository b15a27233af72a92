/*
 * prog_preempt_futex: a thread blocked in a raw futex system call, outside
 * any pthread call, must not stop the other threads.
 *
 *   prog_preempt_futex
 *
 * A "waiter" thread announces itself, then calls
 *   syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0)
 * until word is 1 (retrying on EAGAIN and EINTR). Once the waiter has
 * announced itself, main starts a "worker" thread that computes (xorshift
 * arithmetic, ~0.1 s), then sets word = 1 and wakes the waiter with
 * syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, ...). Under goshim with
 * GOSHIM_PROCS=1 the waiter's system call holds the only P unless goshim
 * hands it to another OS thread: without that, neither main nor the
 * worker could run and the program would hang (the test's timeout catches
 * that). Output, in this order:
 *   worker: result 0x...      (the same every run)
 *   waiter: woken
 *   futex: ok
 * exit 0; 1 on an error.
 */
#include <errno.h>
#include <inttypes.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "prog_check.h"

static uint32_t word;     /* the futex: 0 until the worker is done */
static int waiter_ready;  /* the waiter is about to wait */
static long waits, iters; /* futex waits the waiter made; worker's iterations */

static void *waiter_fn(void *arg)
{
    (void)arg;
    __atomic_store_n(&waiter_ready, 1, __ATOMIC_RELEASE);
    while (__atomic_load_n(&word, __ATOMIC_ACQUIRE) == 0) {
        long r = syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
        if (r != 0 && errno != EAGAIN && errno != EINTR) {
            perror("prog_preempt_futex: FUTEX_WAIT");
            exit(1);
        }
        waits++;
    }
    /* The worker printed its line before waking us. */
    printf("waiter: woken\n");
    fflush(stdout);
    return NULL;
}

static void *worker_fn(void *arg)
{
    uint64_t x = 0x9e3779b97f4a7c15ull, acc = 0;

    (void)arg;
    for (long i = 0; i < iters; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        acc += x * 2654435761u;
    }
    printf("worker: result 0x%016" PRIx64 "\n", acc);
    fflush(stdout);
    __atomic_store_n(&word, 1, __ATOMIC_RELEASE);
    CHECK(syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0) >= 0);
    return NULL;
}

int main(void)
{
    pthread_t wt, kt;

    iters = 100000000; /* ~0.1 s; fixed, so that the printed result is too */
    EXPECT(pthread_create(&wt, NULL, waiter_fn, NULL), 0);
    /* Let the waiter run up to its wait (with one P, main must give way). */
    while (!__atomic_load_n(&waiter_ready, __ATOMIC_ACQUIRE))
        sched_yield();
    usleep(20000); /* it is surely inside FUTEX_WAIT now */
    EXPECT(pthread_create(&kt, NULL, worker_fn, NULL), 0);
    EXPECT(pthread_join(kt, NULL), 0);
    EXPECT(pthread_join(wt, NULL), 0);
    if (waits < 1) {
        printf("futex: the waiter never waited\n");
        return 1;
    }
    printf("futex: ok\n");
    return 0;
}
