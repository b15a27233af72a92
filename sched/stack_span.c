/*
 * G stacks: guards, spans, arenas and the VMA budget (stack_impl.h lists
 * the files of the allocator; its caches are in stack.c). Here is where a
 * stack no cache holds comes from, and where span slots go cold.
 *
 * Guards. With MADV_GUARD_INSTALL (Linux >= 6.13, detected once in
 * stack_init) the guard is a page-table marker inside the same VMA: no split,
 * and adjacent stacks even merge into one VMA (docs/design.md, "Stack facts").
 * The marker survives MADV_DONTNEED and fork. Without it the guard is mprotect(PROT_NONE): 2 VMAs per stack, so
 * vm.max_map_count (65530) caps the process at ~32 000 guarded stacks.
 *
 * Spans. With guard markers, a stack is never a mapping of its own: it is a
 * slot of a span, one large mapping (about 1 GiB of address space, at most
 * SPAN_SLOTS_MAX slots; under RLIMIT_AS near what is used, see slots_map) carved in order into equal slots of one size class
 * (usable size, guard), each with its guard marker installed when the slot
 * is first carved. A span is one VMA whatever its slot count, so a million
 * stacks cost a few hundred map lines, and a freed slot of any size goes
 * back to its class (a per-class list under stk.lock; default-size slots go
 * through the P and global caches first) instead of being unmapped. Slots
 * are never unmapped: that would split the span, and munmap would be most
 * of the cost of a thread's exit (TLB shoot-downs and mmap_lock waits). Up to STACK_SPAN_CLASSES classes; a
 * further size gets a mapping of its own, as without guard markers.
 *
 * The shared region. A class's first slots are not a span of their own but a
 * chunk (CHUNK_SLOTS_MIN slots, then as many as the class has) cut from the
 * top of one region every class shares, itself a span-sized mapping that the
 * kernel places right below the libraries: the scheduler stacks of the Ms,
 * their signal stacks and the first threads' stacks all sit in a few MiB
 * next to libc. A fork copies page tables, and a page-table page per 2 MiB
 * (a PMD page per GiB) that holds anything: stacks one region apart each
 * cost their own, and so did each M's stack and signal stack, a mapping
 * apiece - the fork of a process with one parked thread took twice
 * native's time in the kernel (docs/measured.md, session 38). A chunk larger
 * than the region's rest gets a new region; a class whose chunk would not
 * fit in one region, and every class under RLIMIT_AS or valgrind (stack_init
 * says why), maps spans of its own as before.
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
 * Cold slots. A span slot beyond the warm lists waits in stk.cold, a batch
 * of COLD_BATCH; flush_cold releases the batch's memory in address order
 * and puts the slots on their classes' arrays of free slots (stack.c's
 * essay, Caches).
 *
 * Rejected alternatives.
 *  - An unmapped gap as the guard: nothing stops a later mmap from filling
 *    the gap, and it costs the same VMA as PROT_NONE.
 *  - A node in each cold slot: its page stays, and splits the contiguous
 *    range a batch of adjacent slots is released with.
 *  - Checking /proc/self/maps on every allocation: its cost grows with its
 *    lines, and the file has tens of thousands of lines near the limit.
 */
#include "libc.h"
#include "stack_impl.h"

#include "api.h"
#include "lock.h"
#include "throw.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/uio.h>

static unsigned long max_map_count = MAX_MAP_COUNT_DEFAULT;
static unsigned long vma_budget = MAX_MAP_COUNT_DEFAULT / 4 * 3;
static unsigned long rescan_step = MAX_MAP_COUNT_DEFAULT / 32;

static int warned;    /* the max_map_count warning was printed; atomic */
static int mmc_known; /* vm.max_map_count read (or set by a test); stk.lock */

static struct iovec prep_iov[PREP_MAX]; /* stk.lock */
static size_t populate_bytes;           /* top bytes of a fresh slot to populate; set once */

