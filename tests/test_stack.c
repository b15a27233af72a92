/*
 * Tests for sched/stack*.c: default size, guards, caches, the VMA budget and
 * its arena fallback (overflow reporting and chaining: test_stack_overflow.c).
 *
 * Criterion runs each test in its own process, so each one starts with fresh
 * stack.c state and may change rlimits. Tests that must die (faults) fork a
 * child and check how it died and what it wrote to stderr.
 */
#include "../sched/stack.h"
#include "../sched/lock.h"

#include <criterion/criterion.h>

#include "stack_helpers.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>

/* capture_stderr redirects fd 2 to a temporary file; returns the saved fd 2. */
static int capture_stderr(FILE **tmp)
{
    int saved = dup(2);
    *tmp = tmpfile();
    cr_assert(*tmp != NULL);
    dup2(fileno(*tmp), 2);
    return saved;
}

static void release_stderr(int saved, FILE *tmp, char *out, size_t outlen)
{
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    size_t n = fread(out, 1, outlen - 1, tmp);
    out[n] = '\0';
    fclose(tmp);
}

/* ---- default size ---- */

Test(stack, default_size_follows_rlimit, .timeout = 10)
{
    struct rlimit rl;
    cr_assert(getrlimit(RLIMIT_STACK, &rl) == 0);
    rl.rlim_cur = 3 * 1024 * 1024 + 100;
    cr_assert(setrlimit(RLIMIT_STACK, &rl) == 0);
    cr_assert_eq(stack_init(0), 0);
    cr_assert_eq(stack_default_size(), 3 * 1024 * 1024 + page());
    cr_assert_eq(stack_default_guard(), page());
}

Test(stack, default_size_unlimited_is_glibc_arch_default, .timeout = 10)
{
    struct rlimit rl;
    cr_assert(getrlimit(RLIMIT_STACK, &rl) == 0);
    if (rl.rlim_max != RLIM_INFINITY)
        cr_skip_test("hard RLIMIT_STACK is finite");
    rl.rlim_cur = RLIM_INFINITY;
    cr_assert(setrlimit(RLIMIT_STACK, &rl) == 0);
    cr_assert_eq(stack_init(0), 0);
    cr_assert_eq(stack_default_size(), 2 * 1024 * 1024);
}

Test(stack, default_size_matches_glibc, .timeout = 10)
{
    /* glibc computed its default at start-up from the same unchanged rlimit. */
    pthread_attr_t a;
    size_t glibc_size;
    cr_assert(pthread_getattr_default_np(&a) == 0);
    cr_assert(pthread_attr_getstacksize(&a, &glibc_size) == 0);
    pthread_attr_destroy(&a);
    cr_assert_eq(stack_init(0), 0);
    cr_assert_eq(stack_default_size(), glibc_size);
}

Test(stack, explicit_default_is_rounded_and_clamped, .timeout = 10)
{
    cr_assert_eq(stack_init(100000), 0);
    cr_assert_eq(stack_default_size(), (100000 + page() - 1) / page() * page());
    cr_assert_eq(stack_init(1000), 0);
    cr_assert_eq(stack_default_size(), 16384);
}

/* ---- guards ---- */

static struct gstack fault_st;

static void check_usable_and_guard(int mprotect_mode)
{
    char out[256];
    cr_assert_eq(stack_init(256 * 1024), 0);
    stack_test_force_mprotect(mprotect_mode);
    cr_assert_eq(stack_alloc(NULL, 0, page(), &fault_st), 0);
    cr_assert_eq((size_t)(fault_st.hi - fault_st.lo), 256 * 1024);
    cr_assert_eq(fault_st.guard, page());
    cr_assert_eq(fault_st.map + page(), fault_st.lo);
    int span = !mprotect_mode && stack_test_guard_install();
    cr_assert_eq(fault_st.kind, span ? STACK_SPAN : STACK_MMAP);
    cr_assert_eq(fault_st.vmas, span ? 0u : 2u);
    memset(fault_st.lo, 0xab, (size_t)(fault_st.hi - fault_st.lo));
    cr_assert_eq(fault_st.lo[0], (char)0xab);
    cr_assert_eq(fault_st.hi[-1], (char)0xab);

    fault_addr = fault_st.lo - 1;
    int status = run_child(touch_fault_addr, out, sizeof out);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV, "lo-1 did not fault: %s", out);
    fault_addr = fault_st.lo - fault_st.guard;
    status = run_child(touch_fault_addr, out, sizeof out);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV, "guard base did not fault");
}

