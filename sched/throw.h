/*
 * Fatal errors and raw diagnostics for the runtime.
 *
 * Everything here writes with the write(2) system call directly: no stdio,
 * no malloc, no errno, no thread-local storage. So it is safe in signal
 * handlers, on an M's scheduler stack (g0) whose FS base may belong to a G,
 * and while scheduler locks are held.
 */
#ifndef GOSHIM_THROW_H
#define GOSHIM_THROW_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/*
 * rt_print formats into a stack buffer and writes it to fd in one write(2).
 * Conversions: %s %c %d %i %u %x %p %% with the length modifiers l, ll, z.
 * Output longer than 512 bytes is cut.
 */
void rt_print(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void rt_vprint(int fd, const char *fmt, va_list ap);
/* rt_snprint is rt_print into a caller buffer; returns the length written. */
size_t rt_snprint(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * goshim_throw prints "goshim: fatal error: <msg>" and aborts the process.
 * The message names the function: goshim_throw("findrunnable: negative nmspinning").
 */
__attribute__((noreturn)) void goshim_throw(const char *msg);

/* Always-on assertion: cheap checks of invariants. */
#define GOSHIM_ASSERT(cond)                                                                        \
    do {                                                                                           \
        if (__builtin_expect(!(cond), 0))                                                          \
            goshim_assert_fail(#cond, __FILE__, __LINE__, __func__);                               \
    } while (0)

__attribute__((noreturn)) void goshim_assert_fail(const char *cond, const char *file, int line,
                                                  const char *func);

/* Raw system calls: no errno, return -errno on failure. */
long rt_syscall6(long nr, long a, long b, long c, long d, long e, long f);
#define rt_syscall(nr, a, b, c) rt_syscall6((nr), (long)(a), (long)(b), (long)(c), 0, 0, 0)

/* The signal mask goshim's own threads start with (a helper, a new M, the TLS probe's
 * thread, an M on its way out): every signal blocked but glibc's SIGCANCEL and SIGSETXID
 * (32, 33), since set*id waits for every thread to take SIGSETXID (setxid.c). */
#define RT_MASK_OWN_THREAD (~((1ULL << 31) | (1ULL << 32)))
/* rt_mask_swap installs set as the calling thread's mask; returns the one it replaced. */
uint64_t rt_mask_swap(uint64_t set);

/* rt_read_text reads the start of a small file (/proc, /sys) into buf, NUL-terminated,
 * with raw system calls: its length, or -1 if it cannot be opened or read (or is empty). */
long rt_read_text(const char *path, char *buf, size_t len);

#endif
