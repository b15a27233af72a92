/*
 * G stacks: the allocator and its caches (contract in stack.h; stack_impl.h
 * lists the other files: guards, spans and the VMA budget in stack_span.c,
 * memory release in stack_scavenge.c, overflow in stack_signal.c).
 *
 * Model. A G stack is one private anonymous mapping, MAP_NORESERVE|MAP_STACK,
 * so it costs address space and page tables, not memory, until touched:
 *
 *     map            lo                                     hi = map + maplen
 *     | guard bytes  | usable bytes (size)               |node|
 *
 * The default size follows glibc (nptl's __pthread_early_init, 2.36): the
 * RLIMIT_STACK soft limit, or ARCH_STACK_DEFAULT_SIZE = 2 MiB on x86-64
 * (glibc's sysdeps/x86_64/nptl/pthreaddef.h) when the limit is RLIM_INFINITY
 * or unreadable, raised to PTHREAD_STACK_MIN, rounded up to pages. The default
 * guard is one page, and as in glibc (allocatestack.c: size += guardsize) the
 * guard comes on top of the requested size. Small default stacks are the
 * most common crash class of other M:N runtimes, so we do not shrink them.
 *
 * Caches. A free stack holds its own list link and descriptor (struct
 * stacknode, STACK_NODE_SPACE bytes) just below its kept bytes, so the
 * caches need no malloc. Kept bytes (gstack.keep) are the top of the block
 * its owner keeps across uses: a thread's TCB, static TLS and record
 * (sched/threadblock.c), ended through the owner's keep_release hook only
 * when the stack goes cold. Each P owns two lists used without a lock: default-size
 * stacks and span slots of other sizes (searched, first few entries), up to
 * STACK_PCACHE_MAX each; a full list spills half to the global lists in one
 * lock hold. Globally, up to STACK_GCACHE_MAX stacks of each kind stay warm
 * (default size: stk.head; other span sizes: their class's warm list):
 * released below their node, kept bytes and their TCB intact, so a thread
 * made on one pays a TCB reset, not a TCB. Beyond that a stack goes cold:
 * its kept object is ended, span slots wait in a batch of COLD_BATCH and
 * then have all their memory released, sorted by address so that adjacent
 * slots (threads that ended in the order they were made) go in one madvise
 * and one TLB shoot-down (one per stack made the join phase of a million
 * threads dominated by IPIs), onto their class's array of free slots (no
 * node: a cold slot is all zero pages, and a stack_alloc that finds no
 * warm or cold slot flushes the batch before carving a new one); arena
 * slots go to the arena free list (node at the top); own mappings are
 * unmapped. A miss on the P cache refills it with up to half its capacity
 * from the global cache in one lock hold, as Go's stackcacherefill.
 *
 * Invariants.
 *  - A cached stack is not in use; its stacknode at node_of(st) is valid
 *    (cold span slots have none: they are only addresses in freev).
 *  - stk.n >= length of stk.head + stk.dhead, c->nwarm >= length of
 *    c->warm + c->dirty (a counter is raised before its list gets the
 *    stack, global_put; a stack being scavenged is on neither list);
 *    stk.ndirty == length of stk.dhead + every c->dirty.
 *    pc->n == length of pc->head, pc->on == length of pc->ohead.
 *  - Kept bytes are never written or released while their stack is cached.
 *  - STACK_USER memory is never written, cached or unmapped by us.
 *  - Scheduler-context functions use rt_syscall6 only: no errno, no TLS, no
 *    stdio, no malloc (the FS base may belong to a G).
 *
 * Rejected alternatives.
 *  - Segmented or copied (growable) stacks as in Go: C code keeps pointers
 *    into its stack, so a C stack can never move.
 *  - Small default stacks: programs size their frames for glibc's default.
 */
#include "libc.h"
#include "prefetch.h"
#include "stack_impl.h"

#include "lock.h"
#include "throw.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

struct stackstate stk;

/* Set once by stack_init (and the test hooks) before any concurrent use. */
size_t stack_pagesize = 4096;
size_t stack_dflt_size = 8 << 20;
size_t stack_dflt_guard = 4096;
size_t stack_arena_slot_size; /* stack_dflt_size rounded to pages */
int stack_guard_install;      /* MADV_GUARD_INSTALL works */
int stack_force_mprotect;     /* test hook */

int stack_prep_ok;       /* process_madvise works here; stk.lock */
int stack_shared_region; /* classes carve chunks of one region (stack_span.c); set once */

struct stackstats stackstats; /* relaxed atomics: counters only, they order nothing */

