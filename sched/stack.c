/*
 * G stacks (contract in stack.h).
 *
 * Model. A G stack is one private anonymous mapping, MAP_NORESERVE|MAP_STACK,
 * so it costs address space and page tables, not memory, until touched:
 *
 *     map            lo                                     hi = map + maplen
 *     | guard bytes  | usable bytes (size)               |node|
 *
 * The default size follows glibc (nptl's __pthread_early_init, 2.36): the
 * RLIMIT_STACK soft limit, or ARCH_STACK_DEFAULT_SIZE = 2 MiB on x86-64
 * (sysdeps/x86_64/nptl/pthreaddef.h) when the limit is RLIM_INFINITY or
 * unreadable, raised to PTHREAD_STACK_MIN, rounded up to pages. The default
 * guard is one page, and as in glibc (allocatestack.c: size += guardsize) the
 * guard comes on top of the requested size. Small default stacks are the
 * most common crash class of other M:N runtimes, so we do not shrink them.
 *
 * Guards. With MADV_GUARD_INSTALL (Linux >= 6.13, detected once in
 * stack_init) the guard is a page-table marker inside the same VMA: no split,
 * and adjacent stacks even merge into one VMA (10 000 stacks add ~2 lines to
 * /proc/self/maps; TCB_FACTS.md section 7). The marker survives MADV_DONTNEED
 * and fork. Without it the guard is mprotect(PROT_NONE): 2 VMAs per stack, so
 * vm.max_map_count (65530) caps the process at ~32 000 guarded stacks.
 *
 * Spans. With guard markers, a stack is never a mapping of its own: it is a
 * slot of a span, one large mapping (about 1 GiB of address space, at most
 * SPAN_SLOTS_MAX slots) carved in order into equal slots of one size class
 * (usable size, guard), each with its guard marker installed when the slot
 * is first carved. A span is one VMA whatever its slot count, so a million
 * stacks cost a few hundred map lines, and a freed slot of any size goes
 * back to its class (a per-class list under stk.lock; default-size slots go
 * through the P and global caches first) instead of being unmapped. Slots
 * are never unmapped: that would split the span. munmap was the cost of
 * thread exit before (52% of a 100k-thread run with 64 KiB stacks, in TLB
 * shoot-downs and mmap_lock waits). Up to STACK_SPAN_CLASSES classes; a
 * further size gets a mapping of its own, as without guard markers.
 *
 * VMA budget. stk.vmas is an upper bound of the VMAs our stacks (and the
 * alternate signal stacks) occupy: 1 per guard-marker or guard-less mapping,
 * 2 per mprotect-guarded one, 1 per arena chunk. The budget is 3/4 of
 * vm.max_map_count; the rest is left to the program. When a guarded stack
 * would exceed the budget we first count the real lines of /proc/self/maps
 * (raw syscalls) and lower stk.vmas to that number, because with guard
 * markers most stacks merge and the bound is far too pessimistic; a later
 * recount happens only after stk.vmas grew by budget/8 again, so a process
 * sitting at the limit does not rescan on every allocation. If the stack still
 * does not fit, a default-size stack comes from an arena (one big guard-less
 * mapping carved into default-size slots, 1 VMA per 64 slots) and any other
 * size gets a guard-less mapping; the first such stack prints one warning.
 * The same fallback is taken when the kernel refuses a guarded mapping with
 * ENOMEM (the real limit was hit before our estimate said so).
 *
 * Caches. A free stack holds its own list link and descriptor (struct
 * stacknode, STACK_NODE_SPACE bytes) just below its kept bytes, so the
 * caches need no malloc. Kept bytes (gstack.keep) are the top of the block
 * its owner keeps across uses: a thread's TCB, static TLS and record
 * (sched/proc.c), ended through the owner's keep_release hook only when the
 * stack goes cold. Each P owns two lists used without a lock: default-size
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
 * Memory. A stack on a warm global list or the arena free list is
 * MADV_DONTNEED'ed below its node (glibc does the same on thread exit), so
 * idle stacks hold no memory but their kept bytes (two pages for a TCB)
 * and, warm ones, the 16 KiB below their node that glibc keeps too — when
 * its thread went below that at all (mincore of the page below: a stack
 * is used from the top down; see release_warm). Arena slots
 * are released as they go; warm stacks enter their list dirty (not looked
 * at) and stack_scavenge releases them when an M is about to sleep for
 * lack of work, one stack at a time until it is woken, as Go's background
 * scavenger gives back freed spans: the look alone (mincore) costs 1.1-2.5
 * us here, a third of a create+join in batches of 1000, where every stack
 * passes through the global list and the next batch would have reused its
 * pages anyway. A dirty stack is taken before a clean one. So memory that
 * exited threads touched deep in their stacks stays until the process
 * first idles, at most STACK_GCACHE_MAX stacks' worth.
 * Stacks in a P cache keep theirs: the madvise costs ~1.6 us even on an
 * untouched 8 MiB range (measured here), more than the rest of a cache hit,
 * and the P cache is bounded.
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
 * Overflow. Each M gets an alternate signal stack (stack_thread_init); the
 * SIGSEGV handler runs there with SA_ONSTACK, asks the lead's lookup whether
 * the fault address is in the running G's guard, prints one line, restores
 * SIG_DFL and returns, so the faulting instruction repeats and the process
 * dies of SIGSEGV (with a core where the native program would dump one).
 * Any other fault is chained to the previous action. No SA_NODEFER: a fault
 * inside the handler itself is then fatal at once (the kernel forces
 * SIG_DFL) rather than recursing on the small alternate stack.
 *
 * Rejected alternatives.
 *  - An unmapped gap as the guard: nothing stops a later mmap from filling
 *    the gap, and it costs the same VMA as PROT_NONE.
 *  - Segmented or copied (growable) stacks as in Go: C code keeps pointers
 *    into its stack, so a C stack can never move.
 *  - Small default stacks: programs size their frames for glibc's default.
 *  - MADV_DONTNEED on every free: ~1.6 us per call, doubling the cost of a
 *    G create/exit; done in batches when stacks leave a P cache instead.
 *  - A node in each cold slot: its page stays, and splits the contiguous
 *    range a batch of adjacent slots is released with.
 *  - Checking /proc/self/maps on every allocation: ~1 us per line, and the
 *    file has tens of thousands of lines near the limit.
 */
