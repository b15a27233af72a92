/*
 * Threads that spin in a function whose unwind info lies: it says the
 * caller's frame is at %rbx + 16, and %rbx holds a small number there, so
 * an unwinder that trusts it reads unmapped memory (as V8's code sent
 * libgcc's in node's main thread). goshim's preemption walks such a
 * stack: the fault must refuse that preemption, not kill the program.
 *
 *   prog_preempt_badcfi [MS]   (default 300: how long each thread spins)
 *
 * Two threads spin MS milliseconds each (by the clock, so both also run
 * at one P); prints "bad cfi: 2 threads spun" and exits 0.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "prog_check.h"

/* bad_cfi_spin(n): n PAUSEs, with CFI that puts the CFA at %rbx + 16 and %rbx = 16. */
void bad_cfi_spin(long n);
__asm__(".text\n"
        ".globl bad_cfi_spin\n"
        ".type bad_cfi_spin, @function\n"
        "bad_cfi_spin:\n"
        ".cfi_startproc\n"
        "    push %rbx\n"
        "    mov $16, %rbx\n"
        ".cfi_def_cfa %rbx, 16\n"
        "1:  pause\n"
        "    dec %rdi\n"
        "    jnz 1b\n"
        "    pop %rbx\n"
        ".cfi_def_cfa %rsp, 8\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size bad_cfi_spin, .-bad_cfi_spin\n");

static long ms = 300;

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void *spinner(void *arg)
{
    (void)arg;
    long end = now_ms() + ms;
    while (now_ms() < end)
        bad_cfi_spin(200000);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        ms = atol(argv[1]);
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        EXPECT(pthread_create(&t[i], NULL, spinner, NULL), 0);
    for (int i = 0; i < 2; i++)
        EXPECT(pthread_join(t[i], NULL), 0);
    printf("bad cfi: 2 threads spun\n");
    return 0;
}