static void (*keep_release)(struct gstack *st);        /* set once (stack_set_keep_release) */
static void (*keep_prefetch)(const struct gstack *st); /* set once (stack_set_keep_prefetch) */

/*
 * warm_pop takes a warm stack, a dirty one first (its pages are likely
 * still there for the next thread), or returns NULL. stk.lock held.
 */
struct stacknode *warm_pop(struct stacknode **dirty, struct stacknode **clean)
{
    struct stacknode *nd = *dirty;
    if (nd) {
        *dirty = nd->next;
        __atomic_store_n(&stk.ndirty, stk.ndirty - 1, __ATOMIC_RELAXED);
        return nd;
    }
    nd = *clean;
    if (nd)
        *clean = nd->next;
    return nd;
}

/* end_kept ends the owner's object in a free stack's kept bytes. stk.lock not held. */
static void end_kept(struct gstack *st)
{
    if (st->keep && keep_release)
        keep_release(st);
    st->keep = 0;
    st->tcb = NULL;
}

/* unmap_stack gives an STACK_MMAP stack back to the kernel. stk.lock not held. */
static void unmap_stack(struct gstack *st)
{
    end_kept(st);
    vg_deregister(st);
    rt_syscall(SYS_munmap, st->map, st->maplen, 0);
    STAT_ADD(munmaps, 1);
    vmas_add(-(long)st->vmas);
}

/* is_dflt: a stack of the default size and guard, or an arena slot (always default). */
static int is_dflt(const struct gstack *st)
{
    return st->kind == STACK_ARENA ||
           ((size_t)(st->hi - st->lo) == stack_dflt_size && st->guard == stack_dflt_guard);
}

/*
 * warm_count is the counter of the warm global list a free stack may join
 * (its memory released below its node, its kept bytes and their object
 * kept): the default-size cache, or its span class's warm list; NULL when
 * it has none (a mapping of its own of another size). stk.lock held.
 */
static unsigned *warm_count(const struct gstack *st)
{
    if (is_dflt(st))
        return &stk.n;
    if (st->kind == STACK_SPAN)
        return &stk.cls[st->cls].nwarm;
    return NULL;
}

/*
 * global_put moves the list first..(n nodes) to the global lists. Up to
 * STACK_GCACHE_MAX stacks of each kind stay warm: released below their
 * node, their kept bytes (a TCB) kept, for the next stack_alloc of their
 * size. The others go cold: their kept object ended (keep_release), their
 * memory released below the top page, onto their class's or the arena's
 * free list, or unmapped (own mappings). Which is decided in one lock hold
 * (the warm counters are raised then, before the stacks are on their lists:
 * a counter is at least its list's length), the system calls are made
 * without the lock, the lists filled in a second hold. stk.lock not held.
 */
static void global_put(struct stacknode *first, unsigned n)
{
    struct stacknode *nd, *next, *warm = NULL, *cold = NULL, *unmap = NULL;
    runtime_lock(&stk.lock);
    for (nd = first; nd; nd = next) {
        next = nd->next;
        unsigned *cnt = warm_count(&nd->st);
        if (cnt && *cnt < STACK_GCACHE_MAX) {
            ++*cnt;
            nd->next = warm;
            warm = nd;
        } else {
            nd->next = cold;
            cold = nd;
        }
        n--;
    }
    runtime_unlock(&stk.lock);
    GOSHIM_ASSERT(n == 0);
    struct stacknode *cold2 = NULL;
    for (nd = cold; nd; nd = next) {
        next = nd->next;
        struct gstack st = nd->st; /* copy out: the node moves, or munmap frees it */
        if (st.kind == STACK_MMAP) {
            nd->next = unmap;
            unmap = nd;
            continue;
        }
        end_kept(&st);
        if (st.kind == STACK_SPAN) { /* no node: its memory goes in a batch, all of it */
            vg_deregister(&st);
            for (;;) {
                runtime_lock(&stk.lock);
                int room = stk.ncold < COLD_BATCH;
                if (room)
                    stk.cold[stk.ncold++] = (struct coldslot){st.map, st.cls};
                int full = stk.ncold == COLD_BATCH;
                runtime_unlock(&stk.lock);
                if (full)
                    flush_pending(0);
                if (room)
                    break;
            }
            continue;
        }
        /* An arena slot: the node goes at the top, nothing is kept below it. */
        struct stacknode *top = node_of(&st);
        top->st = st;
        release_memory(&st);
        top->next = cold2;
        cold2 = top;
    }
    runtime_lock(&stk.lock);
    while (warm) { /* dirty: stack_scavenge looks at their memory later */
        nd = warm;
        warm = nd->next;
        struct stacknode **list = is_dflt(&nd->st) ? &stk.dhead : &stk.cls[nd->st.cls].dirty;
        nd->next = *list;
        *list = nd;
        __atomic_store_n(&stk.ndirty, stk.ndirty + 1, __ATOMIC_RELAXED);
    }
    while (cold2) {
        nd = cold2;
        cold2 = nd->next;
        nd->next = stk.arena_free;
        stk.arena_free = nd;
    }
    runtime_unlock(&stk.lock);
    while (unmap) {
        struct gstack st = unmap->st; /* copy out: munmap frees the node */
        unmap = unmap->next;
        unmap_stack(&st);
    }
}

