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
	.globl	ctx_mcall
	.hidden	ctx_mcall
	.type	ctx_mcall, @function
ctx_mcall:
	.cfi_startproc
	SAVE_FRAME
	mov	%rsp, (%rdi)
	mov	%rcx, %rsp
	mov	%rdx, %rdi
	xor	%ebp, %ebp
	call	*%rsi
	ud2
	.cfi_endproc
	.size	ctx_mcall, .-ctx_mcall

/*
 * void ctx_gogo(struct gobuf *buf)   -- never returns
 * Resume the context saved in *buf. The current context is abandoned.
 */
	.globl	ctx_gogo
	.hidden	ctx_gogo
	.type	ctx_gogo, @function
ctx_gogo:
	.cfi_startproc
	mov	(%rdi), %rsp
	RESTORE_FRAME_RET
	.cfi_endproc
	.size	ctx_gogo, .-ctx_gogo

/*
 * void ctx_setfs(void *tcb)
 * Install tcb as the FS base. Only for code that touches no thread-local
 * storage afterwards in the same function (the scheduler on g0).
 */
	.globl	ctx_setfs
	.hidden	ctx_setfs
	.type	ctx_setfs, @function
ctx_setfs:
	.cfi_startproc
	SETFS
	ret
	.cfi_endproc
	.size	ctx_setfs, .-ctx_setfs

/*
 * void ctx_switch(struct gobuf *save, struct gobuf *to)
 * Suspend into *save and resume *to: the direct switch (benchmarks, tests).
 */
	.globl	ctx_switch
	.hidden	ctx_switch
	.type	ctx_switch, @function
ctx_switch:
	.cfi_startproc
	SAVE_FRAME
	mov	%rsp, (%rdi)
	mov	(%rsi), %rsp
	RESTORE_FRAME_RET
	.cfi_endproc
	.size	ctx_switch, .-ctx_switch

/*
 * void ctx_switch_fs(struct gobuf *save, struct gobuf *to, void *tcb)
 * ctx_switch plus an FS base write (the cost floor of a task switch).
 */
	.globl	ctx_switch_fs
	.hidden	ctx_switch_fs
	.type	ctx_switch_fs, @function
ctx_switch_fs:
	.cfi_startproc
	SAVE_FRAME
	mov	%rsp, (%rdi)
	mov	%rsi, %r12
	mov	%rdx, %rdi
	SETFS
	mov	(%r12), %rsp
	RESTORE_FRAME_RET
	.cfi_endproc
	.size	ctx_switch_fs, .-ctx_switch_fs

/*
 * void ctx_switch_bare(struct gobuf *save, struct gobuf *to)
 * The floor: callee-saved general registers and SP only, no MXCSR/x87.
 * Frames made by it are resumed only by it.
 */
	.globl	ctx_switch_bare
	.hidden	ctx_switch_bare
	.type	ctx_switch_bare, @function
ctx_switch_bare:
	.cfi_startproc
	SAVE_BARE
	mov	%rsp, (%rdi)
	mov	(%rsi), %rsp
	RESTORE_BARE_RET
	.cfi_endproc
	.size	ctx_switch_bare, .-ctx_switch_bare

/*
 * void ctx_switch_bare_fs(struct gobuf *save, struct gobuf *to, void *tcb)
 */
	.globl	ctx_switch_bare_fs
	.hidden	ctx_switch_bare_fs
	.type	ctx_switch_bare_fs, @function
ctx_switch_bare_fs:
	.cfi_startproc
	SAVE_BARE
	mov	%rsp, (%rdi)
	mov	%rsi, %r12
	mov	%rdx, %rdi
	SETFS
	mov	(%r12), %rsp
	RESTORE_BARE_RET
	.cfi_endproc
	.size	ctx_switch_bare_fs, .-ctx_switch_bare_fs

/*
 * ctx_entry: where a new context starts. ctx_init leaves the entry
 * function in r12 and its argument in r13. The return address is marked
 * undefined so that unwinders (gdb, libunwind) stop here.
 */
	.globl	ctx_entry
	.hidden	ctx_entry
	.type	ctx_entry, @function
ctx_entry:
	.cfi_startproc
	.cfi_undefined rip
	xor	%ebp, %ebp
	mov	%r13, %rdi
	and	$-16, %rsp
	call	*%r12
	ud2
	.cfi_endproc
	.size	ctx_entry, .-ctx_entry

	.section .note.GNU-stack,"",@progbits