Test(stack, usable_range_writable_guard_faults, .timeout = 10)
{
    check_usable_and_guard(0);
}

Test(stack, usable_range_writable_guard_faults_mprotect, .timeout = 10)
{
    check_usable_and_guard(1);
}

Test(stack, guard_install_adds_few_maps_lines, .timeout = 10)
{
    cr_assert_eq(stack_init(64 * 1024), 0);
    if (!stack_test_guard_install())
        cr_skip_test("MADV_GUARD_INSTALL not supported by this kernel");
    enum { N = 10000 };
    static struct gstack st[N];
    long before = maps_lines();
    for (int i = 0; i < N; i++) {
        cr_assert_eq(stack_alloc(NULL, 0, page(), &st[i]), 0);
        st[i].hi[-1] = 1; /* commit the top page, as a running G would */
        cr_assert_eq(st[i].guard, page());
    }
    long after = maps_lines();
    cr_assert_lt(after - before, 50, "%ld new maps lines for %d stacks", after - before, N);
    struct stack_stats s;
    stack_get_stats(&s);
    cr_assert_eq(s.arena_stacks, 0);
    cr_assert_eq(s.live, N);
}

Test(stack, mprotect_guards_cost_two_maps_lines, .timeout = 10)
{
    cr_assert_eq(stack_init(64 * 1024), 0);
    stack_test_force_mprotect(1);
    enum { N = 1000 };
    static struct gstack st[N];
    long before = maps_lines();
    for (int i = 0; i < N; i++)
        cr_assert_eq(stack_alloc(NULL, 0, page(), &st[i]), 0);
    long after = maps_lines();
    cr_assert_geq(after - before, 2 * N - 10, "%ld new maps lines", after - before);
}

/* ---- caches ---- */

Test(stack, cache_reuse_per_p, .timeout = 10)
{
    struct stackcache pc = {0};
    struct gstack a, b;
    struct stack_stats s0, s1;
    cr_assert_eq(stack_init(128 * 1024), 0);
    cr_assert_eq(stack_alloc(&pc, 0, page(), &a), 0);
    char *lo = a.lo;
    unsigned kind = a.kind;
    lo[100] = 0x5a;
    stack_get_stats(&s0);
    stack_free(&pc, &a);
    cr_assert_eq(pc.n, 1);
    cr_assert_eq(a.lo, NULL, "stack_free clears the descriptor");
    cr_assert_eq(stack_alloc(&pc, 0, page(), &b), 0);
    stack_get_stats(&s1);
    cr_assert_eq(b.lo, lo);
    cr_assert_eq(b.guard, page());
    cr_assert_eq(b.kind, kind);
    cr_assert_eq(pc.n, 0);
    cr_assert_eq(s1.cache_hits, s0.cache_hits + 1);
    cr_assert_eq(s1.mmaps, s0.mmaps);
    cr_assert_eq(s1.live, 1);
}

Test(stack, global_cache_reuse_releases_memory, .timeout = 10)
{
    struct gstack a, b;
    struct stack_stats s0, s1;
    cr_assert_eq(stack_init(128 * 1024), 0);
    cr_assert_eq(stack_alloc(NULL, 0, page(), &a), 0);
    char *lo = a.lo;
    memset(a.lo, 0x5a, (size_t)(a.hi - a.lo));
    stack_get_stats(&s0);
    stack_free(NULL, &a);
    stack_scavenge(NULL);
    cr_assert_eq(stack_alloc(NULL, 0, page(), &b), 0);
    stack_get_stats(&s1);
    cr_assert_eq(b.lo, lo);
    cr_assert_eq(s1.cache_hits, s0.cache_hits + 1);
    cr_assert_eq(s1.mmaps, s0.mmaps);
    cr_assert_eq(b.lo[0], 0, "a globally cached stack keeps no memory below its top part");
    char *node_page = (char *)((uintptr_t)(stack_sp_top(&b) - 128) & ~(uintptr_t)(page() - 1));
    cr_assert_eq(node_page[-16384 - 1], 0, "it keeps 16 KiB below its node's page, as glibc");
    cr_assert_eq(node_page[-16384], 0x5a);
}

