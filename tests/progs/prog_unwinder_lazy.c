/*
 * Threads that never need an unwinder: glibc loads libgcc_s only for a thread's
 * pthread_exit or cancellation, and goshim should not load it either while none of its
 * threads is preempted or cancelled (it cost every threaded process 0.3 ms at start).
 *
 *   prog_unwinder_lazy
 *
 * Output, exit 0: "4 threads joined; libgcc_s loaded: no" (or "yes").
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "prog_check.h"

enum { NTHREADS = 4 };

static void *work(void *arg)
{
    return arg;
}

static int find_libgcc(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    (void)arg;
    return info->dlpi_name && strstr(info->dlpi_name, "libgcc_s") != NULL;
}

int main(void)
{
    pthread_t t[NTHREADS];
    for (long i = 0; i < NTHREADS; i++)
        EXPECT(pthread_create(&t[i], NULL, work, (void *)i), 0);
    for (long i = 0; i < NTHREADS; i++) {
        void *ret;
        EXPECT(pthread_join(t[i], &ret), 0);
        CHECK(ret == (void *)i);
    }
    printf("%d threads joined; libgcc_s loaded: %s\n", NTHREADS,
           dl_iterate_phdr(find_libgcc, NULL) ? "yes" : "no");
    return 0;
}