#include "libc.h"
#include "stack.h"

#include "lock.h"
#include "throw.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define GOSHIM_HAVE_VALGRIND 1
#endif
#endif

#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102 /* Linux 6.13 uapi; absent from glibc 2.36 headers */
#endif
#ifndef MADV_GUARD_REMOVE
#define MADV_GUARD_REMOVE 103
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif
#define PIDFD_SELF_THREAD_GROUP (-10001) /* Linux 6.15: process_madvise on the caller itself */

enum {
    STACK_NODE_SPACE = 128,        /* bytes below the kept ones of a free stack holding its node */
    ARENA_SLOTS_MAX = 64,          /* default-size slots per arena chunk */
    ALTSTACK_SIZE = 64 * 1024,     /* per-M alternate signal stack */
    ARCH_STACK_DEFAULT = 2 << 20,  /* glibc x86-64 ARCH_STACK_DEFAULT_SIZE */
    STACK_MIN = 16384,             /* glibc PTHREAD_STACK_MIN on x86-64 */
    WARM_KEEP = STACK_MIN,         /* bytes below its node a warm stack keeps (release_warm) */
    MAX_MAP_COUNT_DEFAULT = 65530, /* DEFAULT_MAX_MAP_COUNT, when /proc is unreadable */
};
#define ARENA_CHUNK_TARGET ((size_t)512 << 20) /* aim for chunks of about this size */

/* A free stack's own descriptor and cache link, stored at st.hi - STACK_NODE_SPACE. */
struct stacknode {
    struct stacknode *next;
    struct gstack st;
};
_Static_assert(sizeof(struct stacknode) <= STACK_NODE_SPACE, "stacknode must fit STACK_NODE_SPACE");

enum { SPAN_SLOTS_MAX = 4096 };
#define SPAN_TARGET ((size_t)1 << 30) /* address space a span aims for */

/* A size class of span slots. size 0: unused entry. */
struct spanclass {
    size_t size, guard;      /* of every slot; set once, under lock */
    struct stacknode *warm;  /* freed slots keeping their kept bytes (TCB); lock */
    struct stacknode *dirty; /* the same, memory below the node not yet looked at; lock */
    unsigned nwarm;          /* at least the length of warm + dirty (see global_put); lock */
    char **freev;            /* cold slots, all their memory released (zero pages); lock */
    size_t nfree, capfree;   /* entries in freev, its capacity; lock */
    char *next, *end;        /* uncarved part of the current span; lock */
    char *prepared;          /* slots of the span below it are prepared (prepare_slots); lock */
    size_t ncarved;          /* slots carved so far, all spans; lock */
};