/* A stack going warm keeps its pages until stack_scavenge, which stops once its note is woken. */
Test(stack, warm_stacks_are_released_by_the_scavenger, .timeout = 10)
{
    enum { N = 8 };
    struct gstack st[N];
    cr_assert_eq(stack_init(128 * 1024), 0);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(stack_alloc(NULL, 0, page(), &st[i]), 0);
        memset(st[i].lo, 0x5a, (size_t)(st[i].hi - st[i].lo) - page()); /* below the node page */
    }
    char *lo[N];
    for (int i = 0; i < N; i++) {
        lo[i] = st[i].lo;
        stack_free(NULL, &st[i]);
    }
    cr_assert_eq(stack_alloc(NULL, 0, page(), &st[0]), 0);
    cr_assert_eq(st[0].lo, lo[N - 1], "the last stack freed comes back first");
    cr_assert_eq(st[0].lo[0], 0x5a, "a dirty warm stack is reused with its pages");
    stack_free(NULL, &st[0]);

    struct note woken = {1};
    stack_scavenge(&woken);
    unsigned char in = 0;
    cr_assert_eq(mincore(lo[N - 1], page(), &in), 0);
    cr_assert_eq(in & 1, 1, "the scavenger released memory after its note was woken");

    stack_scavenge(NULL);
    for (int i = 0; i < N; i++) {
        in = 1;
        cr_assert_eq(mincore(lo[i], page(), &in), 0);
        cr_assert_eq(in & 1, 0, "stack %d kept its pages past the scavenger", i);
    }
    for (int i = 0; i < N; i++) {
        cr_assert_eq(stack_alloc(NULL, 0, page(), &st[i]), 0);
        cr_assert_eq(st[i].lo[0], 0);
    }
}

Test(stack, pcache_spills_half_and_refills, .timeout = 10)
{
    struct stackcache pc = {0}, pc2 = {0};
    struct gstack st[STACK_PCACHE_MAX + 1], x;
    struct stack_stats s0, s1;
    cr_assert_eq(stack_init(64 * 1024), 0);
    for (int i = 0; i <= STACK_PCACHE_MAX; i++)
        cr_assert_eq(stack_alloc(&pc, 0, page(), &st[i]), 0);
    for (int i = 0; i <= STACK_PCACHE_MAX; i++)
        stack_free(&pc, &st[i]);
    cr_assert_eq(pc.n, STACK_PCACHE_MAX / 2 + 1);
    stack_get_stats(&s0);
    cr_assert_eq(stack_alloc(NULL, 0, page(), &x), 0); /* global now holds 16 */
    cr_assert_eq(stack_alloc(&pc2, 0, page(), &x), 0); /* 15 -> takes 1, refills 14 */
    stack_get_stats(&s1);
    cr_assert_eq(s1.cache_hits, s0.cache_hits + 2);
    cr_assert_eq(s1.mmaps, s0.mmaps);
    cr_assert_eq(pc2.n, STACK_PCACHE_MAX / 2 - 2);

    stack_cache_drain(&pc);
    cr_assert_eq(pc.n, 0);
    cr_assert_eq(pc.head, NULL);
    for (int i = 0; i < STACK_PCACHE_MAX / 2 + 1; i++)
        cr_assert_eq(stack_alloc(NULL, 0, page(), &x), 0);
    struct stack_stats s2;
    stack_get_stats(&s2);
    cr_assert_eq(s2.mmaps, s1.mmaps, "drained stacks are reused from the global cache");
}

/* used_down writes st as a thread uses a stack: every byte from its bottom up to the page
 * of its free node (a warm stack releases its memory when the page below that is in). */
static void used_down(struct gstack *st)
{
    char *node_page = (char *)((uintptr_t)(stack_sp_top(st) - 128) & ~(uintptr_t)(page() - 1));
    memset(st->lo, 0x5a, (size_t)(node_page - st->lo));
}

