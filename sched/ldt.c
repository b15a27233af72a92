/*
 * Low TCBs and their LDT entries: switching the FS base without a system
 * call on hosts whose kernel does not allow wrfsbase.
 *
 * Model. x86-64 still loads a segment's base from its descriptor when a
 * selector is moved into %fs: one user-mode instruction, about as cheap
 * as wrfsbase, where arch_prctl is a system call. A descriptor holds a 32-bit base, so the TCB
 * must lie below 4 GiB. The LDT belongs to the process (the mm): every M
 * can load every entry, and the kernel keeps a thread's selector across
 * context switches and migrations (and shows ptrace, so gdb, the base
 * from the descriptor).
 *
 * So, in this method, the TCBs of the Gs are carved from one arena mapped
 * with MAP_32BIT (the kernel's low window, under 2 GiB), cut into slots of
 * a power-of-two size that holds glibc's whole static TLS block (5248 B
 * on glibc 2.36, so 8 KiB slots). Slot i's thread pointer is at a fixed
 * offset in it, and LDT entry i + 1 has that thread pointer as its base,
 * forever: an entry is written once, before its slot is first handed
 * out, and it goes back to the free list with its TCB when the G that
 * used it is destroyed. The context switch (SETFS) finds the slot, hence
 * the selector ((i + 1) << 3 | TI=1 | RPL=3), from the TCB address by a
 * subtraction, a comparison and a shift: no table, no field of the TCB.
 *
 * Entries are written in batches as the slots in use grow past those
 * written (8 at start-up, then as many again as there are, up to 256 at a
 * time): each modify_ldt copies the whole table into a new one and sends
 * an IPI to every CPU that runs the process, so writing one per created
 * thread would put that cost on every pthread_create, and rewriting
 * entries on reuse would put it on every recycle.
 *
 * Who gets a slot: every G's TCB (tls_tcb_new), M0's scheduler TCB,
 * and, in this method only, every other M's scheduler TCB too
 * (machines.c: m_low_g0tcb), so that an M going idle loads a selector.
 * TCBs that are not ours stay where glibc put them, above 4 GiB: the
 * main thread's (the main G: its pthread_self() and the addresses of its
 * TLS are known to the program before goshim starts, so it cannot move)
 * and each M's own glibc descriptor, installed only around fork and
 * set*id. SETFS installs those with arch_prctl(ARCH_SET_FS), which loads
 * the zero selector and writes the base: a switch to the main G costs a
 * system call, a switch away from it does not.
 *
 * The cap. The LDT has 8192 entries; entry 0 is left alone, so at most
 * 8191 slots (fewer if glibc's static TLS is so big that 8191 slots would
 * not fit the 256 MiB low reservation; GOSHIM_LDT_ENTRIES lowers the cap
 * for tests). Past the cap, tls.c makes the TCB as in the other methods
 * (glibc's own allocation, anywhere) and SETFS installs it with
 * arch_prctl: nothing fails, those Gs only switch at the system call's
 * price. Slots freed later are handed out again first.
 *
 * Rejected alternatives:
 *   - Reassigning entries on switch-in (a small LDT used as a cache):
 *     every miss is a modify_ldt, a table copy and an IPI, tens of us.
 *   - One entry written per TCB when it is made: the same cost on every
 *     pthread_create, and a write per recycle.
 *   - The selector stored in the TCB (a spare header word): SETFS would
 *     read memory of TCBs that are not ours (an M's glibc descriptor may
 *     end its mapping), and glibc may claim the word one day.
 *   - TCBs from MAP_32BIT one at a time: a VMA per TCB, and no way back
 *     from an address to its entry without a lookup.
 */
#include "ldt.h"

#include "lock.h"
#include "throw.h"

#include <asm/ldt.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#define LDT_BATCH_MIN   8   /* entries written at start-up: a 1-thread program pays 8 writes */
#define LDT_BATCH_MAX   256 /* the batches double up to this */
#define LDT_RESERVE_MAX (256ul << 20) /* bytes of low address space at most */
#define LDT_WRITE       0x11          /* modify_ldt: write, new-style (keeps `useable`) */