/* sys_mmap maps len anonymous bytes; returns the address or NULL. Scheduler-safe. */
static char *sys_mmap(size_t len, int prot)
{
    long r = rt_syscall6(SYS_mmap, 0, (long)len, prot,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (r < 0 && r > -4096)
        return NULL;
    return (char *)r;
}

/*
 * count_maps counts the lines of /proc/self/maps with raw syscalls.
 * Returns the count or -errno. Scheduler-safe; its cost grows with the lines.
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

/* read_max_map_count reads vm.max_map_count, or returns 0. Scheduler-safe. */
static unsigned long read_max_map_count(void)
{
    char buf[32];
    if (rt_read_text("/proc/sys/vm/max_map_count", buf, sizeof buf) < 0)
        return 0;
    unsigned long v = 0;
    for (char *p = buf; *p >= '0' && *p <= '9'; p++)
        v = v * 10 + (unsigned long)(*p - '0');
    return v;
}

static void set_max_map_count(unsigned long n)
{
    mmc_known = 1;
    max_map_count = n;
    vma_budget = n / 4 * 3;
    rescan_step = vma_budget / 8 ? vma_budget / 8 : 1;
}

/*
 * vmas_fit says whether need more VMAs stay within the budget, rescanning
 * /proc/self/maps when the estimate says no (see the essay). stk.lock held.
 */
int vmas_fit(unsigned long need)
{
    /* The limit read the first time our VMAs pass MMC_READ_AT, not at every start (an open
     * and a read of /proc, 16 us of a start here): with guard markers a process rarely
     * gets there. Below a limit so low, what the kernel refuses takes the fallbacks. */
    if (!mmc_known && stk.vmas + need > MMC_READ_AT) {
        unsigned long mmc = read_max_map_count();
        set_max_map_count(mmc ? mmc : MAX_MAP_COUNT_DEFAULT);
    }
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

void vmas_add(long d)
{
    runtime_lock(&stk.lock);
    stk.vmas += (unsigned long)d;
    runtime_unlock(&stk.lock);
}

/* warn_limit prints the one-time "no guard page" warning. Scheduler-safe. */
void warn_limit(void)
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
int map_stack(size_t size, size_t guard, struct gstack *out, unsigned *extra)
{
    size_t len = size + guard;
    char *map = sys_mmap(len, PROT_READ | PROT_WRITE);
    *extra = 0;
    if (!map)
        return -ENOMEM;
    STAT_ADD(mmaps, 1);
    unsigned vmas = 1;
    if (guard) {
        int r = stack_guard_range(map, guard);
        if (r < 0) {
            rt_syscall(SYS_munmap, map, len, 0);
            STAT_ADD(munmaps, 1);
            return r;
        }
        vmas = (unsigned)r;
        if (vmas == 2 && use_guard_install())
            *extra = 1;
    }
    gstack_on_map(out, STACK_MMAP, map, len, guard);
    out->vmas = vmas;
    vg_register(out);
    return 0;
}

/*
 * as_room is the address space a new mapping may aim for: unlimited without
 * RLIMIT_AS, else a small share of the limit (see slots_map). Scheduler-safe.
 */
static size_t as_room(void)
{
    struct rlimit lim;
    if (rt_syscall6(SYS_prlimit64, 0, RLIMIT_AS, 0, (long)&lim, 0, 0) != 0 ||
        lim.rlim_cur == RLIM_INFINITY)
        return SIZE_MAX;
    return (size_t)(lim.rlim_cur / AS_SHARE);
}

/*
 * slots_map maps about target bytes cut into slots of slot bytes (at least
 * one, at most max): its start, with *end one past its last slot; NULL if
 * the kernel refuses even one slot. One VMA more. Under RLIMIT_AS the
 * mapping is a reservation the limit counts, so it is kept near what is
 * used: at most 1/AS_SHARE of the limit, and no more slots than the kind
 * has so far (carved: a kind used once, as M0's scheduler stack, gets one
 * slot, a busy one doubles); when the kernel refuses (ENOMEM: the limit, or
 * no room) it tries half as many slots, down to one. So the threads a
 * program can make are bounded by their stacks, not by slots never used.
 * stk.lock held.
 */
static char *slots_map(size_t target, size_t slot, size_t max, size_t carved, char **end)
{
    size_t room = as_room();
    if (target > room)
        target = room;
    size_t n = target / slot;
    if (room != SIZE_MAX && n > carved)
        n = carved;
    if (n < 1)
        n = 1;
    if (n > max)
        n = max;
    char *map;
    while ((map = sys_mmap(n * slot, PROT_READ | PROT_WRITE)) == NULL && n > 1)
        n /= 2;
    if (!map)
        return NULL;
    STAT_ADD(mmaps, 1);
    stk.vmas += 1;
    *end = map + n * slot;
    return map;
}

/*
 * chunk_get gives the next chunk of the (slot) class, carved so far slots in
 * all: from the top of the shared region while it fits (a new region when
 * the last one's rest is too small), else a span of its own (slots_map).
 * *end is one past its last slot; NULL without memory. stk.lock held.
 */
static char *chunk_get(size_t slot, size_t carved, char **end)
{
    size_t n = carved < CHUNK_SLOTS_MIN ? CHUNK_SLOTS_MIN : carved;
    if (stack_shared_region && n <= SPAN_SLOTS_MAX && n * slot <= SPAN_TARGET / 2 &&
        as_room() == SIZE_MAX) {
        size_t len = n * slot;
        if ((size_t)(stk.region_top - stk.region_lo) < len) {
            /* A page short of a multiple of 2 MiB, or the kernel aligns it to one (for huge
             * pages) and leaves a gap above it: its top then shares no page-table page
             * with the mappings above. */
            size_t rlen = SPAN_TARGET - stack_pagesize;
            char *r = sys_mmap(rlen, PROT_READ | PROT_WRITE);
            if (r) {
                STAT_ADD(mmaps, 1);
                stk.vmas += 1;
                stk.region_lo = r;
                stk.region_top = r + rlen;
            }
        }
        if ((size_t)(stk.region_top - stk.region_lo) >= len) {
            *end = stk.region_top;
            stk.region_top -= len;
            return stk.region_top;
        }
    }
    return slots_map(SPAN_TARGET, slot, SPAN_SLOTS_MAX, carved, end);
}

/* chunk_put gives back the chunk chunk_get just gave. stk.lock held. */
static void chunk_put(char *chunk, char *end)
{
    if (chunk == stk.region_top) {
        stk.region_top = end;
        return;
    }
    rt_syscall(SYS_munmap, chunk, end - chunk, 0);
    stk.vmas -= 1;
}

/* arena_get carves or reuses a guard-less default-size arena slot. stk.lock held. */
int arena_get(struct gstack *out)
{
    struct stacknode *nd = stk.arena_free;
    if (nd) {
        stk.arena_free = nd->next;
        *out = nd->st;
        out->fresh = 0;
        return 0;
    }
    if (stk.arena_next == stk.arena_end) {
        /* The arena is the last resort: no budget check. */
        char *chunk = slots_map(ARENA_CHUNK_TARGET, stack_arena_slot_size, ARENA_SLOTS_MAX,
                                ARENA_SLOTS_MAX, &stk.arena_end);
        if (!chunk)
            return -ENOMEM;
        stk.arena_next = chunk;
    }
    char *slot = stk.arena_next;
    stk.arena_next += stack_arena_slot_size;
    STAT_ADD(arena_stacks, 1);
    gstack_on_map(out, STACK_ARENA, slot, stack_arena_slot_size, 0);
    vg_register(out);
    return 0;
}

/*
 * prepare_slots readies the fresh slots from map on, a batch at a time
 * (a quarter of the slots carved so far, PREP_MIN to PREP_MAX): their
 * guard markers in one process_madvise on the calling process, and the
 * top populate_bytes of each of the default size (of the one carved now for
 * other sizes: the pages a new thread touches at once, its TCB and first
 * frames) listed in *pop, for the caller to populate in a
 * second once it let the lock go (populating a page already in use is
 * harmless), instead of a system call and two page faults per thread. At
 * most a quarter more slots than in use are populated ahead. Where
 * process_madvise cannot do it (before Linux 6.15, or valgrind), stack_prep_ok
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
            stack_prep_ok = 0;
            return;
        }
    }
    /* Threads come in bursts of the default size; the Ms' and the signal stacks' classes
     * (and a program's other sizes) one at a time: ahead of need, their pages would only
     * be more for each fork to copy. */
    size_t top = populate_bytes < c->size ? populate_bytes : c->size;
    size_t npop = c->size == stack_dflt_size && c->guard == stack_dflt_guard ? k : 1;
    for (size_t j = 0; top && j < npop; j++)
        pop->v[pop->n++] = (struct iovec){map + (j + 1) * slot - top, top};
    c->prepared = map + k * slot;
}

/* populate_now populates what prepare_slots listed. stk.lock not held. */
void populate_now(struct populate *pop)
{
    /* Failing (no memory now) costs nothing: the pages fault in later. */
    if (pop->n)
        rt_syscall6(SYS_process_madvise, PIDFD_SELF_THREAD_GROUP, (long)pop->v, (long)pop->n,
                    MADV_POPULATE_WRITE, 0, 0);
    pop->n = 0;
}

/*
 * freev_reserve makes room in the class's array of free slots for every
 * slot carved so far plus more: the array never has to grow when a slot
 * goes cold, which happens when a thread ends and must not fail then
 * (under RLIMIT_AS the address space may be all used by the threads).
 * Returns 0 or -ENOMEM. stk.lock held.
 */
static int freev_reserve(struct spanclass *c, size_t more)
{
    size_t want = c->ncarved + more;
    if (want <= c->capfree)
        return 0;
    size_t cap = c->capfree ? 2 * c->capfree : 1024;
    while (cap < want)
        cap *= 2;
    char **v = (char **)sys_mmap(cap * sizeof *v, PROT_READ | PROT_WRITE);
    if (!v)
        return -ENOMEM;
    if (c->nfree)
        memcpy(v, c->freev, c->nfree * sizeof *v);
    if (c->freev)
        rt_syscall(SYS_munmap, c->freev, c->capfree * sizeof *v, 0);
    c->freev = v;
    c->capfree = cap;
    return 0;
}

/*
 * span_get gives a slot of the (size, guard) class: a freed one, else one
 * carved from the class's span (mapping a new span when it is used up).
 * *fresh says the slot was just carved: its guard marker is still to be
 * installed (span_guard, without the lock). Returns 0, -ENOSPC when every
 * class entry is taken by other sizes, or -ENOMEM. stk.lock held.
 */
int span_get(size_t size, size_t guard, struct gstack *out, int *fresh, struct populate *pop)
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
        char *end;
        char *span = chunk_get(slot, c->ncarved, &end);
        if (!span)
            return -ENOMEM;
        if (freev_reserve(c, (size_t)(end - span) / slot) != 0) {
            chunk_put(span, end);
            return -ENOMEM;
        }
        c->end = end;
        c->next = span;
        c->prepared = span;
    }
    map = c->next;
    c->next += slot;
    c->ncarved++;
    if (stack_prep_ok && map >= c->prepared)
        prepare_slots(c, map, slot, pop);
    *fresh = map >= c->prepared; /* its guard is still to be installed */
