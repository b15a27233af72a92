/*
 * sched_checked_syscall for x86-64 System V, ELF, GNU as (contract in api.h).
 *
 * A system call made only while *word still holds seen. Between the check and the
 * syscall instruction a signal handler may run (a signal delivered in user mode) and move
 * *word on: then the call must not be made at all, yet the check has passed.
 * sched_checked_syscall_rewind, called after such a handler with the interrupted context,
 * moves the resume point back to the check when it lies in [check, insn]: the check then
 * fails and the call returns SCHED_SYSCALL_SIGNALLED instead of waiting in the kernel.
 * insn is in the range too: the kernel rewinds a call it restarts to its instruction.
 *
 * From the check on, everything the call needs is in registers the kernel and a handler
 * preserve (the number in rbx, word and seen in r12 and r13, the arguments in their
 * system-call registers; rax, rcx and r11 are scratch), so running it again from the
 * check is always safe. Frame: rbx, r12, r13 pushed; word at 32(%rsp), seen at 40(%rsp).
 */

	.text

/* long sched_checked_syscall(long nr, long a, long b, long c, long d, long e,
 *                            const uint32_t *word, uint32_t seen) */
	.globl	sched_checked_syscall
	.hidden	sched_checked_syscall
	.globl	sched_checked_syscall_check
	.hidden	sched_checked_syscall_check
	.globl	sched_checked_syscall_insn
	.hidden	sched_checked_syscall_insn
	.type	sched_checked_syscall, @function
sched_checked_syscall:
	.cfi_startproc
	push	%rbx
	.cfi_def_cfa_offset 16
	.cfi_offset %rbx, -16
	push	%r12
	.cfi_def_cfa_offset 24
	.cfi_offset %r12, -24
	push	%r13
	.cfi_def_cfa_offset 32
	.cfi_offset %r13, -32
	mov	%rdi, %rbx
	mov	32(%rsp), %r12
	mov	40(%rsp), %r13d
	mov	%rsi, %rdi
	mov	%rdx, %rsi
	mov	%rcx, %rdx
	mov	%r8, %r10
	mov	%r9, %r8
sched_checked_syscall_check:
	mov	(%r12), %eax
	cmp	%r13d, %eax
	jne	2f
	mov	%rbx, %rax
sched_checked_syscall_insn:
	syscall
1:
	pop	%r13
	.cfi_def_cfa_offset 24
	pop	%r12
	.cfi_def_cfa_offset 16
	pop	%rbx
	.cfi_def_cfa_offset 8
	ret
2:
	.cfi_def_cfa_offset 32
	movabs	$0x8000000000000001, %rax	/* SCHED_SYSCALL_SIGNALLED: LONG_MIN + 1 */
	jmp	1b
	.cfi_endproc
	.size	sched_checked_syscall, .-sched_checked_syscall

	.section .note.GNU-stack,"",@progbits