uintptr_t ldt_arena_lo, ldt_arena_len;
uint8_t ldt_slot_shift;

/*
 * The arena. Geometry is written by ldt_init before any slot is used and
 * read-only afterwards; the rest is protected by lock.
 */
static struct {
    struct runtime_lock lock;
    char *base;
    size_t slot, tp_off, below, tcb_size; /* slot size; tp offset in a slot; TLS below tp */
    uint32_t nslots;
    uint32_t used;    /* slots ever handed out (the high-water mark) */
    uint32_t written; /* LDT entries written: slots [0, written) have theirs */
    uint32_t live, peak;
    void *free; /* freed slots: a list linked through each slot's first word */
} arena;

/* write_entry writes LDT entry e (1..8191) with base base; 0 or -errno. */
static long write_entry(uint32_t e, uintptr_t base)
{
    struct user_desc d;
    memset(&d, 0, sizeof d);
    d.entry_number = e;
    d.base_addr = (unsigned)base;
    d.limit = 0xfffff;
    d.seg_32bit = 1;
    d.limit_in_pages = 1;
    d.useable = 1;
    return rt_syscall(SYS_modify_ldt, LDT_WRITE, &d, sizeof d);
}

/*
 * entry_loadable says whether the CPU itself accepts LDT entry e as a
 * data segment for user mode (lar sets ZF only then). modify_ldt can
 * succeed while the CPU never sees the table it wrote: on some virtual
 * machines (seen on a 6.18 guest with PTI) the kernel keeps the entry,
 * lar refuses it and the first mov to %fs raises #GP. Faulting is not a
 * way to find out, so ask before any selector is loaded.
 */
static bool entry_loadable(uint32_t e)
{
    uint32_t sel = e << 3 | 4 | 3, rights = 0;
    bool ok;
    __asm__ volatile("lar %2, %1\n\tsetz %0" : "=q"(ok), "=r"(rights) : "r"(sel) : "cc");
    return ok && (rights & 0x9000) == 0x9000; /* present, code or data (not system) */
}

static char *slot_tp(uint32_t i)
{
    return arena.base + (size_t)i * arena.slot + arena.tp_off;
}

/*
 * write_batch writes the entries of the next batch of slots, as many as
 * are written already (LDT_BATCH_MIN..LDT_BATCH_MAX): a program pays
 * for about as many entries as it has threads alive at once, in a number
 * of batches that grows with the log of that. arena.lock held (or init).
 */
static long write_batch(void)
{
    uint32_t n = arena.written < LDT_BATCH_MIN   ? LDT_BATCH_MIN
                 : arena.written > LDT_BATCH_MAX ? LDT_BATCH_MAX
                                                 : arena.written;
    uint32_t end = arena.written + n;
    if (end > arena.nslots)
        end = arena.nslots;
    for (uint32_t i = arena.written; i < end; i++) {
        long rc = write_entry(i + 1, (uintptr_t)slot_tp(i));
        if (rc != 0)
            return rc;
        arena.written = i + 1;
    }
    return 0;
}

int ldt_cap(void)
{
    const char *env = getenv("GOSHIM_LDT_ENTRIES");
    if (!env || !*env)
        return LDT_MAX_SLOTS;
    char *end;
    long v = strtol(env, &end, 10);
    if (*end || v < 1 || v > LDT_MAX_SLOTS) {
        rt_print(2,
                 "goshim: GOSHIM_LDT_ENTRIES=%s not understood (accepted: a whole number from 1 "
                 "to %d); using %d\n",
                 env, LDT_MAX_SLOTS, LDT_MAX_SLOTS);
        return LDT_MAX_SLOTS;
    }
    return (int)v;
}

