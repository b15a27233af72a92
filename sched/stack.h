/*
 * G stacks: allocation, guard pages, per-P and global caches, overflow
 * reporting. The design essays open stack.c (the allocator and its caches),
 * stack_span.c (guards, spans, the VMA budget), stack_scavenge.c (memory
 * release) and stack_signal.c (overflow); stack_impl.h is what they share.
 *
 * Context rules: stack_alloc, stack_free, stack_user and stack_cache_drain
 * run in scheduler context (g0, FS base possibly a G's): they touch no TLS,
 * no errno, no stdio, no malloc. stack_init and stack_overflow_init run at
 * start-up and may use libc. stack_thread_init runs once on each new M.
 */
#ifndef GOSHIM_STACK_H
#define GOSHIM_STACK_H

#include <setjmp.h>
#include <stddef.h>

enum {
    STACK_MMAP = 1,  /* own mapping, guard per gstack.guard */
    STACK_ARENA = 2, /* default-size slot of a guard-less arena (near vm.max_map_count) */
    STACK_USER = 3,  /* pthread_attr_setstack memory: never freed or written by us */
    STACK_SPAN = 4,  /* slot of a shared span mapping of its size class, guard marker below */
};

struct gstack {
    char *lo;     /* lowest usable byte (just above the guard) */
    char *hi;     /* one past the highest usable byte; initial SP goes just below */
    size_t guard; /* guard bytes directly below lo (0 = none) */
    char *map;    /* start of our mapping (NULL for user-provided stacks) */
    size_t maplen;
    unsigned kind;  /* STACK_MMAP, STACK_ARENA, STACK_USER */
    unsigned vgid;  /* valgrind stack id (0 when not under valgrind) */
    unsigned vmas;  /* VMAs this stack is charged for (0 for ARENA, SPAN and USER) */
    unsigned cls;   /* STACK_SPAN: index of its size class */
    unsigned fresh; /* set by stack_alloc: the stack's memory is zero pages never written */
    size_t keep;    /* bytes below hi its owner keeps across caches (a TCB); stack.c never
                       writes or releases them while the stack is cached */
    void *tcb;      /* the owner's object in the kept bytes (NULL: none); opaque here */
};

struct stacknode;
/*
 * Per-P cache of default-size stacks: an intrusive LIFO list whose links live
 * in the free stacks themselves. Used only by the P that owns it (no lock).
 * Zero-initialised is empty.
 */
struct stackcache {
    struct stacknode *head; /* default size and guard */
    unsigned n;
    unsigned burst;          /* default-size stacks taken since one was last put back */
    struct stacknode *ohead; /* span slots of other sizes, any class (searched) */
    unsigned on;
};

#define STACK_PCACHE_MAX 32 /* per-P cache bound; a full cache spills half */
#define STACK_GCACHE_MAX                                                                           \
    1024                      /* global cache bound; beyond it stacks are unmapped (or, for
                                 span slots, kept on their class's list without memory) */
#define STACK_SPAN_CLASSES 16 /* distinct (size, guard) pairs served from spans */

/*
 * stack_init sets the default stack size (0: glibc's rule, RLIMIT_STACK soft
 * limit, or 2 MiB when it is RLIM_INFINITY or unreadable; at least 16 KiB;
 * rounded up to pages) and detects MADV_GUARD_INSTALL once (vm.max_map_count is read
 * when the stacks' VMAs first come near a low one). Call once, before any other stack_* call.
 * Returns 0 or -errno.
 */
int stack_init(size_t default_size);
size_t stack_default_size(void);
size_t stack_default_guard(void); /* the page size, as glibc */
size_t stack_page_size(void);
/* Make [p, p+len) a guard: a marker where the kernel has them (1: the mapping stays one
 * VMA), else PROT_NONE (2: one more VMA); -errno if neither. */
int stack_guard_range(void *p, size_t len);

/*
 * stack_alloc fills *out with a stack of size usable bytes (0 = default,
 * rounded up to pages) and guard bytes below it (rounded up to pages).
 * Requests of exactly the default size and guard come from pc (may be NULL),
 * then the global cache, then a new mapping; a cached stack's contents are
 * unspecified but for its kept bytes (keep, tcb: as they were freed). With MADV_GUARD_INSTALL every size is a STACK_SPAN slot, freed
 * slots of any size are reused, and no stack costs a mapping of its own;
 * without it, other sizes get a fresh mapping. Near vm.max_map_count, a
 * default-size request may return a guard-less STACK_ARENA stack (out->guard
 * is then 0). Returns 0, or -ENOMEM when no memory could be mapped (glibc's
 * pthread_create reports that as EAGAIN) or size+guard overflows.
 */
int stack_alloc(struct stackcache *pc, size_t size, size_t guard, struct gstack *out);

/* st, from stack_alloc, is a thread's own stack or a signal stack, not a G's: a kept
 * object a cached stack of the default size brought (a G's TCB) is ended, and valgrind is
 * told it is no stack it switches to (stack_free takes it back all the same). */
void stack_not_g(struct gstack *st);

/* stack_free_now frees a stack from stack_alloc that no thread is expected to want soon (an
 * ended M's, a signal stack): its memory is given back at once, as an unmap would, instead
 * of staying warm in a cache (a span slot goes with its class's cold ones). *st is
 * cleared. */
void stack_free_now(struct gstack *st);

/* stack_user wraps pthread_attr_setstack memory [base, base+size) as a STACK_USER stack. */
void stack_user(void *base, size_t size, struct gstack *out);

