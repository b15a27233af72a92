/*
 * Tests for sched/stack_signal.c: a stack overflow reported with the thread and its
 * stack's size, other faults chained to the handler before goshim's, and the alternate
 * signal stack's guard. Each fault is made in a forked child (run_child).
 */
#include "../sched/stack.h"
#include "../sched/lock.h"

#include <criterion/criterion.h>

#include "stack_helpers.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>

/* ---- overflow reporting ---- */

static struct gstack ov_st;
static volatile int lookups;

static int test_lookup(void *addr, unsigned long *id, size_t *size)
{
    char *a = addr;
    lookups++;
    if (ov_st.guard && a >= ov_st.lo - ov_st.guard && a < ov_st.lo) {
        *id = 42;
        *size = (size_t)(ov_st.hi - ov_st.lo);
        return 1;
    }
    return 0;
}

static volatile int recurse_limit = -1; /* never reached; keeps gcc from calling it infinite */

__attribute__((noinline)) static int recurse(int n)
{
    volatile char buf[512];
    if (n == recurse_limit)
        return 0;
    buf[n & 511] = (char)n;
    return recurse(n + 1) + buf[(n * 7) & 511]; /* not a tail call */
}

static void overflow_entry(void)
{
    recurse(0);
}

static void child_overflow(void)
{
    static ucontext_t main_uc, uc;
    if (stack_init(0) || stack_overflow_init(test_lookup) || stack_thread_init(NULL))
        _exit(2);
    if (stack_alloc(NULL, 64 * 1024, page(), &ov_st))
        _exit(3);
    char line[128];
    int n = snprintf(line, sizeof line, "guard %p %p\n", (void *)(ov_st.lo - ov_st.guard),
                     (void *)ov_st.lo);
    write(2, line, (size_t)n);
    getcontext(&uc);
    uc.uc_stack.ss_sp = ov_st.lo;
    uc.uc_stack.ss_size = (size_t)(ov_st.hi - ov_st.lo);
    uc.uc_link = &main_uc;
    makecontext(&uc, overflow_entry, 0);
    swapcontext(&main_uc, &uc);
    _exit(4);
}

Test(stack, overflow_reports_thread_and_size, .timeout = 10)
{
    char out[1024];
    int status = run_child(child_overflow, out, sizeof out);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV, "status %#x, stderr: %s", status,
              out);
    void *glo, *lo, *fault;
    cr_assert_eq(sscanf(out, "guard %p %p\n", &glo, &lo), 2, "stderr: %s", out);
    const char *msg = strstr(out, "goshim: thread 42 overflowed its 65536-byte stack (fault at ");
    cr_assert(msg != NULL, "stderr: %s", out);
    cr_assert_eq(sscanf(strchr(msg, '(') + 10, "%p)", &fault), 1, "stderr: %s", out);
    cr_assert((char *)fault >= (char *)glo && (char *)fault < (char *)lo,
              "fault %p outside guard [%p, %p)", fault, glo, lo);
    cr_assert_eq(count_substr(out, "overflowed"), 1);
}

static void prev_handler_exit7(int sig, siginfo_t *si, void *uc)
{
    (void)sig, (void)si, (void)uc;
    _exit(lookups > 0 ? 7 : 8);
}

static void fault_on_prot_none(void)
{
    volatile char *p = mmap(NULL, page(), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        _exit(5);
    *p = 1;
}

/* In a child, after its own SIGSEGV disposition: goshim's overflow handler installed over
 * it, then a fault that is no overflow (exit 2: no handler; 6: the fault did not kill). */
static void fault_under_goshims_handler(void)
{
    if (stack_init(0) || stack_overflow_init(test_lookup) || stack_thread_init(NULL))
        _exit(2);
    fault_on_prot_none();
    _exit(6);
}

static void child_chain_handler(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = prev_handler_exit7;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, NULL);
    fault_under_goshims_handler();
}

Test(stack, other_faults_chain_to_previous_handler, .timeout = 10)
{
    char out[256];
    int status = run_child(child_chain_handler, out, sizeof out);
    cr_assert(WIFEXITED(status), "status %#x, stderr: %s", status, out);
    cr_assert_eq(WEXITSTATUS(status), 7, "previous handler not reached after lookup");
    cr_assert_eq(strstr(out, "goshim"), NULL, "stderr: %s", out);
}

static void child_chain_default(void)
{
    signal(SIGSEGV, SIG_DFL);
    fault_under_goshims_handler();
}

Test(stack, other_faults_with_default_action_die_silently, .timeout = 10)
{
    char out[256];
    int status = run_child(child_chain_default, out, sizeof out);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV, "status %#x", status);
    cr_assert_eq(out[0], '\0', "stderr: %s", out);
}