int ldt_init(size_t static_size, size_t align, size_t tcb_size, int nslots)
{
    if (align == 0 || (align & (align - 1)) || static_size <= tcb_size || nslots < 1 ||
        nslots > LDT_MAX_SLOTS)
        return -EINVAL;
    size_t below = static_size - tcb_size;
    size_t tp_off = (below + align - 1) & ~(align - 1);
    size_t slot = 4096;
    uint8_t shift = 12;
    while (slot < tp_off + tcb_size) {
        slot <<= 1;
        shift++;
    }
    if ((size_t)nslots > LDT_RESERVE_MAX / slot)
        nslots = (int)(LDT_RESERVE_MAX / slot);
    if (nslots < 1)
        return -ENOMEM;

    /* MAP_32BIT: the kernel's low window (under 2 GiB); halve if it is crowded. */
    long p = -ENOMEM;
    for (; nslots > 0; nslots /= 2) {
        size_t len = (size_t)nslots * slot;
        p = rt_syscall6(SYS_mmap, 0, (long)len, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_32BIT, -1, 0);
        if (p >= 0 && (uintptr_t)p + len <= (1ul << 32))
            break;
        if (p >= 0)
            rt_syscall(SYS_munmap, p, len, 0);
        p = -ENOMEM;
    }
    if (p < 0)
        return -ENOMEM;

    memset(&arena, 0, sizeof arena);
    arena.base = (char *)p;
    arena.slot = slot;
    arena.tp_off = tp_off;
    arena.below = below;
    arena.tcb_size = tcb_size;
    arena.nslots = (uint32_t)nslots;
    /* One entry asked first: a CPU that refuses it costs one write, not a batch. */
    long rc = write_entry(1, (uintptr_t)slot_tp(0));
    if (rc == 0) {
        arena.written = 1;
        rc = entry_loadable(1) ? write_batch() : -ENOEXEC;
    }
    if (rc != 0) {
        /* Entries already written stay in the LDT, unused and harmless. */
        rt_syscall(SYS_munmap, p, (size_t)nslots * slot, 0);
        memset(&arena, 0, sizeof arena);
        return (int)rc;
    }
    ldt_slot_shift = shift;
    ldt_arena_lo = (uintptr_t)p;
    ldt_arena_len = (size_t)nslots * slot;
    return 0;
}

void *ldt_tcb_alloc(void)
{
    char *tp = NULL;
    runtime_lock(&arena.lock);
    if (arena.free) {
        char *slot = arena.free;
        arena.free = *(void **)slot;
        tp = slot + arena.tp_off;
    } else if (arena.used < arena.nslots) {
        if (arena.used == arena.written && write_batch() != 0 && arena.used == arena.written) {
            runtime_unlock(&arena.lock); /* cannot write more entries: the cap is reached */
            return NULL;
        }
        tp = slot_tp(arena.used++);
    }
    if (tp && ++arena.live > arena.peak)
        arena.peak = arena.live;
    runtime_unlock(&arena.lock);
    if (tp) /* a used slot may hold anything; a fresh one is zero already, cheap to redo */
        memset(tp - arena.below, 0, arena.below + arena.tcb_size);
    return tp;
}

void ldt_tcb_free(void *tcb)
{
    GOSHIM_ASSERT(ldt_owns(tcb));
    char *slot = arena.base + (((uintptr_t)tcb - ldt_arena_lo) >> ldt_slot_shift << ldt_slot_shift);
    GOSHIM_ASSERT(slot + arena.tp_off == tcb);
    runtime_lock(&arena.lock);
    *(void **)slot = arena.free;
    arena.free = slot;
    arena.live--;
    runtime_unlock(&arena.lock);
}

void ldt_get_stats(struct ldt_stats *out)
{
    runtime_lock(&arena.lock);
    out->slots = arena.nslots;
    out->live = arena.live;
    out->peak = arena.peak;
    out->entries = arena.written;
    runtime_unlock(&arena.lock);
}

void ldt_fork_child(void)
{
    FORK_SET(arena.lock.key, 0);
}
