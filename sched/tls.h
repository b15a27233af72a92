/*
 * Per-thread TLS: one glibc thread control block (TCB) per G.
 *
 * Every user-level thread (G) owns a TCB built the way glibc builds one for
 * a new pthread (struct pthread + static TLS block), so errno and __thread
 * variables belong to the G. The scheduler installs a G's TCB as the FS base
 * when it switches to that G, with the method chosen here (tls_fs_method).
 * Design, facts and rejected alternatives: top of tls.c (the TCBs) and
 * tls_probe.c (tls_init: the layout probes and the FS method), and
 * docs/design.md, rules 9-12 and "TCB facts".
 *
 * The FS method is the first of the chain that works here (wrfsbase, ldt,
 * arch_prctl: tls_probe.c), unless GOSHIM_FS forces one; GOSHIM_LDT_ENTRIES
 * caps the ldt method's entries; GOSHIM_TLS (parsed by config.c) is the
 * mode tls_init is asked for. What each accepts: sched/config.def.
 *
 * x86-64 only. Everything here is hidden (-fvisibility=hidden).
 */
#ifndef GOSHIM_TLS_H
#define GOSHIM_TLS_H

#include <pthread.h>
#include <stddef.h>
#include <stdbool.h>

#include "api.h" /* the mode, tls_self, tls_tcb_tid, tls_thread_exit */

/* The values are known to setfs_x86_64.inc. */
enum tls_fs_method { TLS_FS_WRFSBASE = 0, TLS_FS_ARCH_PRCTL = 1, TLS_FS_NONE = 2, TLS_FS_LDT = 3 };

extern int tls_fs_method; /* read by the context-switch assembly; TLS_FS_NONE in errno mode */

/*
 * tls_init finds every glibc offset at run time and picks the FS method.
 * Run once, on an ordinary thread (the main thread or a real pthread),
 * before any TCB is made. want is the user's request (GOSHIM_TLS).
 * want == TLS_MODE_FULL: if a lookup or probe fails, falls back to errno
 * mode and prints one line on stderr naming what failed.
 * want == TLS_MODE_ERRNO: prints a one-line note that errno mode was chosen.
 * Returns the effective mode (also in tls_mode), or -errno when a probe
 * thread could not be created (EAGAIN: no thread to spare): the runtime
 * must not start then. Never crashes.
 * meanwhile, if not NULL, is the caller's work for the time the probe
 * thread runs (on another CPU, where there is one): called once, on the
 * calling thread, while the probes run, or not at all when no probe thread
 * is made (errno mode, a lookup that failed first).
 * then, if not NULL, runs on the probe thread once its probe passed (full
 * mode), in place of its end: it may go on as a thread of the caller's. The
 * thread has every signal blocked but glibc's SIGCANCEL and SIGSETXID.
 */
int tls_init(int want, void (*meanwhile)(void), void (*then)(void));

/* tls_fs_method_name names a method: "wrfsbase", "ldt", "arch_prctl" or "none". */
const char *tls_fs_method_name(int method);

/*
 * For tests: tls_init behaves as if the kernel did not allow wrfsbase
 * (so auto tries ldt next), as on the hosts without FSGSBASE.
 */
extern int tls_test_no_fsgsbase;

/* --- Full mode only. --- */

/*
 * tls_tcb_new returns a fresh TCB for a new thread: static TLS images
 * copied, self pointers, multiple_threads = 1, stack and pointer guards and
 * feature_1 as in the creating thread, list self-loop, unique fake tid,
 * empty robust list, specific[0], rseq cpu_id = -2, __resp -> its own res.
 * Stack fields are zero (tls_tcb_set_stack). In the ldt method the TCB
 * comes from the low arena while it has slots (ldt.h), else from glibc's
 * allocation as in the other methods. NULL on allocation failure
 * (no message). Any FS may be installed; uses malloc.
 */
void *tls_tcb_new(void);
/* tls_tcb_new in two steps: tls_tcb_alloc the allocation (all of its malloc), tls_tcb_fill
 * the rest (no malloc: for the probe thread, which must not allocate before its probe). */
void *tls_tcb_alloc(void);
void tls_tcb_fill(void *tcb);

/*
 * tls_tcb_reset makes a used TCB fresh for a new thread: every static TLS
 * image is copied again (errno and __thread restart from their initial
 * values), dynamic TLS blocks, per-thread strerror/strsignal buffers and
 * second-level pthread key blocks are freed, the struct pthread fields are
 * as from tls_tcb_new with a new fake tid. Two things are kept: the two
 * glibc malloc words (they belong to the OS thread that lent them, see
 * tls_malloc_move) and the stack fields set by tls_tcb_set_stack.
 * Safe to call while tcb is the FS base of the caller (the caller's errno
 * and __thread values are then reset too), or from another context.
 * Never on a TCB not made by tls_tcb_new.
 */
void tls_tcb_reset(void *tcb);

/*
 * tls_tcb_prefetch asks for the cache lines tls_tcb_reset writes (struct
 * pthread and the static TLS down to libc's block), ahead of the reset.
 * It reads and writes nothing.
 */
void tls_tcb_prefetch(const void *tcb);
/* tls_tcb_prefetch_run: the lines a thread's switch in touches (header, malloc words). */
void tls_tcb_prefetch_run(const void *tcb);

/*
 * tls_tcb_set_stack records the G's stack (stackblock, stackblock_size,
 * guardsize, reported_guardsize) so pthread_getattr_np and glibc's
 * __libc_alloca_cutoff see it. stackblock is the lowest address of the
 * mapping including the guard, size its whole length.
 */
void tls_tcb_set_stack(void *tcb, void *stackblock, size_t size, size_t guard);

