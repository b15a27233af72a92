/*
 * Shared by the two TLS suites (tests/test_tls.c: what a TCB holds and how
 * it is reset, moved and destroyed; tests/test_tls_fs.c: how tls_init picks
 * the FS-base method, and a fresh TCB seen from inside in each method).
 * Three __thread variables with known initial values, full-mode tls_init,
 * run_in (a callback with another TCB installed), and inside_fn with its
 * struct inside: what a fresh or reset TCB looks like from inside.
 * Everything is static (inline) so each suite may use only part; each file
 * that includes this header gets its own copies of the variables.
 */
#ifndef GOSHIM_TESTS_TLS_HELPERS_H
#define GOSHIM_TESTS_TLS_HELPERS_H

#include <criterion/criterion.h>

#include "../sched/tls.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <resolv.h>
#include <sched.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static __thread int tls_int = 1234;
static __thread char tls_str[16] = "initial";
static __thread int tls_bss;

static inline void init_full(void)
{
    cr_assert_eq(tls_init(TLS_MODE_FULL, NULL, NULL), TLS_MODE_FULL);
}

/* run_in runs fn(arg) with tcb installed, lending it this thread's malloc state. */
static inline void run_in(void *tcb, void (*fn)(void *), void *arg)
{
    void *self = tls_self();
    tls_malloc_move(self, tcb);
    tls_call_with_fs(tcb, fn, arg);
    tls_malloc_move(tcb, self);
}

static inline uintptr_t fs_word(long off)
{
    uintptr_t v;
    __asm__ volatile("mov %%fs:(%1), %0" : "=r"(v) : "r"(off));
    return v;
}

/* What a fresh TCB looks like from inside. */
struct inside {
    void *tp, *self;
    int err0, *errp;
    int tint, tbss, *tintp;
    char tstr[16];
    int ctype_ok;
    char fmt[32], serr[64], sunk[64];
    int cpu_ok;
    struct __res_state *resp;
    uintptr_t stack_guard, ptr_guard, multi;
    int jumped;
};

static inline void inside_fn(void *arg)
{
    struct inside *r = arg;
    r->tp = tls_self();
    r->self = (void *)pthread_self();
    r->err0 = errno;
    r->errp = &errno;
    r->tint = tls_int;
    r->tbss = tls_bss;
    r->tintp = &tls_int;
    memcpy(r->tstr, tls_str, sizeof r->tstr);
    r->stack_guard = fs_word(0x28);
    r->ptr_guard = fs_word(0x30);
    r->multi = (uint32_t)fs_word(0x18);

    tls_thread_start();
    r->ctype_ok = isalpha('a') && !isalpha('1') && toupper('q') == 'Q' && isdigit('7');
    snprintf(r->fmt, sizeof r->fmt, "%d-%s-%.1f", 42, "x", 2.5);
    snprintf(r->serr, sizeof r->serr, "%s", strerror(EINVAL));
    snprintf(r->sunk, sizeof r->sunk, "%s", strerror(987654));
    /* sched_getcpu (rseq cpu_id = -2 -> vDSO) against the getcpu syscall; retry on migration. */
    for (int i = 0; i < 100 && !r->cpu_ok; i++) {
        unsigned c1 = ~0u;
        int s1 = sched_getcpu();
        syscall(SYS_getcpu, &c1, NULL, NULL);
        int s2 = sched_getcpu();
        r->cpu_ok = s1 >= 0 && s1 == (int)c1 && s2 == s1;
    }
    r->resp = __res_state();
    jmp_buf jb;
    if (setjmp(jb) == 0)
        longjmp(jb, 1);
    else
        r->jumped = 1;
    errno = 99;
    tls_int = 5;
    tls_thread_exit();
}

#endif