/* Cold slots wait in a batch for their memory's release (flush_cold). */
enum { COLD_BATCH = 256 };
struct coldslot {
    char *map;
    unsigned cls;
};

static struct {
    struct runtime_lock lock;
    struct spanclass cls[STACK_SPAN_CLASSES]; /* lock */
    struct stacknode *head;                   /* global cache; lock */
    struct stacknode *dhead;                  /* its dirty part (stack_scavenge); lock */
    unsigned n;                               /* at least the length of head + dhead; lock */
    unsigned ndirty; /* dirty warm stacks, every list; written under lock, read without */
    struct stacknode *arena_free;     /* arena slots beyond STACK_GCACHE_MAX; lock */
    struct coldslot cold[COLD_BATCH]; /* span slots going cold, memory not yet released;
                                                 lock */
    unsigned ncold;                   /* lock */
    char *arena_next, *arena_end;     /* uncarved part of the current arena chunk; lock */
    unsigned long vmas;               /* upper bound of VMAs charged to us; lock */
    unsigned long vmas_scanned;       /* vmas right after the last /proc scan; lock */
    int scanned;                      /* a scan happened; lock */
} stk;

/* Set once by stack_init (and the test hooks) before any concurrent use. */
static size_t pagesize = 4096;
static size_t default_size = 8 << 20;
static size_t default_guard = 4096;
static size_t arena_slot_size; /* default_size rounded to pages */
static int guard_install;      /* MADV_GUARD_INSTALL works */
static int force_mprotect;     /* test hook */
static unsigned long max_map_count = MAX_MAP_COUNT_DEFAULT;
static unsigned long vma_budget = MAX_MAP_COUNT_DEFAULT / 4 * 3;
static unsigned long rescan_step = MAX_MAP_COUNT_DEFAULT / 32;

static int warned; /* the max_map_count warning was printed; atomic */

/* Preparing fresh span slots in batches (prepare_slots). */
enum { PREP_MIN = 4, PREP_MAX = 32 };
static struct iovec prep_iov[PREP_MAX]; /* stk.lock */

/* The pages of a batch of fresh slots to populate, after stk.lock is let go. */
struct populate {
    struct iovec v[PREP_MAX];
    size_t n;
};
static int prep_ok;           /* process_madvise works here; stk.lock */
static size_t populate_bytes; /* top bytes of a fresh slot to populate; set once */

static struct {
    unsigned long mmaps, munmaps, cache_hits, arena_stacks, live;
} stats; /* relaxed atomics: counters only, they order nothing */

#define STAT_ADD(f, v) __atomic_fetch_add(&stats.f, (v), __ATOMIC_RELAXED)
#define STAT_SUB(f, v) __atomic_fetch_sub(&stats.f, (v), __ATOMIC_RELAXED)

static stack_lookup_fn overflow_lookup;
static void (*keep_release)(struct gstack *st); /* set once (stack_set_keep_release) */
static struct sigaction old_segv, old_bus;

static size_t round_page(size_t n)
{
    return (n + pagesize - 1) & ~(pagesize - 1);
}

static int use_guard_install(void)
{
    return guard_install && !force_mprotect;
}

