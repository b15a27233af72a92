/*
 * Initial frames for new contexts (the switch itself is in
 * context_x86_64_sysv_elf.S, whose header shows the frame layout).
 *
 * A new G inherits the creating thread's floating-point control state
 * (MXCSR, x87 control word), as a new POSIX thread does.
 */
#include "context.h"

#include <string.h>

void ctx_entry(void);

void ctx_init(struct gobuf *buf, void *hi, void (*fn)(void *), void *arg)
{
    uintptr_t *sp = (uintptr_t *)(((uintptr_t)hi & ~(uintptr_t)15) - 64);
    uint32_t mxcsr;
    uint16_t cw;
    __asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
    __asm__ volatile("fnstcw %0" : "=m"(cw));
    sp[0] = mxcsr | ((uintptr_t)cw << 32);
    sp[1] = 0;                /* r15 */
    sp[2] = 0;                /* r14 */
    sp[3] = (uintptr_t)arg;   /* r13 */
    sp[4] = (uintptr_t)fn;    /* r12 */
    sp[5] = 0;                /* rbx */
    sp[6] = 0;                /* rbp */
    sp[7] = (uintptr_t)ctx_entry;
    buf->sp = (uintptr_t)sp;
}

void ctx_init_bare(struct gobuf *buf, void *hi, void (*fn)(void *), void *arg)
{
    uintptr_t *sp = (uintptr_t *)(((uintptr_t)hi & ~(uintptr_t)15) - 64);
    memset(sp, 0, 64);
    sp[2] = (uintptr_t)arg;   /* r13 */
    sp[3] = (uintptr_t)fn;    /* r12 */
    sp[6] = (uintptr_t)ctx_entry;
    buf->sp = (uintptr_t)sp;
}
