/*
 * Low TCBs with LDT selectors: the FS method for hosts without FSGSBASE.
 *
 * In this method every G's TCB lives in one arena below 4 GiB, cut into
 * power-of-two slots, and slot i is described by LDT entry i + 1, whose
 * base is the thread pointer of that slot. Installing the TCB is then a
 * user-mode `mov` of the selector into %fs (SETFS in setfs_x86_64.inc
 * finds the slot from the address), not a system call. TCBs outside the
 * arena (the main thread's, the Ms' own glibc descriptors, TCBs made
 * once the arena is full) are installed with arch_prctl. Design and
 * rejected alternatives: top of ldt.c; the facts: docs/design.md,
 * "LDT facts".
 *
 * Everything here is hidden and x86-64 only.
 */
#ifndef GOSHIM_LDT_H
#define GOSHIM_LDT_H

#include <stddef.h>
#include <stdint.h>

/* Read by SETFS: the arena [lo, lo + len) and log2 of the slot size; len 0 when unused. */
extern uintptr_t ldt_arena_lo, ldt_arena_len;
extern uint8_t ldt_slot_shift;

/* The most entries the LDT has (8192) less entry 0, which stays unused. */
#define LDT_MAX_SLOTS 8191

/*
 * ldt_init reserves the arena and writes the first batch of LDT entries.
 * static_size, align and tcb_size are glibc's static TLS size (TCB
 * included), its alignment and sizeof(struct pthread); nslots caps the
 * slots (1..LDT_MAX_SLOTS; fewer when large static TLS would not fit the
 * low reservation). Returns 0, or a negative errno: -ENOSYS or -EPERM when
 * modify_ldt is refused (hardened kernel, seccomp), -ENOMEM when no low
 * memory is left. On failure nothing is left mapped or written. Run once,
 * before any TCB exists, on one thread.
 */
int ldt_init(size_t static_size, size_t align, size_t tcb_size, int nslots);
/* ldt_cap reads GOSHIM_LDT_ENTRIES: how many TCBs may get an LDT entry (ldt_init's nslots;
 * LDT_MAX_SLOTS when unset, said when not understood). */
int ldt_cap(void);

/*
 * ldt_tcb_alloc returns the thread pointer of a free slot, its whole
 * static TLS area zeroed, its LDT entry written; NULL when every slot is
 * in use (the caller falls back to a TCB that arch_prctl installs).
 * Thread-safe, TLS-free, may run on g0.
 */
void *ldt_tcb_alloc(void);

/* ldt_tcb_free gives a slot back (the TCB is dead: no M has it installed). */
void ldt_tcb_free(void *tcb);

/* ldt_owns says whether tcb is a slot of the arena (installed by selector). */
static inline int ldt_owns(const void *tcb)
{
    return (uintptr_t)tcb - ldt_arena_lo < ldt_arena_len;
}

/* Statistics: slots in the arena, in use now, most in use at once, entries written. */
struct ldt_stats {
    unsigned long slots, live, peak, entries;
};
void ldt_get_stats(struct ldt_stats *out);

/* ldt_fork_child resets the lock in a fork child (the LDT and the arena are inherited). */
void ldt_fork_child(void);

#endif