/* sys_mmap maps len anonymous bytes; returns the address or NULL. Scheduler-safe. */
static char *sys_mmap(size_t len, int prot)
{
    long r = rt_syscall6(SYS_mmap, 0, (long)len, prot,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (r < 0 && r > -4096)
        return NULL;
    return (char *)r;
}

static void vg_register(struct gstack *st)
{
#ifdef GOSHIM_HAVE_VALGRIND
    st->vgid = VALGRIND_STACK_REGISTER(st->lo, st->hi);
#else
    st->vgid = 0;
#endif
}

static void vg_deregister(struct gstack *st)
{
#ifdef GOSHIM_HAVE_VALGRIND
    if (st->vgid)
        VALGRIND_STACK_DEREGISTER(st->vgid);
#endif
    st->vgid = 0;
}

/*
 * count_maps counts the lines of /proc/self/maps with raw syscalls.
 * Returns the count or -errno. Scheduler-safe; takes ~1 us per line.
 */
static long count_maps(void)
{
    char buf[4096];
    long fd =
        rt_syscall6(SYS_openat, AT_FDCWD, (long)"/proc/self/maps", O_RDONLY | O_CLOEXEC, 0, 0, 0);
    if (fd < 0)
        return fd;
    long lines = 0, n;
    while ((n = rt_syscall(SYS_read, fd, buf, sizeof buf)) > 0)
        for (long i = 0; i < n; i++)
            lines += buf[i] == '\n';
    rt_syscall(SYS_close, fd, 0, 0);
    return n < 0 ? n : lines;
}

/*
 * vmas_fit says whether need more VMAs stay within the budget, rescanning
 * /proc/self/maps when the estimate says no (see the essay). stk.lock held.
 */
static int vmas_fit(unsigned long need)
{
    if (stk.vmas + need <= vma_budget)
        return 1;
    if (!stk.scanned || stk.vmas >= stk.vmas_scanned + rescan_step) {
        long real = count_maps();
        stk.scanned = 1;
        if (real >= 0 && (unsigned long)real < stk.vmas)
            stk.vmas = (unsigned long)real; /* all VMAs of the process bound ours */
        stk.vmas_scanned = stk.vmas;
    }
    return stk.vmas + need <= vma_budget;
}

static void vmas_add(long d)
{
    runtime_lock(&stk.lock);
    stk.vmas += (unsigned long)d;
    runtime_unlock(&stk.lock);
}

/* warn_limit prints the one-time "no guard page" warning. Scheduler-safe. */
static void warn_limit(void)
{
    if (__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED) == 0)
        rt_print(2,
                 "goshim: near vm.max_map_count (%lu): further thread stacks have no guard page\n",
                 max_map_count);
}

/*
 * map_stack maps size usable bytes above guard bytes of guard and fills *out
 * (kind STACK_MMAP, out->vmas set). The caller has charged the VMAs it
 * expected; *extra is the number it must charge on top (1 when a guard
 * install failed and mprotect was used instead). Returns 0 or -errno.
 * Scheduler-safe.
 */
static int map_stack(size_t size, size_t guard, struct gstack *out, unsigned *extra)
{
    size_t len = size + guard;
    char *map = sys_mmap(len, PROT_READ | PROT_WRITE);
    *extra = 0;
    if (!map)
        return -ENOMEM;
    STAT_ADD(mmaps, 1);
    out->vmas = 1;
    if (guard) {
        long r = -EINVAL;
        if (use_guard_install())
            r = rt_syscall(SYS_madvise, map, guard, MADV_GUARD_INSTALL);
        if (r < 0) {
            r = rt_syscall(SYS_mprotect, map, guard, PROT_NONE);
            if (r < 0) {
                rt_syscall(SYS_munmap, map, len, 0);
                STAT_ADD(munmaps, 1);
                return (int)r;
            }
            out->vmas = 2;
            if (use_guard_install())
                *extra = 1;
        }
    }
    out->map = map;
    out->maplen = len;
    out->guard = guard;
    out->lo = map + guard;
    out->hi = map + len;
    out->kind = STACK_MMAP;
    out->fresh = 1;
    out->keep = 0;
    out->tcb = NULL;
    vg_register(out);
    return 0;
}

/* arena_get carves or reuses a guard-less default-size arena slot. stk.lock held. */
static int arena_get(struct gstack *out)
{
    struct stacknode *nd = stk.arena_free;
    if (nd) {
        stk.arena_free = nd->next;
        *out = nd->st;
        out->fresh = 0;
        return 0;
    }
    if (stk.arena_next == stk.arena_end) {
        size_t slots = ARENA_CHUNK_TARGET / arena_slot_size;
        if (slots < 1)
            slots = 1;
        if (slots > ARENA_SLOTS_MAX)
            slots = ARENA_SLOTS_MAX;
        char *chunk = sys_mmap(slots * arena_slot_size, PROT_READ | PROT_WRITE);
        if (!chunk)
            return -ENOMEM;
        STAT_ADD(mmaps, 1);
        stk.vmas += 1; /* the arena is the last resort: no budget check */
        stk.arena_next = chunk;
        stk.arena_end = chunk + slots * arena_slot_size;
    }
    char *slot = stk.arena_next;
    stk.arena_next += arena_slot_size;
    STAT_ADD(arena_stacks, 1);
    out->map = slot;
    out->maplen = arena_slot_size;
    out->guard = 0;
    out->lo = slot;
    out->hi = slot + arena_slot_size;
    out->kind = STACK_ARENA;
    out->vmas = 0;
    out->fresh = 1;
    out->keep = 0;
    out->tcb = NULL;
    vg_register(out);
    return 0;
}

