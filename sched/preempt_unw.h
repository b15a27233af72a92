/*
 * libunwind's safety walk (preempt_unw.c), for preempt.c: from the
 * registers the trampoline saved, in an address space of goshim's own.
 */
#ifndef GOSHIM_PREEMPT_UNW_H
#define GOSHIM_PREEMPT_UNW_H

#include <stdbool.h>
#include <stdint.h>

/* Load libunwind-x86_64.so.8 and make the address space (start-up):
 * false, and nothing changed, when it cannot be. */
bool unwalk_load(void);

/* Code was loaded or unloaded: what the cache knows may be stale. */
void unwalk_refresh(void);

/*
 * The trampoline's save area (preempt_x86_64.S): r15, r14, ..., r8, rbp,
 * rdi, rsi, rdx, rcx, rbx, rax, the flags, the interrupted RIP, then the
 * 128-byte red zone, then the interrupted stack.
 */
enum {
    UNWALK_R15,
    UNWALK_R14,
    UNWALK_R13,
    UNWALK_R12,
    UNWALK_R11,
    UNWALK_R10,
    UNWALK_R9,
    UNWALK_R8,
    UNWALK_RBP,
    UNWALK_RDI,
    UNWALK_RSI,
    UNWALK_RDX,
    UNWALK_RCX,
    UNWALK_RBX,
    UNWALK_RAX,
    UNWALK_FLAGS,
    UNWALK_RIP,
    UNWALK_RSP = UNWALK_RIP + 1 + 128 / 8, /* the interrupted RSP is this word's address */
};

/*
 * Walk the interrupted frames, from the one saved is the context of,
 * calling frame(arg, pc, exact) with each frame's PC (exact: the
 * interrupted one; else a return address) until it returns false or the
 * stack ends. A frame without unwind information (or one libunwind cannot
 * step) ends the walk: no frame guessed from frame pointers is reported.
 */
void unwalk(const uint64_t *saved, bool (*frame)(void *arg, uintptr_t pc, bool exact), void *arg);

#endif
