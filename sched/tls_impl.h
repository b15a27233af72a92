/*
 * What the two files of per-G TLS share; nothing outside them includes this
 * (the contract for the rest of sched/ is tls.h):
 *
 *   tls.c        making, resetting and ending the TCBs (the DTV, the fields
 *                of struct pthread a new thread needs), from what tls_init
 *                learnt;
 *   tls_probe.c  tls_init: the FS method, and the layout of struct pthread
 *                and of libc's static TLS, found by lookups and probes.
 */
#ifndef GOSHIM_TLS_IMPL_H
#define GOSHIM_TLS_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* x86-64 TLS ABI: tcbhead_t, the first bytes of struct pthread. */
#define TCB_OFF_TCB        0x00
#define TCB_OFF_DTV        0x08
#define TCB_OFF_SELF       0x10
#define TCB_OFF_MULTI      0x18 /* int multiple_threads */
#define TCB_OFF_STACKGUARD 0x28
#define TCB_OFF_PTRGUARD   0x30
#define TCB_OFF_FEATURE_1  0x48 /* unsigned int, CET */

/*
 * Everything tls_init learns. Written only by tls_init (before any TCB
 * exists), read-only afterwards, so no lock.
 */
struct tlsinfo {
    void *(*allocate_tls)(void *mem);
    void (*deallocate_tls)(void *tcb, bool dealloc_tcb);
    /* _dl_allocate_tls_init and the flag a new thread gets (its meaning
     * flipped across glibc versions: init_flag_of); NULL when it could not
     * be shown to work. */
    void *(*allocate_tls_init)(void *tcb, bool flag);
    bool init_flag;
    void (*ctype_init)(void);
    void (*call_tls_dtors)(void);

    size_t sizeof_pthread;
    size_t static_size, static_align;

    /* Offsets from the thread pointer into struct pthread. */
    size_t tid_off, list_off, specific_off, specific_n, specific_1st_off;
    size_t robust_head_off; /* robust_prev sits just before it */
    long futex_offset;      /* robust_head.futex_offset as glibc sets it */
    size_t stackblock_off;  /* stackblock, stackblock_size, guardsize, reported_guardsize */
    size_t res_off;
    size_t tls_state_off[2]; /* strerror and strsignal buffers */
    ptrdiff_t rseq_cpu_off;  /* rseq_area.cpu_id */

    /* Offsets below the thread pointer (address = tp - off). */
    size_t resp_off; /* libc's __resp */
    size_t libc_tls_off, libc_tls_size;
    int nmalloc;          /* 0 or 2 */
    size_t malloc_off[2]; /* tcache and thread_arena (in address order) */
    int arena_word;       /* 1 + the index of thread_arena; 0: not told apart (tls_probe.c) */

    uintptr_t stack_guard, pointer_guard;
    uint32_t feature_1;
};
extern struct tlsinfo tls_info;

#define WORD(p, off) (*(uintptr_t *)((char *)(p) + (off)))

/* Free a TCB's dynamic TLS blocks and zero its DTV (tls.c). */
void tls_dtv_clear(char *tcb);

#endif