static void global_cache_bound(int mprotect_mode)
{
    enum { N = STACK_GCACHE_MAX + 76 };
    static struct gstack st[N];
    struct stack_stats s, s2;
    cr_assert_eq(stack_init(64 * 1024), 0);
    stack_test_force_mprotect(mprotect_mode);
    int span = !mprotect_mode && stack_test_guard_install();
    for (int i = 0; i < N; i++) {
        cr_assert_eq(stack_alloc(NULL, 0, page(), &st[i]), 0);
        used_down(&st[i]);
    }
    for (int i = 0; i < N; i++)
        stack_free(NULL, &st[i]);
    stack_scavenge(NULL);
    stack_get_stats(&s);
    cr_assert_eq(s.live, 0);
    if (!span) {
        cr_assert_eq(s.munmaps, 76); /* beyond the bound, own mappings go back */
        return;
    }
    /* Span slots cannot be unmapped: beyond the bound they wait on their
     * class's list, holding no memory, and are reused before a new span. */
    cr_assert_eq(s.munmaps, 0);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(stack_alloc(NULL, 0, page(), &st[i]), 0);
        cr_assert_eq(st[i].lo[0], 0, "stack %d kept memory while free", i);
    }
    stack_get_stats(&s2);
    cr_assert_eq(s2.mmaps, s.mmaps, "every freed slot was reused");
    cr_assert_eq(s2.cache_hits, s.cache_hits + N);
}

Test(stack, global_cache_is_bounded, .timeout = 10)
{
    global_cache_bound(0);
}

Test(stack, global_cache_is_bounded_mprotect, .timeout = 10)
{
    global_cache_bound(1);
}

Test(stack, non_default_size_or_guard_bypasses_cache, .timeout = 10)
{
    struct stackcache pc = {0};
    struct gstack a;
    struct stack_stats s0, s1;
    cr_assert_eq(stack_init(64 * 1024), 0);
    stack_test_force_mprotect(1); /* own mappings, as without guard markers */
    stack_get_stats(&s0);
    cr_assert_eq(stack_alloc(&pc, 200 * 1024, page(), &a), 0);
    cr_assert_eq((size_t)(a.hi - a.lo), 200 * 1024);
    stack_free(&pc, &a);
    cr_assert_eq(pc.n, 0);
    cr_assert_eq(stack_alloc(&pc, 200 * 1024, page(), &a), 0);
    stack_free(&pc, &a);
    cr_assert_eq(stack_alloc(&pc, 0, 4 * page(), &a), 0); /* default size, bigger guard */
    cr_assert_eq(a.guard, 4 * page());
    stack_free(&pc, &a);
    cr_assert_eq(pc.n, 0);
    stack_get_stats(&s1);
    cr_assert_eq(s1.cache_hits, s0.cache_hits);
    cr_assert_eq(s1.mmaps, s0.mmaps + 3);
    cr_assert_eq(s1.munmaps, s0.munmaps + 3);
}

