/*
 * vfork(): the child runs on the parent's memory, on the parent's stack and
 * TCB and on its M's GS base, until it calls execve or _exit; the parent's
 * thread is suspended by the kernel meanwhile. Every interposer the child
 * calls (close, dup2, sigaction, sigprocmask... - what Python's
 * _posixsubprocess, glib and shells call between vfork and exec) must
 * therefore pass straight to the kernel: a close that went through the
 * netpoller woke the parent's readers of that fd with EBADF, although only
 * the child's copy of the fd was closed.
 *
 * The mechanism: an interposer written in assembly (a C function cannot
 * return twice on one stack) marks the calling thread's TCB, hands the P
 * off as for any call that blocks (entersyscallblock: other Ms go on
 * running the parent's other threads; the parent G waits in the kernel as
 * Gsyscall), keeps its return address in a register across the system
 * call as glibc's own vfork does (the child's returns overwrite that stack
 * slot), and in the parent clears the mark and takes a P back
 * (exitsyscall). The mark, goshim_vforked, is a __thread variable: in the
 * child it reads as set, because the child runs on that very TCB, and
 * goshim_on (shim.h), which every interposer tests, is false there, as
 * for a thread goshim does not run. No other code runs on that TCB in the
 * meantime (the parent thread is suspended, the G cannot migrate while
 * Gsyscall), so the word needs no atomics. The child writes nothing of the
 * runtime's: its interposers do not look at it, and signal handlers that
 * goshim installs pass straight to the program's handler there.
 *
 * Rejected: vfork as fork. It is simpler (the child has its own memory, so
 * whatever the interposers do there is harmless) but it costs what vfork
 * exists to avoid - a copy of the page tables of a process that may be
 * large (fork of a 1 GiB Python is milliseconds, vfork microseconds), plus
 * a runtime restart in the child (pthread_atfork handlers, a sysmon
 * thread) for a process that is about to exec - and it breaks the programs
 * that rely on vfork's sharing: a child that reports a failed exec by
 * writing the parent's memory (errno, a status word), and a parent that
 * relies on being suspended until the exec.
 *
 * posix_spawn, system and popen do not call vfork: glibc's clone with
 * CLONE_VM|CLONE_VFORK runs a child that calls only glibc's internal
 * functions, never an interposer, so they stay as they are.
 */
#include <errno.h>
#include <stdbool.h>
#include <sys/syscall.h>

#include "shim/shim.h"

#define STR_(x)       #x
#define GOSHIM_STR(x) STR_(x)

__thread bool goshim_vforked __attribute__((tls_model("initial-exec")));

/* Called by the vfork interposer before the system call: 1 if the P was handed off. */
__attribute__((used)) int goshim_vfork_enter(void);
__attribute__((used)) long goshim_vfork_leave(long r, int entered);

int goshim_vfork_enter(void)
{
    bool on_g = goshim_active(); /* takes back a P handed off while it stayed away */
    goshim_vforked = true;       /* also on threads goshim does not run: their child's calls */
    return on_g && entersyscallblock() ? 1 : 0;
}

/* In the parent (or on failure): the mark goes, the G takes a P back; errno as vfork's. */
long goshim_vfork_leave(long r, int entered)
{
    goshim_vforked = false;
    if (entered)
        exitsyscall();
    if (r < 0) {
        errno = (int)-r;
        return -1;
    }
    return r;
}

/*
 * vfork and glibc's alias __vfork. The return address is popped into %rdi
 * (kept by the kernel across the system call, in the parent as in the
 * child) and pushed back after it; %esi carries goshim_vfork_enter's
 * answer. The child (%rax 0) returns at once, touching nothing.
 */
__asm__(".text\n"
        ".globl vfork\n"
        ".type vfork, @function\n"
        ".globl __vfork\n"
        ".type __vfork, @function\n"
        ".p2align 4\n"
        "vfork:\n"
        "__vfork:\n"
        "    .cfi_startproc\n"
        "    endbr64\n"
        "    sub $8, %rsp\n"
        "    .cfi_adjust_cfa_offset 8\n"
        "    call goshim_vfork_enter\n"
        "    add $8, %rsp\n"
        "    .cfi_adjust_cfa_offset -8\n"
        "    mov %eax, %esi\n"
        "    pop %rdi\n"
        "    .cfi_adjust_cfa_offset -8\n"
        "    .cfi_register rip, rdi\n"
        "    mov $" GOSHIM_STR(SYS_vfork) ", %eax\n"
                                          "    syscall\n"
                                          "    push %rdi\n"
                                          "    .cfi_adjust_cfa_offset 8\n"
                                          "    .cfi_rel_offset rip, 0\n"
                                          "    test %rax, %rax\n"
                                          "    jz 1f\n"
                                          "    mov %rax, %rdi\n"
                                          "    sub $8, %rsp\n"
                                          "    .cfi_adjust_cfa_offset 8\n"
                                          "    call goshim_vfork_leave\n"
                                          "    add $8, %rsp\n"
                                          "    .cfi_adjust_cfa_offset -8\n"
                                          "1:  ret\n"
                                          "    .cfi_endproc\n"
                                          ".size vfork, .-vfork\n"
                                          ".size __vfork, .-__vfork\n");