/*
 * prepare_slots readies the fresh slots from map on, a batch at a time
 * (a quarter of the slots carved so far, PREP_MIN to PREP_MAX): their
 * guard markers in one process_madvise on the calling process, and the
 * top populate_bytes of each (the pages a new thread touches at once: its
 * TCB and first frames) listed in *pop, for the caller to populate in a
 * second once it let the lock go (populating a page already in use is
 * harmless), instead of a system call and two page faults per thread. At
 * most a quarter more slots than in use are populated ahead. Where
 * process_madvise cannot do it (before Linux 6.15, or valgrind), prep_ok
 * goes 0 and each slot gets its guard when it is carved, as before.
 * stk.lock held.
 */
static void prepare_slots(struct spanclass *c, char *map, size_t slot, struct populate *pop)
{
    size_t k = c->ncarved / 4;
    k = k < PREP_MIN ? PREP_MIN : k > PREP_MAX ? PREP_MAX : k;
    if (k > (size_t)(c->end - map) / slot)
        k = (size_t)(c->end - map) / slot;
    if (c->guard) {
        for (size_t j = 0; j < k; j++)
            prep_iov[j] = (struct iovec){map + j * slot, c->guard};
        long r = rt_syscall6(SYS_process_madvise, PIDFD_SELF_THREAD_GROUP, (long)prep_iov, (long)k,
                             MADV_GUARD_INSTALL, 0, 0);
        if (r != (long)(k * c->guard)) {
            prep_ok = 0;
            return;
        }
    }
    size_t top = populate_bytes < c->size ? populate_bytes : c->size;
    for (size_t j = 0; top && j < k; j++)
        pop->v[pop->n++] = (struct iovec){map + (j + 1) * slot - top, top};
    c->prepared = map + k * slot;
}

/* populate_now populates what prepare_slots listed. stk.lock not held. */
static void populate_now(struct populate *pop)
{
    /* Failing (no memory now) costs nothing: the pages fault in later. */
    if (pop->n)
        rt_syscall6(SYS_process_madvise, PIDFD_SELF_THREAD_GROUP, (long)pop->v, (long)pop->n,
                    MADV_POPULATE_WRITE, 0, 0);
    pop->n = 0;
}

/*
 * warm_pop takes a warm stack, a dirty one first (its pages are likely
 * still there for the next thread), or returns NULL. stk.lock held.
 */
static struct stacknode *warm_pop(struct stacknode **dirty, struct stacknode **clean)
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

/*
 * span_get gives a slot of the (size, guard) class: a freed one, else one
 * carved from the class's span (mapping a new span when it is used up).
 * *fresh says the slot was just carved: its guard marker is still to be
 * installed (span_guard, without the lock). Returns 0, -ENOSPC when every
 * class entry is taken by other sizes, or -ENOMEM. stk.lock held.
 */
static int span_get(size_t size, size_t guard, struct gstack *out, int *fresh, struct populate *pop)
{
    struct spanclass *c = NULL;
    unsigned i;
    for (i = 0; i < STACK_SPAN_CLASSES; i++) {
        c = &stk.cls[i];
        if (c->size == 0) {
            c->size = size;
            c->guard = guard;
            break;
        }
        if (c->size == size && c->guard == guard)
            break;
    }
    if (i == STACK_SPAN_CLASSES)
        return -ENOSPC;
    *fresh = 0;
    struct stacknode *nd = warm_pop(&c->dirty, &c->warm);
    if (nd) {
        c->nwarm--;
        *out = nd->st;
        out->fresh = 0;
        STAT_ADD(cache_hits, 1);
        return 0;
    }
    size_t slot = size + guard;
    char *map;
    if (c->nfree) { /* a cold slot: guard in place, every page a zero page again */
        map = c->freev[--c->nfree];
        STAT_ADD(cache_hits, 1);
        goto slot;
    }
    if (c->next == c->end) {
        size_t n = SPAN_TARGET / slot;
        if (n < 1)
            n = 1;
        if (n > SPAN_SLOTS_MAX)
            n = SPAN_SLOTS_MAX;
        char *span = sys_mmap(n * slot, PROT_READ | PROT_WRITE);
        if (!span)
            return -ENOMEM;
        STAT_ADD(mmaps, 1);
        stk.vmas += 1;
        c->next = span;
        c->end = span + n * slot;
        c->prepared = span;
    }
    map = c->next;
    c->next += slot;
    c->ncarved++;
    if (prep_ok && map >= c->prepared)
        prepare_slots(c, map, slot, pop);
    *fresh = map >= c->prepared; /* its guard is still to be installed */
slot:
    out->vgid = 0;
    out->map = map;
    out->maplen = slot;
    out->guard = guard;
    out->lo = map + guard;
    out->hi = map + slot;
    out->kind = STACK_SPAN;
    out->vmas = 0;
    out->cls = i;
    out->fresh = 1;
    out->keep = 0;
    out->tcb = NULL;
    return 0;
}