static void child_kill_default(void)
{
    signal(SIGBUS, SIG_DFL);
    if (stack_init(0) || stack_overflow_init(test_lookup))
        _exit(2);
    kill(getpid(), SIGBUS); /* sent, not a fault: must be re-raised, not swallowed */
    _exit(6);
}

Test(stack, sent_signal_with_default_action_still_kills, .timeout = 10)
{
    char out[256];
    int status = run_child(child_kill_default, out, sizeof out);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS, "status %#x", status);
}

Test(stack, thread_init_installs_guarded_altstack, .timeout = 10)
{
    stack_t ss, ss2;
    cr_assert_eq(stack_init(0), 0);
    cr_assert_eq(stack_thread_init(NULL), 0);
    cr_assert_eq(sigaltstack(NULL, &ss), 0);
    cr_assert_eq(ss.ss_flags & SS_DISABLE, 0);
    cr_assert_eq(ss.ss_size, 64 * 1024);
    cr_assert_eq(stack_thread_init(NULL), 0);
    cr_assert_eq(sigaltstack(NULL, &ss2), 0);
    cr_assert_eq(ss2.ss_sp, ss.ss_sp, "a second call keeps the existing stack");
    char out[64];
    fault_addr = (char *)ss.ss_sp - 1;
    int status = run_child(touch_fault_addr, out, sizeof out);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV, "no guard below the altstack");
}

/* Signal stacks in the shared region (stack_span.c): made one after the other, as each new M
 * makes its own, they lie beside the threads' stacks and add no mapping each; freed, a slot
 * is taken again. A mapping apiece was a page-table page and a VMA more for every fork to
 * copy. */
static void *altstack_thread(void *arg)
{
    return (void *)(intptr_t)stack_thread_init(arg);
}

Test(stack, signal_stacks_are_slots_beside_the_threads_stacks, .timeout = 10)
{
    enum { N = 8 };
    static struct gstack made[N];
    struct gstack g;
    cr_assert_eq(stack_init(256 * 1024), 0);
    if (!stack_test_guard_install())
        cr_skip_test("MADV_GUARD_INSTALL not supported by this kernel");
    cr_assert_eq(stack_alloc(NULL, 0, page(), &g), 0);
    pthread_t warm; /* glibc keeps its stack for the next threads: mapped once, before */
    cr_assert_eq(pthread_create(&warm, NULL, altstack_thread, &made[0]), 0);
    cr_assert_eq(pthread_join(warm, NULL), 0);
    stack_thread_fini(&made[0]);
    long before = maps_lines();
    for (int i = 0; i < N; i++) {
        pthread_t t;
        cr_assert_eq(pthread_create(&t, NULL, altstack_thread, &made[i]), 0);
        void *r;
        cr_assert_eq(pthread_join(t, &r), 0);
        cr_assert_eq((intptr_t)r, 0, "stack_thread_init: %d", (int)(intptr_t)r);
        cr_assert_eq(made[i].kind, STACK_SPAN, "signal stack %d is a mapping of its own", i);
        size_t apart = (size_t)(made[i].lo > g.lo ? made[i].lo - g.lo : g.lo - made[i].lo);
        cr_assert_lt(apart, 64u << 20, "signal stack %d lies %zu bytes from the threads'", i,
                     apart);
    }
#ifdef __SANITIZE_THREAD__
    before = maps_lines(); /* TSan maps memory of its own for each new thread */
#endif
    cr_assert_leq(maps_lines(), before + 1, "%ld lines before, %ld after", before, maps_lines());
    char *lo = made[N - 1].lo;
    stack_thread_fini(&made[N - 1]); /* not installed on this thread: only freed */
    struct gstack again;
    cr_assert_eq(stack_thread_init(&again), 0);
    cr_assert_eq(again.lo, lo, "the freed signal stack's slot is taken again");
}

/* An ended M's signal stack gives its memory back at once, as the unmap before the shared
 * region did (stack_free_now), rather than staying warm in a cache: a program whose
 * thousand threads blocked in the kernel and ended would keep their Ms' pages. */
Test(stack, a_freed_signal_stack_keeps_no_memory, .timeout = 10)
{
    struct gstack made;
    cr_assert_eq(stack_init(0), 0);
    pthread_t t;
    void *r;
    cr_assert_eq(pthread_create(&t, NULL, altstack_thread, &made), 0);
    cr_assert_eq(pthread_join(t, &r), 0);
    cr_assert_eq((intptr_t)r, 0);
    char *top = made.hi - page();
    memset(top, 1, page()); /* as a signal frame would */
    unsigned char vec;
    cr_assert_eq(mincore(top, page(), &vec), 0);
    cr_assert(vec & 1);
    stack_thread_fini(&made);
    int unmapped = mincore(top, page(), &vec) != 0; /* a mapping of its own, without spans */
    cr_assert(unmapped || !(vec & 1), "the freed signal stack's top page is still resident");
}
