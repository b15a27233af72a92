/*
 * Context switching primitives (context_x86_64_sysv_elf.S, context.c).
 */
#ifndef GOSHIM_CONTEXT_H
#define GOSHIM_CONTEXT_H

#include <stddef.h>
#include <stdint.h>

/* A suspended context: the stack pointer of its saved frame (see the .S). */
struct gobuf {
    uintptr_t sp;
};

/* Prepare buf so that resuming it calls fn(arg) on the stack below hi. */
void ctx_init(struct gobuf *buf, void *hi, void (*fn)(void *), void *arg, uint64_t fpctl);
/* The calling thread's MXCSR and x87 control word, as ctx_init wants them. */
uint64_t ctx_fpctl(void);

void ctx_mcall(struct gobuf *save, void (*fn)(void *), void *arg, uintptr_t sp);
__attribute__((noreturn)) void ctx_gogo(struct gobuf *buf);
void ctx_setfs(void *tcb);
void ctx_switch(struct gobuf *save, struct gobuf *to);
void ctx_switch_fs(struct gobuf *save, struct gobuf *to, void *tcb);
void ctx_switch_bare(struct gobuf *save, struct gobuf *to);
void ctx_switch_bare_fs(struct gobuf *save, struct gobuf *to, void *tcb);
/* Bare frames: like ctx_init, for contexts resumed by ctx_switch_bare*. */
void ctx_init_bare(struct gobuf *buf, void *hi, void (*fn)(void *), void *arg);

/*
 * Sanitizer fiber hooks (no-ops in normal builds). A stack switch is
 * announced with san_switch_begin(&from_fake, to_bottom, to_size, to_fiber)
 * right before it and completed with san_switch_end(from_fake) right after
 * arriving. from_fake NULL means the context being left is never resumed.
 */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define GOSHIM_SAN 1
#endif
void san_switch_begin(void **from_fake, const void *to_bottom, size_t to_size, void *to_fiber);
void san_switch_end(void *from_fake);
void *san_fiber_create(void);
void *san_fiber_current(void);
void san_fiber_destroy(void *fiber);

#endif