/* span_has_free: the (size, guard) class has a warm or cold slot to give. stk.lock held. */
static int span_has_free(size_t size, size_t guard)
{
    for (unsigned i = 0; i < STACK_SPAN_CLASSES && stk.cls[i].size; i++)
        if (stk.cls[i].size == size && stk.cls[i].guard == guard)
            return stk.cls[i].warm || stk.cls[i].dirty || stk.cls[i].nfree;
    return 0;
}

/* span_guard installs a fresh slot's guard marker. Returns 0 or -errno. stk.lock not held. */
static int span_guard(const struct gstack *st)
{
    if (!st->guard)
        return 0;
    long r = rt_syscall(SYS_madvise, st->map, st->guard, MADV_GUARD_INSTALL);
    return r < 0 ? (int)r : 0;
}

/* freev_push puts a cold slot, memory released, on its class's array. stk.lock held. */
static void freev_push(struct spanclass *c, char *map)
{
    if (c->nfree == c->capfree) {
        size_t cap = c->capfree ? 2 * c->capfree : 1024;
        char **v = (char **)sys_mmap(cap * sizeof *v, PROT_READ | PROT_WRITE);
        if (!v)
            goshim_throw("stack_free: no memory for the list of free stack slots");
        if (c->nfree)
            memcpy(v, c->freev, c->nfree * sizeof *v);
        if (c->freev)
            rt_syscall(SYS_munmap, c->freev, c->capfree * sizeof *v, 0);
        c->freev = v;
        c->capfree = cap;
    }
    c->freev[c->nfree++] = map;
}

static size_t slot_len(unsigned cls)
{
    return stk.cls[cls].size + stk.cls[cls].guard;
}

/*
 * flush_cold releases the memory of a batch of cold slots and puts them on
 * their classes' arrays. Sorted by address, adjacent slots (threads that
 * ended in the order they were made) are released by one madvise over
 * their guards and stacks together: guard markers survive MADV_DONTNEED.
 * One call per run instead of one per stack, and one TLB shoot-down.
 * stk.lock not held; takes it.
 */
static void flush_cold(struct coldslot *v, unsigned n)
{
    for (unsigned gap = n / 2; gap > 0; gap /= 2) /* shell sort: n <= COLD_BATCH */
        for (unsigned i = gap; i < n; i++)
            for (unsigned j = i; j >= gap && v[j - gap].map > v[j].map; j -= gap) {
                struct coldslot t = v[j];
                v[j] = v[j - gap];
                v[j - gap] = t;
            }
    for (unsigned i = 0; i < n;) {
        unsigned j = i + 1;
        char *end = v[i].map + slot_len(v[i].cls);
        while (j < n && v[j].map == end && v[j].cls == v[i].cls)
            end += slot_len(v[j++].cls);
        rt_syscall(SYS_madvise, v[i].map, end - v[i].map, MADV_DONTNEED);
        i = j;
    }
    runtime_lock(&stk.lock);
    for (unsigned i = 0; i < n; i++)
        freev_push(&stk.cls[v[i].cls], v[i].map);
    runtime_unlock(&stk.lock);
}

/*
 * The batch being flushed, off every stack (a G's may be small): whoever
 * holds flush_lock owns it. Lock order: flush_lock, then stk.lock.
 */
static struct runtime_lock flush_lock;
static struct coldslot flushing[COLD_BATCH];

