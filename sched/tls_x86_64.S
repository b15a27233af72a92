/*
 * tls_call_with_fs for x86-64 System V, ELF, GNU as (contract in tls.h).
 *
 * Frame while fn runs (rsp 16-byte aligned at the call):
 *
 *   rbp+8   return address
 *   rbp+0   caller's rbp
 *   rbp-8   rbx   (unused slot, keeps alignment)
 *   rbp-16  r12   caller's thread pointer (%fs:0), restored afterwards
 *   rbp-24  r13   fn
 *   rbp-32  r14   arg
 *
 * The FS base changes only here, so no C frame ever runs with a thread
 * pointer other than the one it started with (the compiler caches TLS
 * addresses). wrfsbase is used only when tls_fs_method says the kernel
 * enabled it; otherwise (arch_prctl method, errno mode, before tls_init)
 * arch_prctl(ARCH_SET_FS). A failing arch_prctl leaves FS unchanged and
 * calls tls_setfs_failed, which throws.
 */

#include "setfs_x86_64.inc"

	.text

/* void tls_call_with_fs(void *tcb, void (*fn)(void *), void *arg) */
	.globl	tls_call_with_fs
	.hidden	tls_call_with_fs
	.type	tls_call_with_fs, @function
tls_call_with_fs:
	.cfi_startproc
	push	%rbp
	.cfi_def_cfa_offset 16
	.cfi_offset %rbp, -16
	mov	%rsp, %rbp
	.cfi_def_cfa_register %rbp
	push	%rbx
	push	%r12
	push	%r13
	push	%r14
	.cfi_offset %rbx, -24
	.cfi_offset %r12, -32
	.cfi_offset %r13, -40
	.cfi_offset %r14, -48
	mov	%fs:0, %r12
	mov	%rsi, %r13
	mov	%rdx, %r14
	SETFS
	mov	%r14, %rdi
	call	*%r13
	mov	%r12, %rdi
	SETFS
	pop	%r14
	pop	%r13
	pop	%r12
	pop	%rbx
	pop	%rbp
	.cfi_def_cfa %rsp, 8
	ret
	.cfi_endproc
	.size	tls_call_with_fs, .-tls_call_with_fs

	.section .note.GNU-stack,"",@progbits