Test(stack, every_size_is_a_span_slot_reused_by_its_class, .timeout = 20)
{
    struct stackcache pc = {0};
    struct gstack a, b, c;
    struct stack_stats s0, s1;
    cr_assert_eq(stack_init(64 * 1024), 0);
    if (!stack_test_guard_install())
        cr_skip_test("MADV_GUARD_INSTALL not supported by this kernel");
    stack_get_stats(&s0);
    cr_assert_eq(stack_alloc(&pc, 200 * 1024, page(), &a), 0);
    cr_assert_eq(a.kind, STACK_SPAN);
    cr_assert_eq((size_t)(a.hi - a.lo), 200 * 1024);
    char *lo = a.lo;
    memset(a.lo, 1, 200 * 1024);
    stack_free(&pc, &a);
    cr_assert_eq(pc.n, 0, "the default-size list holds only default-size stacks");
    cr_assert_eq(pc.on, 1, "other sizes have their own P list");
    stack_cache_drain(&pc); /* to the class's warm list */
    cr_assert_eq(pc.on, 0);
    stack_scavenge(NULL);                                 /* its memory released */
    cr_assert_eq(stack_alloc(&pc, 0, 4 * page(), &c), 0); /* another class */
    cr_assert_eq(c.guard, 4 * page());
    cr_assert_eq(stack_alloc(&pc, 200 * 1024, page(), &b), 0);
    cr_assert_eq(b.lo, lo, "a freed slot is reused by its class");
    cr_assert_eq(b.lo[0], 0, "and it kept no memory while free");
    stack_get_stats(&s1);
    cr_assert_eq(s1.mmaps, s0.mmaps + 1, "both classes' chunks in one shared region");
    size_t apart = (size_t)(b.lo > c.lo ? b.lo - c.lo : c.lo - b.lo);
    cr_assert_lt(apart, 64u << 20, "the classes' first slots %p and %p lie side by side",
                 (void *)b.lo, (void *)c.lo);
    cr_assert_eq(s1.munmaps, s0.munmaps, "slots are never unmapped");
    cr_assert_eq(s1.cache_hits, s0.cache_hits + 1);
    /* Slots of one class are adjacent and each guard faults. */
    struct gstack d;
    cr_assert_eq(stack_alloc(&pc, 200 * 1024, page(), &d), 0);
    cr_assert(d.lo == b.hi + page() || b.lo == d.hi + page(), "slots %p %p", (void *)b.lo,
              (void *)d.lo);
    char out[256];
    fault_addr = (d.lo > b.lo ? d.lo : b.lo) - 1;
    int status = run_child(touch_fault_addr, out, sizeof out);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV, "slot guard did not fault: %s",
              out);
}

Test(stack, user_stack_is_never_touched, .timeout = 10)
{
    static char buf[65536 + 8];
    struct gstack st;
    struct stack_stats s0, s1;
    cr_assert_eq(stack_init(64 * 1024), 0);
    memset(buf, 0x77, sizeof buf);
    stack_get_stats(&s0);
    stack_user(buf + 3, 65536, &st);
    cr_assert_eq(st.kind, STACK_USER);
    cr_assert_eq(st.lo, buf + 3);
    cr_assert_eq((uintptr_t)st.hi % 16, 0);
    cr_assert(st.hi <= buf + 3 + 65536 && st.hi > buf + 3 + 65536 - 16);
    cr_assert_eq(st.map, NULL);
    stack_free(NULL, &st);
    stack_get_stats(&s1);
    for (size_t i = 0; i < sizeof buf; i++)
        cr_assert_eq(buf[i], 0x77, "byte %zu written", i);
    cr_assert_eq(s1.munmaps, s0.munmaps);
    cr_assert_eq(s1.live, s0.live);
}

/* ---- VMA budget ---- */

Test(stack, arena_fallback_near_max_map_count, .timeout = 10)
{
    enum { N = 600 };
    static struct gstack st[N];
    char out[1024];
    FILE *tmp;
    cr_assert_eq(stack_init(64 * 1024), 0);
    stack_test_force_mprotect(1);
    stack_test_set_max_map_count(1000); /* budget 750 VMAs = 375 mprotect-guarded stacks */
    int saved = capture_stderr(&tmp);
    int guarded = 0, arena = 0;
    for (int i = 0; i < N; i++) {
        int r = stack_alloc(NULL, 0, page(), &st[i]);
        if (r != 0)
            break;
        if (st[i].kind == STACK_ARENA && st[i].guard == 0)
            arena++;
        else if (st[i].kind == STACK_MMAP && st[i].guard == page())
            guarded++;
        memset(st[i].lo, 1, (size_t)(st[i].hi - st[i].lo)); /* slots must not overlap */
    }
    release_stderr(saved, tmp, out, sizeof out);
    cr_assert_eq(guarded, 375);
    cr_assert_eq(arena, N - 375);
    for (int i = 375; i < N; i++)
        cr_assert_eq((size_t)(st[i].hi - st[i].lo), 64 * 1024);
    cr_assert_eq(count_substr(out, "goshim: near vm.max_map_count (1000): further thread stacks "
                                   "have no guard page\n"),
                 1, "stderr: %s", out);
    struct stack_stats s0, s1;
    stack_get_stats(&s0);
    cr_assert_eq(s0.arena_stacks, N - 375);
    cr_assert_eq(s0.mmaps, 375 + (N - 375 + 63) / 64, "arena chunks hold 64 slots");

    for (int i = 0; i < N; i++)
        stack_free(NULL, &st[i]);
    for (int i = 0; i < N; i++)
        cr_assert_eq(stack_alloc(NULL, 0, page(), &st[i]), 0);
    stack_get_stats(&s1);
    cr_assert_eq(s1.cache_hits, s0.cache_hits + N, "freed stacks, arena ones too, are reused");
    cr_assert_eq(s1.mmaps, s0.mmaps);
}