/*
 * A TCB carved out of the top of its thread's stack block, as pthread_create
 * does (glibc's allocatestack.c): tls_tcb_space(extra) is how many bytes at
 * the top of a block the TCB, its static TLS and extra bytes above it take
 * (the stack starts below them), tls_tcb_new_at makes one there: struct
 * pthread ends extra bytes below top (top page-aligned), the static TLS lies
 * below it. zeroed: the bytes are zero pages never written (a fresh mapping),
 * so nothing is cleared; else struct pthread is cleared first. Returns the TCB
 * (thread pointer), or NULL when the DTV cannot be allocated. Only outside the
 * ldt method (LDT TCBs live below 4 GiB). tls_tcb_end frees what such a TCB
 * owns (buffers, dynamic TLS, DTV) and leaves its memory to the stack's owner.
 * tls_tcb_reset works on it as on any other.
 */
size_t tls_tcb_space(size_t extra);
void *tls_tcb_new_at(void *top, size_t extra, bool zeroed);
void tls_tcb_end(void *tcb);

/*
 * tls_tcb_destroy frees everything the TCB owns (tls_state buffers, key
 * blocks, dynamic TLS, DTV, the TCB). Called from another thread or
 * context, never with tcb installed. The malloc words must have been moved
 * out first, or the tcache they point to leaks.
 */
void tls_tcb_destroy(void *tcb);

/* tls_tcb_set_tid replaces the fake tid stored in a TCB (tls_tcb_tid, api.h): a fork
 * child's G takes its process's real tid (fake tids are unique only within a process). */
void tls_tcb_set_tid(void *tcb, unsigned tid);

/*
 * A fork made on a G's TCB (fork.c). glibc lists a thread's descriptor with the threads on
 * stacks glibc made (TLS_LISTED_GLIBC) or with those on stacks of their own and the main
 * thread (TLS_LISTED_OWN); TLS_LISTED_UNKNOWN: not known which. tls_relist_note(tcb, how,
 * main_thread), as an M starts on its thread (the main thread's: main_thread), learns where
 * the list's head is. In the child of a fork made on forked_on, tls_relist_child takes
 * forked_on off glibc's thread list and puts kept, the forking M's own descriptor (listed
 * how), back where glibc would have left it had it forked on it (listed, out of the stack
 * cache, the child's tid, an empty robust list); false, changing nothing, if the lists are
 * not as glibc leaves them or their heads are unknown. tls_relist_ready(how): the heads it
 * needs are known.
 */
enum tls_listed { TLS_LISTED_UNKNOWN, TLS_LISTED_GLIBC, TLS_LISTED_OWN };
void tls_relist_note(void *tcb, enum tls_listed how, bool main_thread);
bool tls_relist_ready(enum tls_listed how);
bool tls_relist_child(void *forked_on, void *kept, enum tls_listed how, unsigned tid);
/* The word of a TCB the kernel clears when its thread ends (CLONE_CHILD_CLEARTID, futex
 * woken): glibc's tid. */
uint32_t *tls_tcb_tid_word(void *tcb);

/* tls_thread_start runs on the new thread, its TCB installed, before user code (__ctype_init). */
void tls_thread_start(void);

/*
 * tls_malloc_move shares glibc's per-thread malloc state (tcache,
 * thread_arena: two words of libc's TLS block, found by a probe): copies
 * them from from_tcb to to_tcb, then zeroes them in from_tcb. No-op when
 * the probe found no words (malloc replaced) or from_tcb == to_tcb. TLS-free, errno-free,
 * lock-free: any third TCB may be installed.
 */
void tls_malloc_move(void *from_tcb, void *to_tcb);
/*
 * tls_malloc_handover, the same with the two words apart, where the probe told them apart:
 * the tcache moves; from_tcb's arena word is returned and zeroed, and to_tcb's becomes
 * arena. Without the two told apart: tls_malloc_move, and arena is not used (returns
 * NULL).
 */
void *tls_malloc_handover(void *from_tcb, void *to_tcb, void *arena);
/* tcb's arena word (tls_malloc_handover), or NULL. */
void *tls_malloc_arena(void *tcb);
/*
 * A helper thread of the runtime's own allocates little (the maker: its Ms' descriptors),
 * and would attach an arena of its own at its first malloc, one more to lock at every fork:
 * it is given the main thread's instead (noted by tls_malloc_note_main, which returns it),
 * not attached; helpers never end (glibc would detach it then). tls_malloc_seed: false if
 * tcb has an arena already, or none is known. tls_malloc_main: the one noted, or NULL.
 */
void *tls_malloc_note_main(void *main_tcb);
void *tls_malloc_main(void);
bool tls_malloc_seed(void *tcb);

/*
 * tls_var_in returns the address of a static-TLS variable inside tcb, given
 * the variable's address in the calling thread (&var). Not valid for
 * dynamic TLS (libraries dlopen'ed without static TLS).
 */
void *tls_var_in(void *tcb, void *var_addr_in_self);

/*
 * tls_call_with_fs runs fn(arg) on the current stack with tcb installed as
 * the FS base, then restores the caller's FS base. For probes and tests.
 * With the method in tls_fs_method (arch_prctl in errno mode and before
 * tls_init). FS changes only inside the assembly.
 */
void tls_call_with_fs(void *tcb, void (*fn)(void *), void *arg);

/* Statistics for GOSHIM_STATS. */
struct tls_stats {
    unsigned long tcbs_created, tcbs_reset, tcbs_destroyed;
    unsigned long ldt_tcbs;     /* TCBs created in the LDT arena (ldt method) */
    unsigned long ldt_overflow; /* TCBs created past the LDT cap: installed by arch_prctl */
    size_t static_size;         /* _dl_get_tls_static_info: TCB + static TLS bytes per G */
};
void tls_get_stats(struct tls_stats *out);

#endif
