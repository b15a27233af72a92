/*
 * prog_jit_spin: can a thread spinning in code generated at run time
 * (no unwind information, in an anonymous executable mapping, as a JIT's
 * is) stop another thread from running?
 *
 *   prog_jit_spin [UNITS]      (default 200)
 *
 * The program writes a small spin loop into an mmap'ed page, makes it
 * executable and calls it from a "jit" thread: the loop spins until a
 * word becomes non-zero. A "worker" thread does UNITS units of arithmetic
 * (each with one mutex lock and unlock) and then sets the word. Prints
 *   jit thread stopped after the worker's N units
 * and exits 0 (1 on a usage error or a failed call).
 *
 * Natively the kernel runs both. Under goshim with one P the worker runs
 * only if the spinner is switched out or its P handed to another OS
 * thread: its frames cannot be walked, so preemption must not be the
 * only way out. main makes the worker only once the JIT thread is about to
 * spin (yielding meanwhile): made at once, the worker could run first and
 * finish before the spinner ever spun.
 */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "prog_check.h"

static volatile uint32_t word;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long units = 200;
static long done_units;
typedef void (*spin_fn)(volatile uint32_t *);
static spin_fn jit;
static volatile uint32_t spinning; /* the JIT thread is about to call the loop */

/* x86-64: 1: mov (%rdi),%eax; test %eax,%eax; jz 1b; ret
 * (the loop body a JIT emits for "while (!*p);", frameless, no CFI). */
static const unsigned char code[] = {0x8b, 0x07, 0x85, 0xc0, 0x74, 0xfa, 0xc3};

static void *jit_thread(void *arg)
{
    (void)arg;
    spinning = 1;
    jit(&word);
    return NULL;
}

static void *worker(void *arg)
{
    (void)arg;
    uint64_t x = 2463534242ULL;
    for (long i = 0; i < units; i++) {
        x = xorshift_work(x, 100000);
        EXPECT(pthread_mutex_lock(&lock), 0);
        done_units++;
        EXPECT(pthread_mutex_unlock(&lock), 0);
    }
    word = 1;
    return (void *)(uintptr_t)(x & 1);
}

int main(int argc, char **argv)
{
    if (argc > 2 || (argc == 2 && (units = atol(argv[1])) < 1)) {
        fprintf(stderr, "usage: prog_jit_spin [UNITS]\n");
        return 1;
    }
    void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(page != MAP_FAILED);
    memcpy(page, code, sizeof code);
    CHECK(mprotect(page, 4096, PROT_READ | PROT_EXEC) == 0);
    jit = (spin_fn)page;
    pthread_t j, w;
    EXPECT(pthread_create(&j, NULL, jit_thread, NULL), 0);
    while (!spinning)
        sched_yield();
    EXPECT(pthread_create(&w, NULL, worker, NULL), 0);
    EXPECT(pthread_join(w, NULL), 0);
    EXPECT(pthread_join(j, NULL), 0);
    printf("jit thread stopped after the worker's %ld units\n", done_units);
    return 0;
}
