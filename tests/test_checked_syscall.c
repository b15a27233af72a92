/*
 * sched_checked_syscall (sched/checked_syscall_x86_64.S): a system call made only while a
 * word holds the value the caller saw. A signal handler that moves the word on after the
 * check and before the kernel's entry is what it is for (a blocking wrapper's pause waited
 * for ever when its SIGALRM's handler ran there): the single-step trap places one exactly
 * there, at every instruction from the check to the syscall instruction in turn.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "sched/sched.h"

extern const char sched_checked_syscall_check[], sched_checked_syscall_insn[];

static uint32_t word;
static volatile int steps_left; /* instructions of sched_checked_syscall to step first */
static volatile int acted;      /* the handler moved the word on (where: acted_at) */
static volatile uintptr_t acted_at;
static volatile int rewind_on = 1;

#define EFLAGS_TF 0x100

/* SIGTRAP after each instruction while TF is set: inside sched_checked_syscall's window,
 * once steps_left reaches 0, it does what a program's handler does to a wrapper (a handler
 * ran: shim_handler_ran moves the counter) and stops stepping. */
static void on_trap(int sig, siginfo_t *si, void *ucv)
{
    (void)sig;
    (void)si;
    ucontext_t *uc = ucv;
    uintptr_t ip = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
    bool in =
        ip >= (uintptr_t)sched_checked_syscall_check && ip <= (uintptr_t)sched_checked_syscall_insn;
    if (!in || steps_left-- > 0)
        return;
    word++;
    acted = 1;
    acted_at = ip;
    uc->uc_mcontext.gregs[REG_EFL] &= ~EFLAGS_TF;
    if (rewind_on)
        sched_checked_syscall_rewind(uc);
}

static void install_trap(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_trap;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    cr_assert_eq(sigaction(SIGTRAP, &sa, NULL), 0);
}

/* A 300 ms nanosleep through sched_checked_syscall, single-stepped: the handler acts after
 * `steps` instructions of the window. */
static long stepped_sleep(int steps)
{
    static struct timespec ts = {0, 300 * 1000 * 1000};
    steps_left = steps;
    acted = 0;
    uint32_t seen = word;
    __asm__ volatile("pushfq; orq %0, (%%rsp); popfq" ::"i"(EFLAGS_TF) : "memory", "cc");
    long r = sched_checked_syscall(SYS_nanosleep, (long)&ts, 0, 0, 0, 0, &word, seen);
    __asm__ volatile("pushfq; andq %0, (%%rsp); popfq" ::"i"(~EFLAGS_TF) : "memory", "cc");
    return r;
}

Test(checked_syscall, makes_the_call_while_the_word_holds)
{
    uint32_t w = 7;
    cr_assert_eq(sched_checked_syscall(SYS_getpid, 0, 0, 0, 0, 0, &w, 7), getpid());
    cr_assert_eq(sched_checked_syscall(SYS_close, -1, 0, 0, 0, 0, &w, 7), -EBADF);
}

Test(checked_syscall, does_not_make_it_once_the_word_moved)
{
    uint32_t w = 8;
    struct timespec ts = {5, 0}; /* were it made, the test would take 5 s and fail */
    cr_assert_eq(sched_checked_syscall(SYS_nanosleep, (long)&ts, 0, 0, 0, 0, &w, 7),
                 SCHED_SYSCALL_SIGNALLED);
}

/* At each instruction of the window in turn, a handler's move is seen: the call returns
 * SCHED_SYSCALL_SIGNALLED at once instead of sleeping. */
Test(checked_syscall, a_handler_in_the_window_stops_the_call, .timeout = 30)
{
#ifdef __SANITIZE_THREAD__
    cr_skip("TSan defers signal handlers to its own safe points: no single-stepping");
#endif
    install_trap();
    int window = 0;
    for (int steps = 0; steps < 16; steps++) {
        long r = stepped_sleep(steps);
        if (!acted)
            break; /* stepped past the syscall instruction: the window is done */
        window++;
        cr_assert_eq(r, SCHED_SYSCALL_SIGNALLED,
                     "a handler at %#lx (step %d of the window) did not stop the call: %ld",
                     (unsigned long)(acted_at - (uintptr_t)sched_checked_syscall_check), steps, r);
    }
    cr_assert_geq(window, 4, "only %d instructions stepped in the window", window);
}

/* Without the rewind, the same handler at the syscall instruction does not stop it: the
 * call sleeps its 300 ms and returns 0 (what the wrappers did). */
Test(checked_syscall, without_the_rewind_the_call_is_made, .timeout = 30)
{
#ifdef __SANITIZE_THREAD__
    cr_skip("TSan defers signal handlers to its own safe points: no single-stepping");
#endif
    install_trap();
    rewind_on = 0;
    int last = -1;
    for (int steps = 0; steps < 16; steps++) {
        stepped_sleep(steps);
        if (!acted)
            break;
        last = steps;
    }
    cr_assert_geq(last, 0);
    long r = stepped_sleep(last);
    cr_assert(acted && acted_at == (uintptr_t)sched_checked_syscall_insn, "acted at %#lx",
              (unsigned long)acted_at);
    cr_assert_eq(r, 0, "the call returned %ld", r);
}