void stack_set_keep_release(void (*fn)(struct gstack *st))
{
    keep_release = fn;
}

void stack_set_keep_prefetch(void (*fn)(const struct gstack *st))
{
    keep_prefetch = fn;
}

/*
 * pcache_prefetch readies the P cache's head for the next stack_alloc in
 * a burst of pthread_create, which otherwise waits for memory at every
 * step: the node and the TCB of a stack freed a thousand threads ago are
 * cold. Outside a burst (a thread made and joined in turn gets the same
 * stack back) it would fetch a block nobody takes. The head's node was
 * prefetched when it became the head's successor, so its fields load from
 * cache here; its own successor's node is fetched for the next call.
 */
static void pcache_prefetch(const struct stackcache *pc)
{
    const struct stacknode *h = pc->head;
    if (!h || pc->burst < 2)
        return;
    if (h->next)
        prefetch_lines(h->next, sizeof *h->next);
    if (h->st.keep && keep_prefetch)
        keep_prefetch(&h->st);
}

size_t stack_default_size(void)
{
    return stack_dflt_size;
}

size_t stack_default_guard(void)
{
    return stack_dflt_guard;
}

size_t stack_page_size(void)
{
    return stack_pagesize;
}

/* count_hit counts a stack_alloc served from a cache. */
static void count_hit(void)
{
    STAT_ADD(cache_hits, 1);
    STAT_ADD(live, 1);
}

/*
 * pcache_get takes a stack of (size, guard) from pc: its default-size list,
 * or for other sizes the first few entries of its other list. Returns 1 and
 * fills *out, or 0. Executed only by pc's P; no lock.
 */
static int pcache_get(struct stackcache *pc, size_t size, size_t guard, int dflt,
                      struct gstack *out)
{
    if (dflt && pc && pc->head) {
        struct stacknode *nd = pc->head;
        pc->head = nd->next;
        pc->n--;
        pc->burst++;
        *out = nd->st;
        out->fresh = 0;
        count_hit();
        pcache_prefetch(pc);
        return 1;
    }
    if (!dflt && pc && pc->ohead) {
        /* Other sizes: the first few entries are searched (a program uses few sizes). */
        struct stacknode **pp = &pc->ohead;
        for (int i = 0; *pp && i < 8; i++, pp = &(*pp)->next) {
            struct stacknode *nd = *pp;
            if ((size_t)(nd->st.hi - nd->st.lo) != size || nd->st.guard != guard)
                continue;
            *pp = nd->next;
            pc->on--;
            *out = nd->st;
            out->fresh = 0;
            count_hit();
            return 1;
        }
    }
    return 0;
}

/*
 * gcache_get takes a default-size stack from the global cache into *out
 * and refills pc (may be NULL) from it. The cache is not empty. stk.lock
 * held.
 */
static void gcache_get(struct stackcache *pc, struct gstack *out)
{
    struct stacknode *nd = warm_pop(&stk.dhead, &stk.head);
    stk.n--;
    *out = nd->st;
    out->fresh = 0;
    /* Refill the P cache with up to half its capacity, as stackcacherefill. */
    while (pc && (stk.dhead || stk.head) && pc->n < STACK_PCACHE_MAX / 2) {
        nd = warm_pop(&stk.dhead, &stk.head);
        stk.n--;
        nd->next = pc->head;
        pc->head = nd;
        pc->n++;
    }
    if (pc) {
        pc->burst++;
        pcache_prefetch(pc);
    }
}

/*
 * span_alloc gives a span slot of (size, guard): a warm or cold one of its
 * class, else a newly carved one, its guard installed. Returns 0, -ENOSPC
 * when every class entry is taken by other sizes, or -ENOMEM. stk.lock
 * held on entry; released on return.
 */