/*
 * flush_pending flushes the pending cold batch when it is full (all: any
 * length, for a stack_alloc that would otherwise carve a new slot).
 * stk.lock not held.
 */
static void flush_pending(int all)
{
    runtime_lock(&flush_lock);
    runtime_lock(&stk.lock);
    unsigned n = stk.ncold >= (all ? 1u : (unsigned)COLD_BATCH) ? stk.ncold : 0;
    memcpy(flushing, stk.cold, n * sizeof *flushing);
    stk.ncold -= n;
    runtime_unlock(&stk.lock);
    if (n)
        flush_cold(flushing, n);
    runtime_unlock(&flush_lock);
}

/* node_of: where a free stack keeps its node, just below its kept bytes. */
static struct stacknode *node_of(const struct gstack *st)
{
    return (struct stacknode *)(((uintptr_t)stack_sp_top(st) - STACK_NODE_SPACE) & ~(uintptr_t)15);
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

/* release_memory returns a free stack's pages below its node's page to the kernel
 * (the node and the kept bytes above it stay). */
static void release_memory(const struct gstack *st)
{
    char *top = (char *)((uintptr_t)node_of(st) & ~(uintptr_t)(pagesize - 1));
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
 * below it, and the release cost a page-table walk each (an 8 MiB range:
 * 35% of a batch of 1000 create+joins, in unmap_page_range) for nothing.
 * A thread that skipped pages (a large frame left partly untouched) may
 * leave pages lower down while its stack is warm; they go when it goes
 * cold. Several releases go in one process_madvise where it works.
 */
static void release_warm(struct stacknode *list)
{
    struct iovec v[STACK_PCACHE_MAX / 2];
    size_t n = 0;
    for (struct stacknode *nd = list; nd; nd = nd->next) {
        char *top = (char *)((uintptr_t)nd & ~(uintptr_t)(pagesize - 1));
        top = (size_t)(top - nd->st.lo) > WARM_KEEP ? top - WARM_KEEP : nd->st.lo;
        unsigned char in = 1;
        if (top == nd->st.lo ||
            (rt_syscall(SYS_mincore, top - pagesize, pagesize, (long)&in) == 0 && !(in & 1)))
            continue; /* never went below the kept part */
        if (!prep_ok) {
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

/* is_dflt: a stack of the default size and guard, or an arena slot (always default). */
static int is_dflt(const struct gstack *st)
{
    return st->kind == STACK_ARENA ||
           ((size_t)(st->hi - st->lo) == default_size && st->guard == default_guard);
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

void stack_set_populate(size_t bytes)
{
    populate_bytes = round_page(bytes);
}

size_t stack_default_size(void)
{
    return default_size;
}

size_t stack_default_guard(void)
{
    return default_guard;
}

/*
 * stack_alloc: see stack.h. Scheduler context: pc belongs to the calling P.
 */
int stack_alloc(struct stackcache *pc, size_t size, size_t guard, struct gstack *out)
{
    if (size == 0)
        size = default_size;
    if (size > SIZE_MAX / 2 || guard > SIZE_MAX / 2)
        return -ENOMEM;
    size = round_page(size);
    guard = round_page(guard);
    if (size < pagesize)
        size = pagesize;
    int dflt = size == default_size && guard == default_guard;

    if (dflt && pc && pc->head) {
        struct stacknode *nd = pc->head;
        pc->head = nd->next;
        pc->n--;
        *out = nd->st;
        out->fresh = 0;
        STAT_ADD(cache_hits, 1);
        STAT_ADD(live, 1);
        return 0;
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
            STAT_ADD(cache_hits, 1);
            STAT_ADD(live, 1);
            return 0;
        }
    }

    runtime_lock(&stk.lock);
    if (dflt && (stk.dhead || stk.head)) {
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
        runtime_unlock(&stk.lock);
        STAT_ADD(cache_hits, 1);
        STAT_ADD(live, 1);
        return 0;
    }

    if (use_guard_install()) {
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
        if (r == 0) {
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
        if (r != -ENOSPC)
            return r;
        runtime_lock(&stk.lock); /* every class taken: a mapping of its own */
    }

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

void stack_get_stats(struct stack_stats *out)
{
    out->mmaps = __atomic_load_n(&stats.mmaps, __ATOMIC_RELAXED);
    out->munmaps = __atomic_load_n(&stats.munmaps, __ATOMIC_RELAXED);
    out->cache_hits = __atomic_load_n(&stats.cache_hits, __ATOMIC_RELAXED);
    out->arena_stacks = __atomic_load_n(&stats.arena_stacks, __ATOMIC_RELAXED);
    out->live = __atomic_load_n(&stats.live, __ATOMIC_RELAXED);
}

static void set_max_map_count(unsigned long n)
{
    max_map_count = n;
    vma_budget = n / 4 * 3;
    rescan_step = vma_budget / 8 ? vma_budget / 8 : 1;
}

/* read_max_map_count reads vm.max_map_count, or returns 0. Start-up only. */
static unsigned long read_max_map_count(void)
{
    char buf[32];
    int fd =
        (int)rt_syscall(SYS_openat, AT_FDCWD, "/proc/sys/vm/max_map_count", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    long n = rt_syscall(SYS_read, fd, buf, sizeof buf - 1);
    rt_syscall(SYS_close, fd, 0, 0);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    unsigned long v = 0;
    for (char *p = buf; *p >= '0' && *p <= '9'; p++)
        v = v * 10 + (unsigned long)(*p - '0');
    return v;
}

/* probe_guard_install tries MADV_GUARD_INSTALL on a scratch mapping. Start-up only. */
static int probe_guard_install(void)
{
    char *m = sys_mmap(2 * pagesize, PROT_READ | PROT_WRITE);
    if (!m)
        return 0;
    long r = rt_syscall(SYS_madvise, m, pagesize, MADV_GUARD_INSTALL);
    rt_syscall(SYS_munmap, m, 2 * pagesize, 0);
    return r == 0;
}

/*
 * stack_init: see stack.h. Start-up, single-threaded; may use libc.
 */
int stack_init(size_t dflt)
{
    long ps = sysconf(_SC_PAGESIZE);
    if (ps <= 0 || (ps & (ps - 1)))
        return -EINVAL;
    pagesize = (size_t)ps;
    default_guard = pagesize;
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
    default_size = round_page(dflt);
    arena_slot_size = default_size;
    guard_install = probe_guard_install();
#ifdef GOSHIM_HAVE_VALGRIND
    prep_ok = guard_install && !RUNNING_ON_VALGRIND; /* it does not know process_madvise */
#else
    prep_ok = guard_install;
#endif
    unsigned long mmc = read_max_map_count();
    set_max_map_count(mmc ? mmc : MAX_MAP_COUNT_DEFAULT);
    return 0;
}

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
static void sigfault_handler(int sig, siginfo_t *si, void *uc)
{
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
int stack_thread_init(void)
{
    stack_t cur;
    if (rt_syscall(SYS_sigaltstack, 0, &cur, 0) == 0 && !(cur.ss_flags & SS_DISABLE) &&
        cur.ss_size >= ALTSTACK_SIZE / 2)
        return 0; /* keep the thread's own (a cgo-like host, or a second call) */
    struct gstack st;
    unsigned extra;
    unsigned need = use_guard_install() ? 1 : 2;
    vmas_add(need);
    int r = map_stack(ALTSTACK_SIZE, pagesize, &st, &extra);
    if (r < 0) {
        vmas_add(-(long)need);
        return r;
    }
    if (extra)
        vmas_add(extra);
    vg_deregister(&st); /* a signal stack, not a G stack */
    stack_t ss = {.ss_sp = st.lo, .ss_flags = 0, .ss_size = (size_t)(st.hi - st.lo)};
    long e = rt_syscall(SYS_sigaltstack, &ss, 0, 0);
    if (e < 0) {
        rt_syscall(SYS_munmap, st.map, st.maplen, 0);
        vmas_add(-(long)st.vmas);
        return (int)e;
    }
    return 0;
}

void stack_test_set_max_map_count(unsigned long n)
{
    runtime_lock(&stk.lock);
    set_max_map_count(n);
    stk.scanned = 0;
    runtime_unlock(&stk.lock);
}

void stack_test_force_mprotect(int on)
{
    force_mprotect = on;
}

int stack_test_guard_install(void)
{
    return guard_install;
}

int stack_test_batch_prepare(void)
{
    return prep_ok;
}

/* Fork child: another thread may have held the cache's lock at the fork. */
void stack_fork_child(void)
{
    stk.lock.key = 0;
    flush_lock.key = 0;
}