/*
 * stack_free returns a stack no G runs on any more. Stacks of the default
 * size and guard, arena stacks and span slots of other sizes go to pc
 * (two lists, each bounded by STACK_PCACHE_MAX; a full one spills half to
 * the global lists, where STACK_GCACHE_MAX of each kind stay warm, kept
 * bytes intact, their memory released by stack_scavenge, and the rest go
 * cold: kept object ended, memory released);
 * others are unmapped. STACK_USER memory is never written nor unmapped.
 * *st is cleared.
 */
void stack_free(struct stackcache *pc, struct gstack *st);

/* stack_cache_drain moves every stack of pc to the global cache (P destroyed). */
void stack_cache_drain(struct stackcache *pc);

struct note;
/*
 * stack_scavenge releases the memory the threads of warm global stacks
 * left below their free node (those that went deeper than its page), for
 * the stacks put there since the last scavenge ("dirty": a stack going
 * warm is not looked at, so a batch of threads made again at once reuses
 * it with no system call). Called by an M about to sleep for lack of
 * work; returns when none is left or, within one stack, once *stop is
 * woken (stop may be NULL). Scheduler context, no P needed.
 */
void stack_scavenge(const struct note *stop);
/* Whether stack_scavenge has stacks to look at (one load). */
int stack_scavenge_due(void);

/*
 * stack_set_keep_release installs fn, called with a free stack whose kept
 * bytes (st->keep > 0) are about to be released or unmapped: it must end
 * the object there (st->tcb) and return; stack.c then clears keep and tcb.
 * Called outside stk.lock, from whatever context frees stacks. Set once,
 * before any stack with kept bytes is freed.
 */
void stack_set_keep_release(void (*fn)(struct gstack *st));

/*
 * stack_set_keep_prefetch installs fn, called with the cached stack that
 * a P's cache will give out next: it may prefetch the lines of its kept
 * object that the next owner writes first, and must not write them. Set
 * once, before stacks are made.
 */
void stack_set_keep_prefetch(void (*fn)(const struct gstack *st));

/*
 * stack_set_populate says how many top bytes of a new stack its first user
 * touches at once (a TCB and the first frames): fresh span slots get them
 * populated in batches (stack_span.c, prepare_slots). 0, the default: none.
 * Set once, before stacks are made.
 */
void stack_set_populate(size_t bytes);

/* stack_sp_top is the initial stack pointer region's end: hi less the kept bytes. */
static inline char *stack_sp_top(const struct gstack *st)
{
    return st->hi - st->keep;
}

/*
 * Overflow reporting. lookup returns 1 (and fills *id and *size) when
 * fault_addr lies in the guard of the stack of the G currently running on
 * this OS thread. It runs in a signal handler: async-signal-safe only.
 */
typedef int (*stack_lookup_fn)(void *fault_addr, unsigned long *id, size_t *size);
/* While set on a thread, a SIGSEGV or SIGBUS it raises (si_code > 0) jumps there
 * (siglongjmp, value 1), cleared, instead of reaching a handler: the preemption walk
 * (preempt.c) reads stacks through code whose unwind info may not describe it. The
 * jump leaves the two signals blocked: the caller unblocks them. */
extern __thread sigjmp_buf *stack_fault_escape __attribute__((tls_model("initial-exec")));

/*
 * stack_overflow_init installs the SIGSEGV and SIGBUS handler
 * (SA_SIGINFO|SA_ONSTACK|SA_RESTART), remembering the previous actions to
 * chain to. A G overflow prints
 * "goshim: thread <id> overflowed its <size>-byte stack (fault at <addr>)"
 * and dies of SIGSEGV as natively. Returns 0 or -errno.
 */
int stack_overflow_init(stack_lookup_fn lookup);

/*
 * stack_thread_init gives the calling OS thread (an M) a 64 KiB alternate
 * signal stack with a guard, unless it already has one. Once per M; the
 * memory lives as long as the thread: what it made is in *made (map NULL:
 * nothing), for stack_thread_fini; made may be NULL (kept for the process).
 * Returns 0 or -errno.
 */
int stack_thread_init(struct gstack *made);

/* stack_thread_fini: the calling thread, about to end, gives back the alternate stack
 * stack_thread_init made for it (*made), uninstalling it first. */
void stack_thread_fini(struct gstack *made);

struct stack_stats {
    unsigned long mmaps;        /* mmap calls (G stacks, arena chunks, signal stacks) */
    unsigned long munmaps;      /* stacks unmapped */
    unsigned long cache_hits;   /* stack_alloc served from the per-P or global cache */
    unsigned long arena_stacks; /* guard-less arena slots carved */
    unsigned long live;         /* stacks handed out by stack_alloc and not yet freed */
};
void stack_get_stats(struct stack_stats *out);

/*
 * Test hooks (tests/test_stack.c only). stack_test_set_max_map_count pretends
 * vm.max_map_count is n; stack_test_force_mprotect makes guards PROT_NONE
 * mappings as on kernels without MADV_GUARD_INSTALL. Call after stack_init.
 * stack_test_guard_install says whether MADV_GUARD_INSTALL was detected.
 */
void stack_test_set_max_map_count(unsigned long n);
void stack_test_force_mprotect(int on);
int stack_test_guard_install(void);
int stack_test_batch_prepare(void); /* fresh slots are prepared in batches (process_madvise) */

/* Fork child: release the cache's lock, which another thread may have held at the fork. */
void stack_fork_child(void);

#endif
