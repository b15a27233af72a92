/*
 * A thread that stays away from every wrapper must not keep the only P:
 *
 *   prog_preempt_stuck qsort   one thread sorts a large array with qsort
 *                              (libc frames on its stack: never preempted)
 *                              while another counts; the count must advance
 *                              before the sort ends. Prints "qsort: counter
 *                              advanced while sorting" (or "did not").
 *   prog_preempt_stuck asm     one thread waits in a futex system call made
 *                              with an inline `syscall` instruction (no
 *                              glibc, no wrapper); another thread must run
 *                              to wake it. Prints "asm futex: woken".
 *
 * With GOSHIM_PROCS=1, only the hand-off of the stuck thread's P lets the
 * other thread run. Natively both pass on any machine with 2 CPUs.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>

#include "prog_check.h"

static long counter;
static int sorting = 1;

static int cmp(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static void *sorter(void *arg)
{
    size_t n = (size_t)arg;
    uint32_t *v = malloc(n * sizeof *v);
    CHECK(v != NULL);
    uint64_t s = 88172645463325252ull;
    for (int round = 0; __atomic_load_n(&sorting, __ATOMIC_ACQUIRE); round++) {
        for (size_t i = 0; i < n; i++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            v[i] = (uint32_t)s;
        }
        qsort(v, n, sizeof *v, cmp);
        for (size_t i = 1; i < n; i++)
            CHECK(v[i - 1] <= v[i]);
        if (round == 0 && __atomic_load_n(&counter, __ATOMIC_ACQUIRE) >= 1000)
            break;
        if (round >= 2) /* ~2 s of sorting: report */
            break;
    }
    free(v);
    long c = __atomic_load_n(&counter, __ATOMIC_ACQUIRE);
    __atomic_store_n(&sorting, 0, __ATOMIC_RELEASE);
    printf("qsort: counter %s while sorting\n", c >= 1000 ? "advanced" : "did not advance");
    return NULL;
}

static void *counter_fn(void *arg)
{
    (void)arg;
    while (__atomic_load_n(&sorting, __ATOMIC_ACQUIRE) && counter < 1000) {
        __atomic_add_fetch(&counter, 1, __ATOMIC_RELEASE);
        sched_yield();
    }
    return NULL;
}

static uint32_t word;
static int about_to_wait;

static long raw_futex(uint32_t *addr, long op, long val)
{
    long ret;
    register long r10 __asm__("r10") = 0;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "0"((long)SYS_futex), "D"(addr), "S"(op), "d"(val), "r"(r10)
                     : "rcx", "r11", "memory");
    return ret;
}

static void *asm_waiter(void *arg)
{
    (void)arg;
    __atomic_store_n(&about_to_wait, 1, __ATOMIC_RELEASE);
    while (__atomic_load_n(&word, __ATOMIC_ACQUIRE) == 0)
        raw_futex(&word, FUTEX_WAIT_PRIVATE, 0);
    return NULL;
}

static void *asm_waker(void *arg)
{
    (void)arg;
    __atomic_store_n(&word, 1, __ATOMIC_RELEASE);
    raw_futex(&word, FUTEX_WAKE_PRIVATE, 1);
    return NULL;
}

int main(int argc, char **argv)
{
    pthread_t a, b;
    if (argc == 2 && !strcmp(argv[1], "qsort")) {
        EXPECT(pthread_create(&a, NULL, sorter, (void *)(size_t)(4 << 20)), 0);
        EXPECT(pthread_create(&b, NULL, counter_fn, NULL), 0);
    } else if (argc == 2 && !strcmp(argv[1], "asm")) {
        EXPECT(pthread_create(&a, NULL, asm_waiter, NULL), 0);
        /* With one P: once it runs, it blocks in the kernel holding it. */
        while (!__atomic_load_n(&about_to_wait, __ATOMIC_ACQUIRE))
            sched_yield();
        EXPECT(pthread_create(&b, NULL, asm_waker, NULL), 0);
    } else {
        fprintf(stderr, "usage: prog_preempt_stuck qsort|asm\n");
        return 1;
    }
    EXPECT(pthread_join(a, NULL), 0);
    EXPECT(pthread_join(b, NULL), 0);
    if (!strcmp(argv[1], "asm"))
        printf("asm futex: woken\n");
    return 0;
}
