/*
 * The C library as the runtime must see it: glibc's own functions, past
 * goshim's interposers.
 *
 * Inside libgoshim.so a call to sigaction() or pthread_self() binds to the
 * definition the shim exports, not to glibc's: the runtime would record
 * its own handlers as the application's, take the shim's thread record for
 * a pthread_t, or re-enter a wrapper from the scheduler (docs/design.md,
 * rule 20: sched/ never calls an interposed name). Each function here is glibc's, looked up
 * with dlsym(RTLD_NEXT) from this object, once: in libgoshim.so the
 * definition after it (glibc's, or another preloaded library's), in a unit
 * test that links sched/ alone, glibc's as well. libc_init, early in
 * start-up, looks them all up, so that later calls (in a signal handler,
 * in a fork child) never run the dynamic linker; a call before it looks up
 * its own. What is a plain system call (open, read, close, fcntl) the
 * runtime makes with rt_syscall instead.
 */
#ifndef GOSHIM_LIBC_H
#define GOSHIM_LIBC_H

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <time.h>
#include <unwind.h>

/* Look every function up now (idempotent; the first caller pays). */
void libc_init(void);

int libc_sigaction(int sig, const struct sigaction *act, struct sigaction *old);
void *libc_dlopen(const char *file, int mode);
pthread_t libc_pthread_self(void);
int libc_pthread_getattr_np(pthread_t th, pthread_attr_t *attr);
int libc_pthread_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *), void *arg);
int libc_pthread_join(pthread_t th, void **ret);
int libc_clock_gettime(clockid_t clk, struct timespec *ts);
int libc_fclose(FILE *f);

/* libgcc's unwinder, loaded by libc_unwind_load (false, said once, if it cannot be):
 * libc.c says why not at start-up. The walk refuses, the forced unwind fails, without it. */
bool libc_unwind_load(void);
_Unwind_Reason_Code libc_unwind_backtrace(_Unwind_Trace_Fn fn, void *arg);
_Unwind_Reason_Code libc_unwind_forced(struct _Unwind_Exception *exc, _Unwind_Stop_Fn stop,
                                       void *arg);
_Unwind_Word libc_unwind_cfa(struct _Unwind_Context *ctx);
_Unwind_Ptr libc_unwind_ipinfo(struct _Unwind_Context *ctx, int *before);

/*
 * The runtime's own memory (struct g, m, p, the timer heaps, the netpoller's
 * descriptors): glibc's allocator, not the program's malloc. A program's malloc
 * may take a pthread mutex (jemalloc's do), which goshim interposes: called from the
 * scheduler, or from runtime code on a G's stack, it would meet that lock held by a G
 * that cannot run meanwhile (sched/mmaker.c). glibc's allocator takes only its own
 * locks, which no G holds while switched out (a G is never preempted in libc).
 * Memory from these goes back with rt_free, never with free.
 */
void *__libc_malloc(size_t n);
void *__libc_calloc(size_t k, size_t n);
void *__libc_memalign(size_t align, size_t n);
void __libc_free(void *p);
#define rt_malloc(n)      __libc_malloc(n)
#define rt_calloc(k, n)   __libc_calloc((k), (n))
#define rt_memalign(a, n) __libc_memalign((a), (n))
#define rt_free(p)        __libc_free(p)

/* The CPU-time clock of the kernel thread tid, as glibc's
 * pthread_getcpuclockid computes it (Linux's MAKE_THREAD_CPUCLOCK). */
static inline clockid_t libc_thread_cpuclock(int tid)
{
    return (clockid_t)((~(unsigned)tid) << 3) | 6; /* CPUCLOCK_PERTHREAD_MASK | CPUCLOCK_SCHED */
}

#endif
