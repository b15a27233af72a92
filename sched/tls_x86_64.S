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

#define TLS_FS_WRFSBASE 0
#define SYS_arch_prctl  158
#define ARCH_SET_FS     0x1002

	.text

/* Write the FS base from %rdi. Clobbers rax, rcx, r11, rsi, rdi. */
.macro TLS_SETFS
	cmpl	$TLS_FS_WRFSBASE, tls_fs_method(%rip)
	jne	91f
	wrfsbase %rdi
	jmp	92f
91:	mov	%rdi, %rsi
	mov	$ARCH_SET_FS, %edi
	mov	$SYS_arch_prctl, %eax
	syscall
	test	%rax, %rax
	jz	92f
	mov	%rax, %rdi
	call	tls_setfs_failed
92:
.endm

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
	TLS_SETFS
	mov	%r14, %rdi
	call	*%r13
	mov	%r12, %rdi
	TLS_SETFS
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