static int span_alloc(size_t size, size_t guard, struct gstack *out)
{
    int fresh;
    if (stk.ncold && !span_has_free(size, guard)) { /* reuse cold slots before carving */
        runtime_unlock(&stk.lock);
        flush_pending(1);
        runtime_lock(&stk.lock);
    }
    struct populate pop;
    pop.n = 0;
    int r = span_get(size, guard, out, &fresh, &pop);
    runtime_unlock(&stk.lock);
    populate_now(&pop);
    if (r != 0)
        return r;
    if (fresh && span_guard(out) != 0) {
        /* No marker after all (the probe said yes): PROT_NONE, which
         * splits the span, but the stack keeps its guard. */
        if (rt_syscall(SYS_mprotect, out->map, out->guard, PROT_NONE) < 0)
            goshim_throw("stack_alloc: cannot install a guard page");
        vmas_add(2);
    }
    if (out->vgid == 0) /* fresh, or a cold slot (deregistered) */
        vg_register(out);
    STAT_ADD(live, 1);
    return 0;
}

/*
 * unguarded_alloc gives a stack without a guard, the VMA budget being
 * spent: an arena slot for the default size, else a guard-less mapping;
 * a guard asked for is reported once (warn_limit). Returns 0 or -ENOMEM.
 * stk.lock not held.
 */
static int unguarded_alloc(size_t size, size_t guard, int dflt, struct gstack *out)
{
    int r;
    if (dflt) {
        runtime_lock(&stk.lock);
        r = arena_get(out);
        runtime_unlock(&stk.lock);
    } else {
        unsigned extra;
        vmas_add(1);
        r = map_stack(size, 0, out, &extra);
        if (r < 0)
            vmas_add(-1);
    }
    if (r < 0)
        return r;
    if (guard)
        warn_limit();
    STAT_ADD(live, 1);
    return 0;
}

/*
 * map_alloc gives a stack a mapping of its own, guarded while the VMA
 * budget allows it, else from unguarded_alloc. Returns 0 or -ENOMEM.
 * stk.lock held on entry; released on return.
 */
static int map_alloc(size_t size, size_t guard, int dflt, struct gstack *out)
{
    unsigned need = guard ? (use_guard_install() ? 1 : 2) : 1;
    int fits = vmas_fit(need);
    if (fits)
        stk.vmas += need;
    runtime_unlock(&stk.lock);

    if (fits) {
        unsigned extra;
        int r = map_stack(size, guard, out, &extra);
        if (r == 0) {
            if (extra)
                vmas_add(extra);
            STAT_ADD(live, 1);
            return 0;
        }
        vmas_add(-(long)need);
        if (guard == 0)
            return r; /* no guard to drop: really out of memory */
        /* ENOMEM from mprotect: the kernel's map count ran out before our estimate. */
    }

    /* Over the budget: no guard from here on. */
    return unguarded_alloc(size, guard, dflt, out);
}

/*
 * stack_alloc: see stack.h. Scheduler context: pc belongs to the calling P.
 * The P cache, then the global cache (default size), then a span slot,
 * then a mapping of its own.
 */
int stack_alloc(struct stackcache *pc, size_t size, size_t guard, struct gstack *out)
{
    if (size == 0)
        size = stack_dflt_size;
    if (size > SIZE_MAX / 2 || guard > SIZE_MAX / 2)
        return -ENOMEM;
    size = round_page(size);
    guard = round_page(guard);
    if (size < stack_pagesize)
        size = stack_pagesize;
    int dflt = size == stack_dflt_size && guard == stack_dflt_guard;

    if (pcache_get(pc, size, guard, dflt, out))
        return 0;

    runtime_lock(&stk.lock);
    if (dflt && (stk.dhead || stk.head)) {
        gcache_get(pc, out);
        runtime_unlock(&stk.lock);
        count_hit();
        return 0;
    }

    if (use_guard_install()) {
        int r = span_alloc(size, guard, out);
        if (r != -ENOSPC)
            return r;
        runtime_lock(&stk.lock); /* every class taken: a mapping of its own */
    }
    return map_alloc(size, guard, dflt, out);
}

void stack_user(void *base, size_t size, struct gstack *out)
{
    out->map = NULL;
    out->maplen = 0;
    out->guard = 0;
    out->lo = base;
    out->hi = (char *)(((uintptr_t)base + size) & ~(uintptr_t)15); /* ABI: SP 16-aligned */
    out->kind = STACK_USER;
    out->vmas = 0;
    out->fresh = 0;
    out->keep = 0;
    out->tcb = NULL;
    vg_register(out);
}

/*
 * stack_free: see stack.h. Scheduler context: pc belongs to the calling P;
 * nothing runs on *st any more.
 */
