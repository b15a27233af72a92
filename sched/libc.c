/*
 * glibc's functions for the runtime, past goshim's interposers (libc.h
 * says why). One table, filled by dlsym(RTLD_NEXT); a slot is written
 * once with the same value by whoever looks first, so a race between two
 * threads' first calls costs a second lookup, nothing else. A function
 * that is missing (no glibc could lack one of these) stops the process
 * with its name: the runtime cannot run on an interposer in its place.
 */
#include <dlfcn.h>

#include "libc.h"
#include "throw.h"

#define LIBC_FNS(X)                                                                                \
    X(sigaction, int, (int, const struct sigaction *, struct sigaction *))                         \
    X(dlopen, void *, (const char *, int))                                                         \
    X(pthread_self, pthread_t, (void))                                                             \
    X(pthread_getattr_np, int, (pthread_t, pthread_attr_t *))                                      \
    X(pthread_create, int, (pthread_t *, const pthread_attr_t *, void *(*)(void *), void *))       \
    X(pthread_join, int, (pthread_t, void **))                                                     \
    X(clock_gettime, int, (clockid_t, struct timespec *))                                          \
    X(fclose, int, (FILE *))

static struct {
#define SLOT(name, ret, args) ret(*name) args;
    LIBC_FNS(SLOT)
#undef SLOT
} libc;

static void *lookup(const char *name)
{
    void *fn = dlsym(RTLD_NEXT, name);
    if (!fn) {
        rt_print(2, "goshim: fatal error: glibc's %s cannot be found (dlsym: %s)\n", name,
                 dlerror());
        goshim_throw("libc: a C library function is missing");
    }
    return fn;
}

/* The slot of name, looked up on first use. */
#define GET(name)                                                                                  \
    (__builtin_expect(__atomic_load_n(&libc.name, __ATOMIC_ACQUIRE) != NULL, 1)                    \
         ? libc.name                                                                               \
         : (__atomic_store_n(&libc.name, (__typeof__(libc.name))lookup(#name), __ATOMIC_RELEASE),  \
            libc.name))

void libc_init(void)
{
#define INIT(name, ret, args) (void)GET(name);
    LIBC_FNS(INIT)
#undef INIT
}

int libc_sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    return GET(sigaction)(sig, act, old);
}

void *libc_dlopen(const char *file, int mode)
{
    return GET(dlopen)(file, mode);
}

pthread_t libc_pthread_self(void)
{
    return GET(pthread_self)();
}

int libc_pthread_getattr_np(pthread_t th, pthread_attr_t *attr)
{
    return GET(pthread_getattr_np)(th, attr);
}

int libc_pthread_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
    return GET(pthread_create)(th, attr, fn, arg);
}

int libc_pthread_join(pthread_t th, void **ret)
{
    return GET(pthread_join)(th, ret);
}

int libc_clock_gettime(clockid_t clk, struct timespec *ts)
{
    return GET(clock_gettime)(clk, ts);
}

int libc_fclose(FILE *f)
{
    return GET(fclose)(f);
}
