/*
 * Async preemption entry (x86-64 System V, ELF, GNU as); see preempt.c.
 *
 * The signal handler never writes to the interrupted stack (the kernel's
 * signal frame lies right below the red zone there, and an 8-byte store at
 * RSP-136 can hit its FP_XSTATE_MAGIC2). It stores the interrupted RIP in
 * m->pend_rip (%gs:8), lowers the saved RSP by the 128-byte red zone and
 * points the saved RIP at goshim_preempt_entry. After sigreturn that entry
 * pushes that RIP below the red zone without touching the flags, and the
 * trampoline finds, at its entry:
 *
 *   RSP+0     the interrupted RIP          (= interrupted RSP - 136)
 *   RSP+8     the interrupted red zone     (128 bytes, never touched)
 *   RSP+136   the interrupted stack        (CFA = interrupted RSP)
 *
 * It saves flags and all 15 general registers (with CFI for each, so that
 * an unwinder steps through it into the interrupted frames with their true
 * values: .cfi_signal_frame makes it look the next frame up at its IP, not
 * IP-1), clears DF, saves the whole extended state with xsave64 on a
 * 64-byte aligned area (header zeroed: xrstor faults on garbage), empties
 * the x87 stack (the interrupted code may have been using it, and the Gs
 * that run meanwhile start or resume at calls, where it must be empty), calls
 * goshim_preempt_point, which may switch the G out and back in on another
 * M, then restores everything and returns with `ret $128`, which pops the
 * RIP and skips the red zone: the interrupted RSP, exactly.
 */

#include "func_x86_64.inc"

	.text


/* Never on a stack anyone walks: its 6 instructions run once per injection. */
	FUNC	goshim_preempt_entry
	.cfi_undefined rip
	lea	-8(%rsp), %rsp
	push	%rax
	mov	%gs:8, %rax		/* m->pend_rip */
	mov	%rax, 8(%rsp)
	pop	%rax
	jmp	goshim_preempt_tramp
	ENDFUNC	goshim_preempt_entry

.macro PUSHREG reg
	push	%\reg
	.cfi_adjust_cfa_offset 8
	.cfi_rel_offset \reg, 0
.endm

.macro POPREG reg
	pop	%\reg
	.cfi_adjust_cfa_offset -8
	.cfi_restore \reg
.endm

	FUNC	goshim_preempt_tramp
	.cfi_signal_frame
	.cfi_def_cfa rsp, 136
	.cfi_offset rip, -136
	pushfq
	.cfi_adjust_cfa_offset 8
	PUSHREG	rax
	PUSHREG	rbx
	PUSHREG	rcx
	PUSHREG	rdx
	PUSHREG	rsi
	PUSHREG	rdi
	PUSHREG	rbp
	PUSHREG	r8
	PUSHREG	r9
	PUSHREG	r10
	PUSHREG	r11
	PUSHREG	r12
	PUSHREG	r13
	PUSHREG	r14
	PUSHREG	r15
	mov	%rsp, %rbp
	.cfi_def_cfa_register rbp
	cld
	and	$-64, %rsp
	sub	goshim_xsave_size(%rip), %rsp
	xor	%eax, %eax
	mov	%rax, 512(%rsp)		/* the 64-byte XSAVE header */
	mov	%rax, 520(%rsp)
	mov	%rax, 528(%rsp)
	mov	%rax, 536(%rsp)
	mov	%rax, 544(%rsp)
	mov	%rax, 552(%rsp)
	mov	%rax, 560(%rsp)
	mov	%rax, 568(%rsp)
	mov	$-1, %eax
	mov	$-1, %edx
	xsave64	(%rsp)
	fninit				/* an empty x87 stack, as C calls expect (the state is saved) */
	mov	%rbp, %rdi		/* the save area: the interrupted registers */
	call	goshim_preempt_point
	mov	$-1, %eax
	mov	$-1, %edx
	xrstor64 (%rsp)
	mov	%rbp, %rsp
	.cfi_def_cfa_register rsp
	POPREG	r15
	POPREG	r14
	POPREG	r13
	POPREG	r12
	POPREG	r11
	POPREG	r10
	POPREG	r9
	POPREG	r8
	POPREG	rbp
	POPREG	rdi
	POPREG	rsi
	POPREG	rdx
	POPREG	rcx
	POPREG	rbx
	POPREG	rax
	popfq
	.cfi_adjust_cfa_offset -8
	ret	$128
	ENDFUNC	goshim_preempt_tramp
	.globl	goshim_preempt_tramp_end
	.hidden	goshim_preempt_tramp_end
goshim_preempt_tramp_end:

	.section .note.GNU-stack,"",@progbits
