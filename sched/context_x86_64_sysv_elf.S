/*
 * Context switching for x86-64 System V, ELF, GNU as.
 *
 * A suspended context is a stack holding this frame, with its address saved
 * in a struct gobuf (offset 0 of struct g):
 *
 *   sp+0   MXCSR (4 bytes) | x87 control word (2 bytes) | pad
 *   sp+8   r15
 *   sp+16  r14
 *   sp+24  r13
 *   sp+32  r12
 *   sp+40  rbx
 *   sp+48  rbp
 *   sp+56  return address (where the context resumes)
 *
 * Only the registers the ABI makes callee-saved are kept: every switch is a
 * function call from C, so the caller already assumes the rest clobbered.
 * MXCSR control bits and the x87 control word are callee-saved too.
 *
 * The FS base (the task's glibc TCB) is written with wrfsbase when the
 * kernel enabled FSGSBASE, else with arch_prctl(ARCH_SET_FS); tls.c decides
 * (tls_fs_method; the SETFS macro). FS changes here and in tls_x86_64.S only.
 */

#include "setfs_x86_64.inc"
#include "func_x86_64.inc"

	.text


.macro SAVE_FRAME
	push	%rbp
	push	%rbx
	push	%r12
	push	%r13
	push	%r14
	push	%r15
	sub	$8, %rsp
	stmxcsr	(%rsp)
	fnstcw	4(%rsp)
.endm

/* The floor's frame: callee-saved general registers only. */
.macro SAVE_BARE
	push	%rbp
	push	%rbx
	push	%r12
	push	%r13
	push	%r14
	push	%r15
.endm

.macro RESTORE_BARE_RET
	pop	%r15
	pop	%r14
	pop	%r13
	pop	%r12
	pop	%rbx
	pop	%rbp
	ret
.endm

.macro RESTORE_FRAME_RET
	ldmxcsr	(%rsp)
	fldcw	4(%rsp)
	add	$8, %rsp
	pop	%r15
	pop	%r14
	pop	%r13
	pop	%r12
	pop	%rbx
	pop	%rbp
	ret
.endm

/*
 * void ctx_mcall(struct gobuf *save, void (*fn)(void *), void *arg, uintptr_t sp)
 * Suspend the current context into *save, switch to stack sp and call
 * fn(arg). fn must not return.
 */
	FUNC	ctx_mcall
	SAVE_FRAME
	mov	%rsp, (%rdi)
	mov	%rcx, %rsp
	mov	%rdx, %rdi
	xor	%ebp, %ebp
	call	*%rsi
	ud2
	ENDFUNC	ctx_mcall

/*
 * void ctx_gogo(struct gobuf *buf)   -- never returns
 * Resume the context saved in *buf. The current context is abandoned.
 */
	FUNC	ctx_gogo
	mov	(%rdi), %rsp
	RESTORE_FRAME_RET
	ENDFUNC	ctx_gogo

/*
 * void ctx_setfs(void *tcb)
 * Install tcb as the FS base. Only for code that touches no thread-local
 * storage afterwards in the same function (the scheduler on g0).
 */
	FUNC	ctx_setfs
	SETFS
	ret
	ENDFUNC	ctx_setfs

/*
 * void ctx_switch(struct gobuf *save, struct gobuf *to)
 * Suspend into *save and resume *to: the direct switch (benchmarks, tests).
 */
	FUNC	ctx_switch
	SAVE_FRAME
	mov	%rsp, (%rdi)
	mov	(%rsi), %rsp
	RESTORE_FRAME_RET
	ENDFUNC	ctx_switch

/*
 * void ctx_switch_fs(struct gobuf *save, struct gobuf *to, void *tcb)
 * ctx_switch plus an FS base write (the cost floor of a task switch).
 */
	FUNC	ctx_switch_fs
	SAVE_FRAME
	mov	%rsp, (%rdi)
	mov	%rsi, %r12
	mov	%rdx, %rdi
	SETFS
	mov	(%r12), %rsp
	RESTORE_FRAME_RET
	ENDFUNC	ctx_switch_fs

/*
 * void ctx_switch_bare(struct gobuf *save, struct gobuf *to)
 * The floor: callee-saved general registers and SP only, no MXCSR/x87.
 * Frames made by it are resumed only by it.
 */
	FUNC	ctx_switch_bare
	SAVE_BARE
	mov	%rsp, (%rdi)
	mov	(%rsi), %rsp
	RESTORE_BARE_RET
	ENDFUNC	ctx_switch_bare

/*
 * void ctx_switch_bare_fs(struct gobuf *save, struct gobuf *to, void *tcb)
 */
	FUNC	ctx_switch_bare_fs
	SAVE_BARE
	mov	%rsp, (%rdi)
	mov	%rsi, %r12
	mov	%rdx, %rdi
	SETFS
	mov	(%r12), %rsp
	RESTORE_BARE_RET
	ENDFUNC	ctx_switch_bare_fs

/*
 * ctx_entry: where a new context starts. ctx_init leaves the entry
 * function in r12 and its argument in r13. The return address is marked
 * undefined so that unwinders (gdb, libunwind) stop here.
 */
	FUNC	ctx_entry
	.cfi_undefined rip
	xor	%ebp, %ebp
	mov	%r13, %rdi
	and	$-16, %rsp
	call	*%r12
	ud2
	ENDFUNC	ctx_entry

	.section .note.GNU-stack,"",@progbits
