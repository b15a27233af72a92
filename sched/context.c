/*
 * Initial frames for new contexts (the switch itself is in
 * context_x86_64_sysv_elf.S, whose header shows the frame layout).
 *
 * A new G inherits the creating thread's floating-point control state
 * (MXCSR, x87 control word), as a new POSIX thread does.
 *
 * Sanitizers must be told about every stack switch: ASan keeps per-stack
 * bookkeeping (fake stacks, the current stack's bounds) and TSan per-thread
 * state that belongs to a G here, so each G is a TSan fiber. These hooks
 * are the only sanitizer-specific code in the runtime.
 */
#include "context.h"

#include <string.h>

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef __SANITIZE_THREAD__
#include <sanitizer/tsan_interface.h>
#endif

void ctx_entry(void);

uint64_t ctx_fpctl(void)
{
    uint32_t mxcsr;
    uint16_t cw;
    __asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
    __asm__ volatile("fnstcw %0" : "=m"(cw));
    return mxcsr | ((uint64_t)cw << 32);
}

void ctx_init(struct gobuf *buf, void *hi, void (*fn)(void *), void *arg, uint64_t fpctl)
{
    uintptr_t *sp = (uintptr_t *)(((uintptr_t)hi & ~(uintptr_t)15) - 64);
    sp[0] = fpctl;
    sp[1] = 0;              /* r15 */
    sp[2] = 0;              /* r14 */
    sp[3] = (uintptr_t)arg; /* r13 */
    sp[4] = (uintptr_t)fn;  /* r12 */
    sp[5] = 0;              /* rbx */
    sp[6] = 0;              /* rbp */
    sp[7] = (uintptr_t)ctx_entry;
    buf->sp = (uintptr_t)sp;
}

void ctx_init_bare(struct gobuf *buf, void *hi, void (*fn)(void *), void *arg)
{
    uintptr_t *sp = (uintptr_t *)(((uintptr_t)hi & ~(uintptr_t)15) - 64);
    memset(sp, 0, 64);
    sp[2] = (uintptr_t)arg; /* r13 */
    sp[3] = (uintptr_t)fn;  /* r12 */
    sp[6] = (uintptr_t)ctx_entry;
    buf->sp = (uintptr_t)sp;
}

void san_switch_begin(void **from_fake, const void *to_bottom, size_t to_size, void *to_fiber)
{
#ifdef __SANITIZE_ADDRESS__
    __sanitizer_start_switch_fiber(from_fake, to_bottom, to_size);
#else
    (void)from_fake;
    (void)to_bottom;
    (void)to_size;
#endif
#ifdef __SANITIZE_THREAD__
    if (to_fiber)
        __tsan_switch_to_fiber(to_fiber, 0);
#else
    (void)to_fiber;
#endif
}

void san_switch_end(void *from_fake)
{
#ifdef __SANITIZE_ADDRESS__
    const void *bottom;
    size_t size;
    __sanitizer_finish_switch_fiber(from_fake, &bottom, &size);
#else
    (void)from_fake;
#endif
}

void *san_fiber_create(void)
{
#ifdef __SANITIZE_THREAD__
    return __tsan_create_fiber(0);
#else
    return NULL;
#endif
}

void *san_fiber_current(void)
{
#ifdef __SANITIZE_THREAD__
    return __tsan_get_current_fiber();
#else
    return NULL;
#endif
}

void san_fiber_destroy(void *fiber)
{
#ifdef __SANITIZE_THREAD__
    if (fiber)
        __tsan_destroy_fiber(fiber);
#else
    (void)fiber;
#endif
}