Test(stack, guard_install_rescans_instead_of_dropping_guards, .timeout = 10)
{
    enum { N = 3000 };
    static struct gstack st[N];
    char out[1024];
    FILE *tmp;
    cr_assert_eq(stack_init(64 * 1024), 0);
    if (!stack_test_guard_install())
        cr_skip_test("MADV_GUARD_INSTALL not supported by this kernel");
    stack_test_set_max_map_count(1000); /* 4x more stacks than the budget counts */
    int saved = capture_stderr(&tmp);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(stack_alloc(NULL, 0, page(), &st[i]), 0);
        cr_assert_eq(st[i].guard, page());
        cr_assert_eq(st[i].kind, STACK_SPAN);
    }
    release_stderr(saved, tmp, out, sizeof out);
    struct stack_stats s;
    stack_get_stats(&s);
    cr_assert_eq(s.arena_stacks, 0);
    cr_assert_eq(strstr(out, "max_map_count"), NULL, "stderr: %s", out);
}

/* Kept bytes (a TCB at the top, sched/proc.c) through the caches. */
static int kept_ended;
static void note_kept_end(struct gstack *st)
{
    cr_assert_not_null(st->tcb);
    cr_assert_eq(*(unsigned char *)st->tcb, 0xab, "kept bytes ended after they were lost");
    kept_ended++;
}

static void kept_bytes(int mprotect_mode)
{
    enum { EXTRA = 10, N = STACK_GCACHE_MAX + EXTRA };
    static struct gstack st[N];
    cr_assert_eq(stack_init(64 * 1024), 0);
    stack_test_force_mprotect(mprotect_mode);
    stack_set_keep_release(note_kept_end);
    size_t keep = 2 * page() - 256;
    for (int i = 0; i < N; i++) {
        cr_assert_eq(stack_alloc(NULL, 0, page(), &st[i]), 0);
        cr_assert_eq(st[i].fresh, 1, "a new stack is zero pages");
        st[i].keep = keep;
        st[i].tcb = st[i].hi - 512;
        memset(st[i].hi - keep, 0xab, keep);
        used_down(&st[i]);
    }
    struct stackcache pc = {0};
    stack_free(&pc, &st[0]); /* a P cache keeps everything */
    cr_assert_eq(stack_alloc(&pc, 0, page(), &st[0]), 0);
    cr_assert_eq(st[0].keep, keep);
    cr_assert_eq(st[0].fresh, 0);
    cr_assert_eq(st[0].lo[0], 0x5a);
    for (int i = 0; i < N; i++)
        stack_free(NULL, &st[i]);
    cr_assert_eq(kept_ended, EXTRA, "only the stacks beyond the warm bound end their kept bytes");
    stack_scavenge(NULL);
    int warm = 0;
    for (int i = 0; i < N; i++) {
        cr_assert_eq(stack_alloc(NULL, 0, page(), &st[i]), 0);
        if (st[i].tcb) {
            warm++;
            cr_assert_eq(st[i].fresh, 0);
            cr_assert_eq(st[i].keep, keep);
            cr_assert_eq(st[i].hi[-1], (char)0xab, "kept bytes changed while cached");
            cr_assert_eq(*(unsigned char *)(st[i].hi - keep), 0xab);
            cr_assert_eq(st[i].lo[0], 0, "a warm stack kept its memory below the kept bytes");
        } else { /* a cold slot reused (its node page written), or a new mapping */
            cr_assert_eq(st[i].keep, 0);
            cr_assert_eq(st[i].lo[0], 0);
        }
    }
    cr_assert_eq(warm, STACK_GCACHE_MAX);
}