void stack_not_g(struct gstack *st)
{
    end_kept(st); /* a G's TCB, when GOSHIM_STACK made this size the default */
    vg_deregister(st);
}

void stack_free_now(struct gstack *st)
{
    if (st->kind != STACK_SPAN) {
        stack_free(NULL, st);
        return;
    }
    vg_deregister(st);
    STAT_SUB(live, 1);
    span_release_now(st);
    memset(st, 0, sizeof *st);
}

void stack_free(struct stackcache *pc, struct gstack *st)
{
    if (st->kind == STACK_USER) {
        vg_deregister(st);
        memset(st, 0, sizeof *st);
        return;
    }
    GOSHIM_ASSERT(st->kind == STACK_MMAP || st->kind == STACK_ARENA || st->kind == STACK_SPAN);
    STAT_SUB(live, 1);
    int dflt = is_dflt(st);
    if (!dflt && st->kind != STACK_SPAN) {
        unmap_stack(st);
        memset(st, 0, sizeof *st);
        return;
    }
    struct stacknode *nd = node_of(st);
    nd->st = *st;
    memset(st, 0, sizeof *st);
    if (!pc) {
        nd->next = NULL;
        global_put(nd, 1);
        return;
    }
    struct stacknode **head = dflt ? &pc->head : &pc->ohead;
    unsigned *n = dflt ? &pc->n : &pc->on;
    if (*n >= STACK_PCACHE_MAX) {
        /* Spill half to the global lists in one lock hold. */
        struct stacknode *first = *head, *last = first;
        unsigned k = STACK_PCACHE_MAX / 2;
        for (unsigned i = 1; i < k; i++)
            last = last->next;
        *head = last->next;
        *n -= k;
        last->next = NULL;
        global_put(first, k);
    }
    nd->next = *head;
    *head = nd;
    ++*n;
    pc->burst = 0;
}

void stack_cache_drain(struct stackcache *pc)
{
    if (pc->head)
        global_put(pc->head, pc->n);
    if (pc->ohead)
        global_put(pc->ohead, pc->on);
    pc->head = pc->ohead = NULL;
    pc->n = pc->on = 0;
}

void stack_get_stats(struct stack_stats *out)
{
    out->mmaps = __atomic_load_n(&stackstats.mmaps, __ATOMIC_RELAXED);
    out->munmaps = __atomic_load_n(&stackstats.munmaps, __ATOMIC_RELAXED);
    out->cache_hits = __atomic_load_n(&stackstats.cache_hits, __ATOMIC_RELAXED);
    out->arena_stacks = __atomic_load_n(&stackstats.arena_stacks, __ATOMIC_RELAXED);
    out->live = __atomic_load_n(&stackstats.live, __ATOMIC_RELAXED);
}

/*
 * stack_init: see stack.h. Start-up, single-threaded; may use libc.
 */
int stack_init(size_t dflt)
{
    long ps = sysconf(_SC_PAGESIZE);
    if (ps <= 0 || (ps & (ps - 1)))
        return -EINVAL;
    stack_pagesize = (size_t)ps;
    stack_dflt_guard = stack_pagesize;
    if (dflt == 0) {
        struct rlimit rl;
        if (getrlimit(RLIMIT_STACK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
            dflt = ARCH_STACK_DEFAULT;
        else
            dflt = rl.rlim_cur;
    }
    if (dflt < STACK_MIN)
        dflt = STACK_MIN;
    if (dflt > SIZE_MAX / 4)
        return -EINVAL;
    stack_dflt_size = round_page(dflt);
    stack_arena_slot_size = stack_dflt_size;
    stack_guard_install = probe_guard_install();
    stack_prep_ok = stack_guard_install;
    stack_shared_region = 1;
#ifdef GOSHIM_HAVE_VALGRIND
    if (RUNNING_ON_VALGRIND) {
        stack_prep_ok = 0; /* it does not know process_madvise */
        /* Its memcheck takes a jump of the stack pointer under --max-stackframe (2 MiB) for
         * a frame, not a switch: a G started on a stack that near the M's read its context
         * as undefined. Each class keeps its span a GiB away from the others'. */
        stack_shared_region = 0;
    }
#endif
    return 0;
}

void stack_test_force_mprotect(int on)
{
    stack_force_mprotect = on;
}

int stack_test_guard_install(void)
{
    return stack_guard_install;
}

int stack_test_batch_prepare(void)
{
    return stack_prep_ok;
}

/* Fork child: another thread may have held the cache's lock at the fork. */
void stack_fork_child(void)
{
    FORK_SET(stk.lock.key, 0);
    FORK_SET(stack_flush_lock.key, 0);
}
