/*
 * G stacks: giving the memory of free stacks back to the kernel
 * (stack_impl.h lists the files of the allocator; the lists are stack.c's).
 *
 * Memory. A stack on a warm global list or the arena free list is
 * MADV_DONTNEED'ed below its node (glibc does the same on thread exit), so
 * idle stacks hold no memory but their kept bytes (two pages for a TCB)
 * and, warm ones, the 16 KiB below their node that glibc keeps too — when
 * its thread went below that at all (mincore of the page below: a stack
 * is used from the top down; see release_warm). Arena slots
 * are released as they go; warm stacks enter their list dirty (not looked
 * at) and stack_scavenge releases them when an M is about to sleep for
 * lack of work, one stack at a time until it is woken, as Go's background
 * scavenger gives back freed spans: the look alone (mincore) is a
 * sizeable part of a create+join in batches, where every stack passes
 * through the global list and the next batch would have reused its pages
 * anyway. A dirty stack is taken before a clean one. So memory that
 * exited threads touched deep in their stacks stays until the process
 * first idles, at most STACK_GCACHE_MAX stacks' worth.
 * Stacks in a P cache keep theirs: the madvise costs a system call and a
 * page-table walk even on an untouched range, more than the rest of a
 * cache hit, and the P cache is bounded.
 *
 * Rejected alternatives.
 *  - MADV_DONTNEED on every free: a system call that would double the
 *    cost of a G create/exit; done in batches when stacks leave a P cache
 *    instead.
 */
#include "libc.h"
#include "stack_impl.h"

#include "throw.h"

#include <stdint.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>

/* release_memory returns a free stack's pages below its node's page to the kernel
 * (the node and the kept bytes above it stay). */
void release_memory(const struct gstack *st)
{
    char *top = (char *)((uintptr_t)node_of(st) & ~(uintptr_t)(stack_pagesize - 1));
    if (top > st->lo)
        rt_syscall(SYS_madvise, st->lo, top - st->lo, MADV_DONTNEED);
}

/* flush_releases MADV_DONTNEEDs n ranges, in one call where process_madvise works. */
static void flush_releases(struct iovec *v, size_t n)
{
    if (n == 0)
        return;
    long r = rt_syscall6(SYS_process_madvise, PIDFD_SELF_THREAD_GROUP, (long)v, (long)n,
                         MADV_DONTNEED, 0, 0);
    if (r < 0) /* not for this advice here: one call each */
        for (size_t i = 0; i < n; i++)
            rt_syscall(SYS_madvise, v[i].iov_base, v[i].iov_len, MADV_DONTNEED);
}

/*
 * release_warm releases the memory of a list of warm stacks below their
 * nodes and the WARM_KEEP bytes under them, where their thread went deeper
 * than that: the page just below is resident (mincore), else nothing is
 * released. glibc keeps as much below the exiting frame of a cached stack
 * (advise_stack_range keeps PTHREAD_STACK_MIN), and the next thread on it
 * finds its first frames' pages in place instead of faulting them in. A
 * stack is used downwards from its top, so most threads touched nothing
 * below it, and the release would cost a page-table walk each (over the
 * whole range, in unmap_page_range) for nothing.
 * A thread that skipped pages (a large frame left partly untouched) may
 * leave pages lower down while its stack is warm; they go when it goes
 * cold. Several releases go in one process_madvise where it works.
 */
static void release_warm(struct stacknode *list)
{
    struct iovec v[STACK_PCACHE_MAX / 2];
    size_t n = 0;
    for (struct stacknode *nd = list; nd; nd = nd->next) {
        char *top = (char *)((uintptr_t)nd & ~(uintptr_t)(stack_pagesize - 1));
        top = (size_t)(top - nd->st.lo) > WARM_KEEP ? top - WARM_KEEP : nd->st.lo;
        unsigned char in = 1;
        if (top == nd->st.lo ||
            (rt_syscall(SYS_mincore, top - stack_pagesize, stack_pagesize, (long)&in) == 0 &&
             !(in & 1)))
            continue; /* never went below the kept part */
        if (!stack_prep_ok) {
            rt_syscall(SYS_madvise, nd->st.lo, top - nd->st.lo, MADV_DONTNEED);
            continue;
        }
        v[n++] = (struct iovec){nd->st.lo, (size_t)(top - nd->st.lo)};
        if (n == sizeof v / sizeof v[0]) {
            flush_releases(v, n);
            n = 0;
        }
    }
    flush_releases(v, n);
}

int stack_scavenge_due(void)
{
    return __atomic_load_n(&stk.ndirty, __ATOMIC_RELAXED) != 0;
}

/*
 * stack_scavenge: see stack.h. One dirty stack at a time, off its list
 * while its memory is looked at (still counted in its warm counter), so
 * stop is seen within one stack. Scheduler context; stk.lock not held.
 */
void stack_scavenge(const struct note *stop)
{
    while (__atomic_load_n(&stk.ndirty, __ATOMIC_RELAXED) != 0 &&
           !(stop && __atomic_load_n(&stop->key, __ATOMIC_ACQUIRE) != 0)) {
        runtime_lock(&stk.lock);
        struct stacknode **list = &stk.dhead, **clean = &stk.head;
        for (unsigned i = 0; !*list && i < STACK_SPAN_CLASSES && stk.cls[i].size; i++) {
            list = &stk.cls[i].dirty;
            clean = &stk.cls[i].warm;
        }
        struct stacknode *nd = *list;
        if (nd) {
            *list = nd->next;
            __atomic_store_n(&stk.ndirty, stk.ndirty - 1, __ATOMIC_RELAXED);
        }
        runtime_unlock(&stk.lock);
        if (!nd)
            return;
        nd->next = NULL;
        release_warm(nd);
        runtime_lock(&stk.lock);
        nd->next = *clean;
        *clean = nd;
        runtime_unlock(&stk.lock);
    }
}
