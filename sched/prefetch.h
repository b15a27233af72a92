/*
 * prefetch_lines asks for every cache line of [p, p + len), for writing:
 * the runtime prefetches a cold thread's lines (its descriptor, block and
 * TCB) one thread ahead in a burst of pthread_create. It reads and writes
 * nothing, and an address that is not mapped costs nothing.
 */
#ifndef GOSHIM_PREFETCH_H
#define GOSHIM_PREFETCH_H

#include <stddef.h>
#include <stdint.h>

static inline void prefetch_lines(const void *p, size_t len)
{
    const char *c = (const char *)((uintptr_t)p & ~(uintptr_t)63);
    for (; c < (const char *)p + len; c += 64)
        __builtin_prefetch(c, 1, 3);
}

#endif
