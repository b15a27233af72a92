/*
 * The safety walks' times, per unwinder (libgcc's, libunwind's): a count, a
 * total and a histogram of eight buckets per power of two, from which
 * GOSHIM_STATS reports the median and the 99th percentile. Updated with
 * relaxed atomics by the Ms that walk; read by the report.
 */
#include "preempt.h"
#include "sched.h"

enum { HIST_BUCKETS = 8 * 62 };
static struct walkstat {
    uint64_t n, ns;
    uint64_t hist[HIST_BUCKETS];
} walkstats[2] GOSHIM_LARGE;

/* The bucket of a walk of ns nanoseconds: eight per power of two. */
static unsigned hist_bucket(uint64_t ns)
{
    if (ns < 8)
        return (unsigned)ns;
    int msb = 63 - __builtin_clzll(ns);
    return (unsigned)((msb - 2) * 8 + ((ns >> (msb - 3)) & 7));
}

/* The middle of bucket i, in ns. */
static uint64_t hist_value(unsigned i)
{
    if (i < 8)
        return i;
    unsigned msb = i / 8 + 2;
    return ((8ULL + i % 8) << (msb - 3)) + (1ULL << (msb - 3)) / 2;
}

void walkstat_add(int k, uint64_t ns)
{
    struct walkstat *ws = &walkstats[k];
    __atomic_add_fetch(&ws->n, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&ws->ns, ns, __ATOMIC_RELAXED);
    __atomic_add_fetch(&ws->hist[hist_bucket(ns)], 1, __ATOMIC_RELAXED);
}

void walkstat_read(int k, struct walk_times *t)
{
    const struct walkstat *ws = &walkstats[k];
    uint64_t n = __atomic_load_n(&ws->n, __ATOMIC_RELAXED), seen = 0;
    t->n = n;
    t->ns = __atomic_load_n(&ws->ns, __ATOMIC_RELAXED);
    t->p50_ns = t->p99_ns = 0;
    for (unsigned i = 0; i < HIST_BUCKETS && n; i++) {
        seen += __atomic_load_n(&ws->hist[i], __ATOMIC_RELAXED);
        if (!t->p50_ns && seen * 2 >= n)
            t->p50_ns = hist_value(i);
        if (seen * 100 >= n * 99) {
            t->p99_ns = hist_value(i);
            break;
        }
    }
}

void walkstat_reset(void)
{
    fork_zero(walkstats, sizeof walkstats);
}
