/*
 * What a thread costs in memory under LD_PRELOAD: the stack blocks of
 * exited threads are reused (detached ones) and what they touched deep
 * in their stacks goes back to the system; a blocked thread holds two
 * pages of its block (one with lean TLS) and, on the heap, no more than a
 * native thread. prog_tcb_block measures, and its native run is the
 * reference where glibc has one.
 */
#include <criterion/criterion.h>

#include "tests/preload_helpers.h"

/* Detached threads give their block back: 20,000 of them, 64 at a time, reuse a few. */
Test(preload_memory, detached_threads_reuse_their_blocks, .timeout = 60)
{
    static char out[1 << 14];
    char penv[256];
    run_preloaded_ok("prog_tcb_block", "detached 20000", "GOSHIM_STATS=1", penv, sizeof penv, out,
                     sizeof out);
    cr_assert(strstr(out, "detached: 20000 done\n"), "%s", out);
    long made = stat_of(out, "tcbs_created"), maps = stat_of(out, "stacks_mmapped");
    cr_assert(made > 0 && made <= 1000, "%ld TCBs made for 20000 detached threads:\n%s", made, out);
    cr_assert(maps > 0 && maps <= 16, "%ld stack mappings for 20000 detached threads:\n%s", maps,
              out);
}

/* What exited threads touched deep in their stacks goes back once the process idles
 * (natively at each exit: glibc's advise_stack_range). */
Test(preload_memory, deep_stacks_of_exited_threads_are_released, .timeout = 60)
{
    static char out[1 << 14];
    char penv[256];
    expect_native_prints("prog_tcb_block", "deep 256 512", "deep: released yes\n");
    run_preloaded_ok("prog_tcb_block", "deep 256 512", NULL, penv, sizeof penv, out, sizeof out);
    cr_assert(strstr(out, "deep: released yes\n"), "%s", out);
}

/* heap_per_thread runs prog_tcb_block heap 5000 (preloaded or not) and returns its figure. */
static long heap_per_thread(int preload)
{
    static char out[1 << 14];
    run_either_ok("prog_tcb_block", "heap 5000", preload, NULL, out, sizeof out);
    const char *p = strstr(out, "heap: ");
    cr_assert_not_null(p, "%s", out);
    return atol(p + 6);
}

/*
 * pages_of runs prog_tcb_block heap 5000 at P=1 under goshim with env and
 * reads its pages line; the stats must predict predicted pages a thread
 * (block_pages). Without preemption: a thread cut by a signal runs the
 * handler on its own stack, deeper, as a native thread would.
 */
static void pages_of(const char *env, long v[4], unsigned predicted)
{
    static char out[1 << 14];
    char penv[512], fenv[300];
    snprintf(fenv, sizeof fenv, "GOSHIM_PROCS=1 GOSHIM_PREEMPT=0 LD_BIND_NOW=1 %s", env);
    run_preloaded_ok("prog_tcb_block", "heap 5000", fenv, penv, sizeof penv, out, sizeof out);
    const char *p = strstr(out, "pages: ");
    cr_assert(p && sscanf(p, "pages: %ld one, %ld two, %ld more, %ld other", &v[0], &v[1], &v[2],
                          &v[3]) == 4,
              "%s: %s", penv, out);
    long said = stat_of(out, "block_pages"); /* what GOSHIM_STATS predicts from the layout */
    cr_assert_eq(said, (long)predicted, "%s: block_pages=%ld, not %u:\n%s", penv, said, predicted,
                 out);
}

/*
 * Pages a blocked thread holds in its block. By default two: struct pthread,
 * the static TLS and its spare bytes fill more than the top page. With no
 * spare static TLS (goshim run --lean-tls) one: the shim's record leaves the
 * block for the heap, and the thread's frames share the TCB's page.
 */
Test(preload_memory, blocked_thread_holds_two_pages_and_one_with_lean_tls, .timeout = 60)
{
    long v[4];
    /* A few threads may go deeper once (a signal handler on their stack): 1% at most. */
    pages_of("", v, 2);
    cr_assert(v[1] >= 4950 && v[0] + v[1] + v[2] == 5000,
              "by default: %ld threads on one page, %ld on two, %ld more, %ld other", v[0], v[1],
              v[2], v[3]);
    pages_of("GLIBC_TUNABLES=glibc.rtld.optional_static_tls=0:glibc.rtld.nns=1", v, 1);
    cr_assert(v[0] >= 4950 && v[0] + v[1] == 5000,
              "lean TLS: %ld threads on one page, %ld on two, %ld more, %ld other", v[0], v[1],
              v[2], v[3]);
}

/* A blocked thread's heap: glibc's DTV (natively all of it) with its slots for the
 * modules loaded so far only, and goshim's task descriptor (336 B). */
Test(preload_memory, blocked_threads_heap_is_a_trimmed_dtv_and_a_task, .timeout = 60)
{
    long nat = heap_per_thread(0), pre = heap_per_thread(1);
    cr_assert(nat > 0, "natively %ld bytes a thread", nat);
    cr_assert(pre <= nat + 200, "%ld heap bytes a thread under goshim, %ld natively", pre, nat);
}
