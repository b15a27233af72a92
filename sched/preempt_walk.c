/*
 * The walk a preemption passes (preempt.c): the interrupted G's stack, frame by frame with
 * libgcc's unwinder or libunwind's (GOSHIM_PREEMPT_WALK), must be application code down to
 * the G's entry; each walk timed (walkstat.c) and counted.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unwind.h>

#include "apptext.h"
#include "libc.h"
#include "preempt.h"
#include "preempt_unw.h"
#include "sched.h"

/* The G entry functions (gostart, the shim's thread start) live here. */
extern const char __start_goshim_bottom[] __attribute__((visibility("hidden")));
extern const char __stop_goshim_bottom[] __attribute__((visibility("hidden")));

void goshim_preempt_tramp(void);
extern const char goshim_preempt_tramp_end[];

enum { MAX_DEPTH = 256 };

static struct {
    uint64_t n, ns;   /* walks and their total time */
    uint64_t nfaults; /* walks that faulted (walk) */
    uint64_t ndiffer; /* walker both: verdicts that differed */
} wk;

struct walk {
    const struct ranges *app;
    bool main; /* the main G: its bottom is libc's start code */
    bool past; /* the trampoline's frame was seen */
    int depth;
    int verdict;   /* 0 undecided, 1 safe, -1 unsafe */
    bool in_libc;  /* main G: libc frames seen below its frames */
    int app_after; /* main G: application frames below those */
};

/*
 * One frame of the walk, whose return address (or, exact, the interrupted
 * PC) is pc: whether to go on to its caller. Sets w->verdict when it
 * decides.
 */
static bool walk_frame(struct walk *w, uintptr_t pc, bool exact)
{
    if (pc == 0)
        return false; /* the outermost frame's undefined return address */
    if (!exact)
        pc--; /* a return address: the call is the instruction before */
    if (++w->depth > MAX_DEPTH) {
        w->verdict = -1;
        return false;
    }
    if (!w->past) { /* goshim_preempt_point, then the trampoline */
        w->past = pc >= (uintptr_t)goshim_preempt_tramp && pc < (uintptr_t)goshim_preempt_tramp_end;
        return true;
    }
    if (w->in_libc) { /* main G, below the first libc frame */
        if (!apptext_in_libc(pc))
            w->app_after++;
        return true;
    }
    if (ranges_has(w->app, pc))
        return true;
    if (pc >= (uintptr_t)__start_goshim_bottom && pc < (uintptr_t)__stop_goshim_bottom) {
        w->verdict = 1;
        return false;
    }
    if (w->main && apptext_in_libc(pc)) {
        w->in_libc = true;
        return true;
    }
    w->verdict = -1;
    return false;
}

static _Unwind_Reason_Code step(struct _Unwind_Context *ctx, void *arg)
{
    int before = 0;
    uintptr_t pc = libc_unwind_ipinfo(ctx, &before);
    return walk_frame(arg, pc, before) ? _URC_NO_REASON : _URC_END_OF_STACK;
}

static bool unw_frame(void *arg, uintptr_t pc, bool exact)
{
    return walk_frame(arg, pc, exact);
}

/*
 * Walk gp's stack, interrupted with the registers saved, with walker's
 * unwinder, timed: the verdict (1 safe, else not). libgcc's walks from
 * here, through the trampoline's CFI, into the interrupted frames;
 * libunwind's (preempt_unw.c) starts at the interrupted frame.
 */
static int walk(int walker, const uint64_t *saved, struct g *gp)
{
    struct walk w = {.app = apptext_app(), .main = gp && (gp->flags & G_MAIN)};
    int64_t t0 = nanotime();
    /* A frame whose unwind info does not describe it (node's V8 code: its main thread
     * died in libgcc, 5 runs in 60 of the soak at P=2) sends the unwinder to read
     * where nothing is mapped: that fault refuses the preemption. The unwinders take
     * no lock and allocate nothing (libgcc's _dl_find_object walk, libunwind's local
     * mode), so nothing is left held by the jump. */
    sigjmp_buf escape;
    if (sigsetjmp(escape, 0)) {
        uint64_t faults = (1ULL << (SIGSEGV - 1)) | (1ULL << (SIGBUS - 1));
        rt_syscall6(SYS_rt_sigprocmask, SIG_UNBLOCK, (long)&faults, 0, 8, 0, 0);
        __atomic_add_fetch(&wk.nfaults, 1, __ATOMIC_RELAXED);
        return -1;
    }
    stack_fault_escape = &escape;
    if (walker == PREEMPT_WALK_LIBUNWIND) {
        w.past = true;
        unwalk(saved, unw_frame, &w);
    } else {
        libc_unwind_backtrace(step, &w);
    }
    stack_fault_escape = NULL;
    uint64_t ns = (uint64_t)(nanotime() - t0);
    walkstat_add(walker == PREEMPT_WALK_LIBUNWIND, ns);
    __atomic_add_fetch(&wk.ns, ns, __ATOMIC_RELAXED);
    if (w.verdict == 0 && w.main && w.in_libc && w.app_after <= 1)
        w.verdict = 1; /* main ... libc start code ... _start */
    return w.verdict;
}

/* GOSHIM_PREEMPT_WALK=both: each unwinder walks, first one then the other
 * in turn; safe only if both say so (a difference is counted). */
static int walk_both(const uint64_t *saved, struct g *gp)
{
    bool unw_first = __atomic_fetch_add(&wk.n, 1, __ATOMIC_RELAXED) & 1;
    int a = walk(unw_first ? PREEMPT_WALK_LIBUNWIND : PREEMPT_WALK_LIBGCC, saved, gp);
    int b = walk(unw_first ? PREEMPT_WALK_LIBGCC : PREEMPT_WALK_LIBUNWIND, saved, gp);
    if ((a == 1) != (b == 1))
        __atomic_add_fetch(&wk.ndiffer, 1, __ATOMIC_RELAXED);
    return a == 1 && b == 1 ? 1 : -1;
}

int preempt_walk(int walker, const uint64_t *saved, struct g *gp)
{
    if (walker == PREEMPT_WALK_BOTH)
        return walk_both(saved, gp);
    __atomic_add_fetch(&wk.n, 1, __ATOMIC_RELAXED);
    return walk(walker, saved, gp);
}

void preempt_walk_stats(struct preempt_stats *s)
{
    s->walks = __atomic_load_n(&wk.n, __ATOMIC_RELAXED);
    s->walk_ns = __atomic_load_n(&wk.ns, __ATOMIC_RELAXED);
    s->walk_faults = __atomic_load_n(&wk.nfaults, __ATOMIC_RELAXED);
    for (int k = 0; k < 2; k++)
        walkstat_read(k, &s->by[k]);
    s->differ = __atomic_load_n(&wk.ndiffer, __ATOMIC_RELAXED);
}

void preempt_walk_fork_child(void)
{
    FORK_SET(wk.ndiffer, 0);
}
