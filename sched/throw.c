/*
 * Fatal errors and raw diagnostics (see throw.h for the contract).
 *
 * The formatter is deliberately small: the runtime prints counters,
 * addresses and names, nothing else, and it must do so from signal handlers
 * and from scheduler code that may not touch TLS (errno) or take locks
 * (stdio, malloc).
 */
#include "throw.h"

#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <sys/syscall.h>

uint64_t rt_mask_swap(uint64_t set)
{
    uint64_t old = 0;
    rt_syscall6(SYS_rt_sigprocmask, SIG_SETMASK, (long)&set, (long)&old, sizeof set, 0, 0);
    return old;
}

long rt_syscall6(long nr, long a, long b, long c, long d, long e, long f)
{
    long ret;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
}

struct out {
    char *buf;
    size_t len, pos;
};

static void out_char(struct out *o, char c)
{
    if (o->pos + 1 < o->len)
        o->buf[o->pos] = c;
    o->pos++;
}

static void out_str(struct out *o, const char *s)
{
    if (!s)
        s = "(null)";
    while (*s)
        out_char(o, *s++);
}

static void out_num(struct out *o, unsigned long long v, unsigned base, int neg)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = "0123456789abcdef"[v % base];
        v /= base;
    } while (v);
    if (neg)
        out_char(o, '-');
    while (n)
        out_char(o, tmp[--n]);
}

static size_t format(char *buf, size_t len, const char *fmt, va_list ap)
{
    struct out o = {buf, len, 0};
    for (; *fmt; fmt++) {
        if (*fmt != '%') {
            out_char(&o, *fmt);
            continue;
        }
        int lng = 0;
        fmt++;
        while (*fmt == 'l' || *fmt == 'z') {
            lng++;
            fmt++;
        }
        switch (*fmt) {
        case 's':
            out_str(&o, va_arg(ap, const char *));
            break;
        case 'c':
            out_char(&o, (char)va_arg(ap, int));
            break;
        case 'd':
        case 'i': {
            long long v = lng ? va_arg(ap, long long) : va_arg(ap, int);
            out_num(&o, v < 0 ? -(unsigned long long)v : (unsigned long long)v, 10, v < 0);
            break;
        }
        case 'u':
            out_num(&o, lng ? va_arg(ap, unsigned long long) : va_arg(ap, unsigned), 10, 0);
            break;
        case 'x':
            out_num(&o, lng ? va_arg(ap, unsigned long long) : va_arg(ap, unsigned), 16, 0);
            break;
        case 'p':
            out_str(&o, "0x");
            out_num(&o, (uintptr_t)va_arg(ap, void *), 16, 0);
            break;
        case '%':
            out_char(&o, '%');
            break;
        case '\0':
            fmt--;
            break;
        default:
            out_char(&o, '%');
            out_char(&o, *fmt);
        }
    }
    if (len)
        buf[o.pos < len ? o.pos : len - 1] = '\0';
    return o.pos < len ? o.pos : (len ? len - 1 : 0);
}

size_t rt_snprint(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t n = format(buf, len, fmt, ap);
    va_end(ap);
    return n;
}

long rt_read_text(const char *path, char *buf, size_t len)
{
    long fd = rt_syscall6(SYS_openat, AT_FDCWD, (long)path, O_RDONLY | O_CLOEXEC, 0, 0, 0);
    if (fd < 0)
        return -1;
    long n = rt_syscall(SYS_read, fd, buf, len - 1);
    rt_syscall(SYS_close, fd, 0, 0);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    return n;
}

void rt_vprint(int fd, const char *fmt, va_list ap)
{
    char buf[512];
    size_t n = format(buf, sizeof buf, fmt, ap);
    rt_syscall(SYS_write, fd, buf, n);
}

void rt_print(int fd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rt_vprint(fd, fmt, ap);
    va_end(ap);
}

__attribute__((noreturn)) static void die(void)
{
    /* Raise SIGABRT with the default action, even if the program caught it. */
    struct {
        void *handler;
        unsigned long flags;
        void *restorer;
        unsigned long mask;
    } sa = {SIG_DFL, 0, 0, 0};
    rt_syscall6(SYS_rt_sigaction, SIGABRT, (long)&sa, 0, 8, 0, 0);
    unsigned long unblock = 1UL << (SIGABRT - 1);
    rt_syscall6(SYS_rt_sigprocmask, SIG_UNBLOCK, (long)&unblock, 0, 8, 0, 0);
    rt_syscall(SYS_kill, rt_syscall(SYS_getpid, 0, 0, 0), SIGABRT, 0);
    rt_syscall(SYS_exit_group, 134, 0, 0);
    __builtin_unreachable();
}

void goshim_throw(const char *msg)
{
    rt_print(2, "goshim: fatal error: %s\n", msg);
    die();
}

void goshim_assert_fail(const char *cond, const char *file, int line, const char *func)
{
    rt_print(2, "goshim: fatal error: %s: assertion failed: %s (%s:%d)\n", func, cond, file, line);
    die();
}
