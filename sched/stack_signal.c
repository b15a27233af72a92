/*
 * G stacks: the per-M alternate signal stack and the overflow handler
 * (stack_impl.h lists the files of the allocator).
 *
 * Overflow. Each M gets an alternate signal stack (stack_thread_init); the
 * SIGSEGV handler runs there with SA_ONSTACK, asks the lead's lookup whether
 * the fault address is in the running G's guard, prints one line, restores
 * SIG_DFL and returns, so the faulting instruction repeats and the process
 * dies of SIGSEGV (with a core where the native program would dump one).
 * Any other fault is chained to the previous action. No SA_NODEFER: a fault
 * inside the handler itself is then fatal at once (the kernel forces
 * SIG_DFL) rather than recursing on the small alternate stack.
 */
#include "libc.h"
#include "stack_impl.h"

#include "throw.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>

static stack_lookup_fn overflow_lookup;
static struct sigaction old_segv, old_bus;

/* Kernel struct sigaction for the raw rt_sigaction system call (x86-64). */
struct ksigaction {
    void *handler;
    unsigned long flags;
    void *restorer;
    unsigned long mask;
};

/* set_default restores SIG_DFL for sig with a raw syscall. Async-signal-safe. */
static void set_default(int sig)
{
    struct ksigaction ka = {SIG_DFL, 0, NULL, 0};
    rt_syscall6(SYS_rt_sigaction, sig, (long)&ka, 0, 8, 0, 0);
}

/*
 * chain passes a signal we do not own to the action that was installed
 * before ours. Async-signal-safe. A default or ignored action for a real
 * fault (si_code > 0) resets to SIG_DFL and returns: the fault repeats and
 * kills as it would have. A sent signal (si_code <= 0) under SIG_DFL is
 * re-sent to this thread, pending until the handler returns.
 */
static void chain(int sig, siginfo_t *si, void *uc, struct sigaction *old)
{
    if (old->sa_flags & SA_SIGINFO) {
        void (*fn)(int, siginfo_t *, void *) = old->sa_sigaction;
        if (old->sa_flags & SA_RESETHAND)
            old->sa_handler = SIG_DFL;
        fn(sig, si, uc);
        return;
    }
    void (*h)(int) = old->sa_handler;
    if (h == SIG_IGN && si->si_code <= 0)
        return;
    if (h == SIG_DFL || h == SIG_IGN) {
        set_default(sig);
        if (si->si_code <= 0)
            rt_syscall(SYS_tgkill, rt_syscall(SYS_getpid, 0, 0, 0), rt_syscall(SYS_gettid, 0, 0, 0),
                       sig);
        return;
    }
    if (old->sa_flags & SA_RESETHAND)
        old->sa_handler = SIG_DFL;
    h(sig);
}

/*
 * sigfault_handler runs on the M's alternate signal stack for SIGSEGV and
 * SIGBUS. Async-signal-safe: lookup, rt_print and raw syscalls only.
 */
__thread sigjmp_buf *stack_fault_escape __attribute__((tls_model("initial-exec")));

static void sigfault_handler(int sig, siginfo_t *si, void *uc)
{
    sigjmp_buf *escape = stack_fault_escape;
    if (escape && si->si_code > 0) {
        stack_fault_escape = NULL;
        siglongjmp(*escape, 1);
    }
    unsigned long id;
    size_t size;
    stack_lookup_fn lookup = __atomic_load_n(&overflow_lookup, __ATOMIC_RELAXED);
    if (sig == SIGSEGV && si->si_code > 0 && lookup && lookup(si->si_addr, &id, &size)) {
        rt_print(2, "goshim: thread %lu overflowed its %zu-byte stack (fault at %p)\n", id, size,
                 si->si_addr);
        set_default(SIGSEGV);
        return; /* the faulting access repeats and kills the process */
    }
    chain(sig, si, uc, sig == SIGSEGV ? &old_segv : &old_bus);
}

/*
 * stack_overflow_init: see stack.h. Start-up; may use libc. Calling it again
 * only replaces lookup.
 */
int stack_overflow_init(stack_lookup_fn lookup)
{
    static int installed;
    __atomic_store_n(&overflow_lookup, lookup, __ATOMIC_RELAXED);
    if (installed)
        return 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = sigfault_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (libc_sigaction(SIGSEGV, &sa, &old_segv) != 0)
        return -errno;
    if (libc_sigaction(SIGBUS, &sa, &old_bus) != 0) {
        int e = errno;
        libc_sigaction(SIGSEGV, &old_segv, NULL);
        return -e;
    }
    installed = 1;
    return 0;
}

/*
 * stack_thread_init: see stack.h. Runs on the new M before it runs any G.
 */
int stack_thread_init(struct gstack *made)
{
    if (made)
        made->map = NULL;
    stack_t cur;
    if (rt_syscall(SYS_sigaltstack, 0, &cur, 0) == 0 && !(cur.ss_flags & SS_DISABLE) &&
        cur.ss_size >= ALTSTACK_SIZE / 2)
        return 0; /* keep the thread's own (a cgo-like host, or a second call) */
    /* A slot of its own size class where there are spans: the Ms' signal stacks side by
     * side in the shared region, not a mapping and a page-table page each (stack_span.c). */
    struct gstack st;
    int r = stack_alloc(NULL, ALTSTACK_SIZE, stack_pagesize, &st);
    if (r < 0)
        return r;
    stack_not_g(&st); /* a signal stack, not a G stack */
    stack_t ss = {.ss_sp = st.lo, .ss_flags = 0, .ss_size = (size_t)(st.hi - st.lo)};
    long e = rt_syscall(SYS_sigaltstack, &ss, 0, 0);
    if (e < 0) {
        stack_free_now(&st);
        return (int)e;
    }
    if (made)
        *made = st;
    return 0;
}

void stack_thread_fini(struct gstack *made)
{
    if (!made->map)
        return;
    stack_t cur, off = {.ss_flags = SS_DISABLE};
    if (rt_syscall(SYS_sigaltstack, 0, &cur, 0) == 0 && cur.ss_sp == made->lo)
        rt_syscall(SYS_sigaltstack, &off, 0, 0);
    stack_free_now(made); /* clears *made */
}