Test(stack, kept_bytes_stay_warm_and_end_when_cold, .timeout = 20)
{
    kept_bytes(0);
}

Test(stack, kept_bytes_stay_warm_and_end_when_cold_mprotect, .timeout = 20)
{
    kept_bytes(1);
}

/* Fresh span slots come in batches: guard markers installed, top pages populated (default
 * size: threads come in bursts). */
Test(stack, fresh_slots_come_guarded_and_populated, .timeout = 20)
{
    enum { N = 40 };
    static struct gstack st[N];
    cr_assert_eq(stack_init(64 * 1024), 0);
    if (!stack_test_guard_install() || !stack_test_batch_prepare())
        cr_skip_test("no MADV_GUARD_INSTALL, or no process_madvise on the caller itself");
    stack_set_populate(2 * page());
    for (int i = 0; i < N; i++) {
        cr_assert_eq(stack_alloc(NULL, 0, page(), &st[i]), 0);
        cr_assert_eq(st[i].fresh, 1);
        unsigned char vec[3];
        cr_assert_eq(mincore(st[i].hi - 3 * page(), 3 * page(), vec), 0);
        cr_assert(vec[1] & 1 && vec[2] & 1, "stack %d: its top pages were not populated", i);
        cr_assert_eq(vec[0] & 1, 0, "stack %d: a page below them was populated", i);
    }
    char out[256];
    for (int i = 0; i < N; i += 13) {
        fault_addr = st[i].lo - 1;
        int status = run_child(touch_fault_addr, out, sizeof out);
        cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV,
                  "stack %d: its guard did not fault: %s", i, out);
    }
}

/* Another size (the Ms' stacks, signal stacks) populates only the slot it gives: a slot
 * populated ahead is pages each fork copies, for a thread that may never come. */
Test(stack, other_sizes_populate_only_the_slot_given, .timeout = 20)
{
    struct gstack a, b;
    cr_assert_eq(stack_init(64 * 1024), 0);
    if (!stack_test_guard_install() || !stack_test_batch_prepare())
        cr_skip_test("no MADV_GUARD_INSTALL, or no process_madvise on the caller itself");
    stack_set_populate(2 * page());
    cr_assert_eq(stack_alloc(NULL, 200 * 1024, page(), &a), 0);
    unsigned char vec[2];
    cr_assert_eq(mincore(a.hi - 2 * page(), 2 * page(), vec), 0);
    cr_assert(vec[0] & vec[1] & 1, "the slot given: its top pages were not populated");
    char *next = a.hi + page(); /* the batch's next slot's lowest byte, above its guard */
    cr_assert_eq(mincore(next + 200 * 1024 - 2 * page(), 2 * page(), vec), 0);
    cr_assert_eq((vec[0] | vec[1]) & 1, 0, "the batch's next slot was populated ahead");
    cr_assert_eq(stack_alloc(NULL, 200 * 1024, page(), &b), 0);
    cr_assert_eq(b.lo, next, "the next slot is the one looked at");
}

/* An M's stack of the default size (GOSHIM_STACK=1M makes the Ms' size the threads') may come
 * from the cache with a G's TCB kept at its top: stack_not_g ends it, before glibc writes the
 * thread's own descriptor there. */
Test(stack, a_thread_stack_from_the_cache_ends_its_kept_object, .timeout = 10)
{
    struct gstack g, m;
    cr_assert_eq(stack_init(1 << 20), 0);
    stack_set_keep_release(note_kept_end);
    cr_assert_eq(stack_alloc(NULL, 0, page(), &g), 0);
    g.keep = page();
    g.tcb = g.hi - 512;
    memset(g.hi - g.keep, 0xab, g.keep);
    stack_free(NULL, &g);
    cr_assert_eq(stack_alloc(NULL, 1 << 20, page(), &m), 0);
    cr_assert_not_null(m.tcb, "the cached stack with its kept TCB was not the one given");
    stack_not_g(&m);
    cr_assert_eq(kept_ended, 1, "the kept object was not ended");
    cr_assert_eq(m.keep, 0);
    cr_assert_null(m.tcb);
    stack_free_now(&m);
}