slot:
    gstack_on_map(out, STACK_SPAN, map, slot, guard);
    out->cls = i;
    return 0;
}

/* span_has_free: the (size, guard) class has a warm or cold slot to give. stk.lock held. */
int span_has_free(size_t size, size_t guard)
{
    for (unsigned i = 0; i < STACK_SPAN_CLASSES && stk.cls[i].size; i++)
        if (stk.cls[i].size == size && stk.cls[i].guard == guard)
            return stk.cls[i].warm || stk.cls[i].dirty || stk.cls[i].nfree;
    return 0;
}

/* span_guard installs a fresh slot's guard marker. Returns 0 or -errno. stk.lock not held. */
int span_guard(const struct gstack *st)
{
    if (!st->guard)
        return 0;
    long r = rt_syscall(SYS_madvise, st->map, st->guard, MADV_GUARD_INSTALL);
    return r < 0 ? (int)r : 0;
}

/* freev_push puts a cold slot, memory released, on its class's array (room
 * reserved when the slot was carved, freev_reserve). stk.lock held. */
static void freev_push(struct spanclass *c, char *map)
{
    GOSHIM_ASSERT(c->nfree < c->capfree);
    c->freev[c->nfree++] = map;
}

void span_release_now(struct gstack *st)
{
    rt_syscall(SYS_madvise, st->map, st->maplen, MADV_DONTNEED); /* the guard marker stays */
    runtime_lock(&stk.lock);
    freev_push(&stk.cls[st->cls], st->map);
    runtime_unlock(&stk.lock);
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
 * holds stack_flush_lock owns it. Lock order: stack_flush_lock, then stk.lock.
 */
struct runtime_lock stack_flush_lock;
static struct coldslot flushing[COLD_BATCH] GOSHIM_LARGE;

/*
 * flush_pending flushes the pending cold batch when it is full (all: any
 * length, for a stack_alloc that would otherwise carve a new slot).
 * stk.lock not held.
 */
void flush_pending(int all)
{
    runtime_lock(&stack_flush_lock);
    runtime_lock(&stk.lock);
    unsigned n = stk.ncold >= (all ? 1u : (unsigned)COLD_BATCH) ? stk.ncold : 0;
    memcpy(flushing, stk.cold, n * sizeof *flushing);
    stk.ncold -= n;
    runtime_unlock(&stk.lock);
    if (n)
        flush_cold(flushing, n);
    runtime_unlock(&stack_flush_lock);
}

void stack_set_populate(size_t bytes)
{
    populate_bytes = round_page(bytes);
}

int stack_guard_range(void *p, size_t len)
{
    if (use_guard_install() && rt_syscall(SYS_madvise, p, len, MADV_GUARD_INSTALL) == 0)
        return 1;
    long r = rt_syscall(SYS_mprotect, p, len, PROT_NONE);
    return r < 0 ? (int)r : 2;
}

/*
 * probe_guard_install asks whether the kernel knows MADV_GUARD_INSTALL: it checks the advice
 * before the range, and an empty range then succeeds (EINVAL where it does not know it): one
 * system call, where a scratch mapping, the advice on it and its unmap cost 16 us of a start
 * here. An install that still fails (a VMA mlockall(MCL_FUTURE) locked) falls back to
 * mprotect for that guard (stack_guard_range, prepare_slots). Start-up only.
 */
int probe_guard_install(void)
{
    return rt_syscall(SYS_madvise, 0, 0, MADV_GUARD_INSTALL) == 0;
}

void stack_test_set_max_map_count(unsigned long n)
{
    runtime_lock(&stk.lock);
    set_max_map_count(n);
    stk.scanned = 0;
    runtime_unlock(&stk.lock);
}
