/*
 * What the four files of the G stack allocator share; nothing outside them
 * includes this (the contract for the rest of sched/ is stack.h):
 *
 *   stack.c           the allocator and its caches: stack_alloc, stack_free,
 *                     the per-P and global lists, stack_init;
 *   stack_span.c      guards, spans, arenas and the VMA budget: where a stack
 *                     that no cache holds comes from, and where cold span
 *                     slots go;
 *   stack_scavenge.c  giving the memory of free stacks back to the kernel;
 *   stack_signal.c    the per-M alternate signal stack and the overflow
 *                     (SIGSEGV/SIGBUS) handler.
 *
 * The state is one struct, stk, under stk.lock, and the settings stack_init
 * fixes once. The invariants are in stack.c's essay.
 */
#ifndef GOSHIM_STACK_IMPL_H
#define GOSHIM_STACK_IMPL_H

#include "lock.h"
#include "stack.h"

#include <stdint.h>
#include <sys/uio.h>

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
    MMC_READ_AT = 256,             /* our VMAs past which vm.max_map_count is read (vmas_fit) */
};
#define ARENA_CHUNK_TARGET ((size_t)512 << 20) /* aim for chunks of about this size */

/* A free stack's own descriptor and cache link, stored at st.hi - STACK_NODE_SPACE. */
struct stacknode {
    struct stacknode *next;
    struct gstack st;
};
_Static_assert(sizeof(struct stacknode) <= STACK_NODE_SPACE, "stacknode must fit STACK_NODE_SPACE");

enum { SPAN_SLOTS_MAX = 4096, CHUNK_SLOTS_MIN = 4 };
#define SPAN_TARGET ((size_t)1 << 30) /* address space a span aims for */
/* Under RLIMIT_AS, a span or arena chunk aims for at most this fraction of the limit. */
enum { AS_SHARE = 128 };

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

struct stackstate {
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
    char *region_lo, *region_top;     /* uncarved part of the shared region; lock */
    unsigned long vmas;               /* upper bound of VMAs charged to us; lock */
    unsigned long vmas_scanned;       /* vmas right after the last /proc scan; lock */
    int scanned;                      /* a scan happened; lock */
};
extern struct stackstate stk;

/* Set once by stack_init (and the test hooks) before any concurrent use. */
extern size_t stack_pagesize;
extern size_t stack_dflt_size;
extern size_t stack_dflt_guard;
extern size_t stack_arena_slot_size; /* stack_dflt_size rounded to pages */
extern int stack_guard_install;      /* MADV_GUARD_INSTALL works */
extern int stack_force_mprotect;     /* test hook */

/* Preparing fresh span slots in batches (prepare_slots). */
enum { PREP_MIN = 4, PREP_MAX = 32 };

/* The pages of a batch of fresh slots to populate, after stk.lock is let go. */
struct populate {
    struct iovec v[PREP_MAX];
    size_t n;
};
/* span_release_now gives a span slot's memory back at once and puts the slot with its
 * class's cold ones (stack_free_now). stk.lock not held. */
void span_release_now(struct gstack *st);
extern int stack_prep_ok;       /* process_madvise works here; stk.lock */
extern int stack_shared_region; /* chunks of one region for every class (stack_span.c) */

struct stackstats {
    unsigned long mmaps, munmaps, cache_hits, arena_stacks, live;
};
extern struct stackstats stackstats; /* relaxed atomics: counters only, they order nothing */

#define STAT_ADD(f, v) __atomic_fetch_add(&stackstats.f, (v), __ATOMIC_RELAXED)
#define STAT_SUB(f, v) __atomic_fetch_sub(&stackstats.f, (v), __ATOMIC_RELAXED)

/* Owns the cold batch being flushed (stack_span.c). Lock order: stack_flush_lock, then stk.lock. */
extern struct runtime_lock stack_flush_lock;

static inline size_t round_page(size_t n)
{
    return (n + stack_pagesize - 1) & ~(stack_pagesize - 1);
}

static inline int use_guard_install(void)
{
    return stack_guard_install && !stack_force_mprotect;
}

/* A stack on memory of ours, map..map+maplen with guard bytes at its
 * bottom, of kind STACK_MMAP, _ARENA or _SPAN: its memory zero pages never
 * written (fresh), no VMA charged, nothing kept, every other field zero. */
static inline void gstack_on_map(struct gstack *out, unsigned kind, char *map, size_t maplen,
                                 size_t guard)
{
    *out = (struct gstack){.lo = map + guard,
                           .hi = map + maplen,
                           .guard = guard,
                           .map = map,
                           .maplen = maplen,
                           .kind = kind,
                           .fresh = 1};
}

static inline void vg_register(struct gstack *st)
{
#ifdef GOSHIM_HAVE_VALGRIND
    st->vgid = VALGRIND_STACK_REGISTER(st->lo, st->hi);
#else
    st->vgid = 0;
#endif
}

static inline void vg_deregister(struct gstack *st)
{
#ifdef GOSHIM_HAVE_VALGRIND
    if (st->vgid)
        VALGRIND_STACK_DEREGISTER(st->vgid);
#endif
    st->vgid = 0;
}

/* node_of: where a free stack keeps its node, just below its kept bytes. */
static inline struct stacknode *node_of(const struct gstack *st)
{
    return (struct stacknode *)(((uintptr_t)stack_sp_top(st) - STACK_NODE_SPACE) & ~(uintptr_t)15);
}

/* stack.c */
struct stacknode *warm_pop(struct stacknode **dirty, struct stacknode **clean);

/* stack_span.c */
int vmas_fit(unsigned long need);
void vmas_add(long d);
void warn_limit(void);
int map_stack(size_t size, size_t guard, struct gstack *out, unsigned *extra);
int arena_get(struct gstack *out);
void populate_now(struct populate *pop);
int span_get(size_t size, size_t guard, struct gstack *out, int *fresh, struct populate *pop);
int span_has_free(size_t size, size_t guard);
int span_guard(const struct gstack *st);
void flush_pending(int all);
int probe_guard_install(void);

/* stack_scavenge.c */
void release_memory(const struct gstack *st);

#endif
