/*
 * glibc's functions for the runtime, past goshim's interposers (libc.h
 * says why). One table, filled by dlsym(RTLD_NEXT); a slot is written
 * once with the same value by whoever looks first, so a race between two
 * threads' first calls costs a second lookup, nothing else. A function
 * that is missing (no glibc could lack one of these) stops the process
 * with its name: the runtime cannot run on an interposer in its place.
 */
#include <dlfcn.h>
#include <stdbool.h>

#include "libc.h"
#include "sched.h"
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

/* The slot of name, looked up on first use (by threads at once, maybe: one load). */
#define GET(name)                                                                                  \
    ({                                                                                             \
        __typeof__(libc.name) fn_ = __atomic_load_n(&libc.name, __ATOMIC_ACQUIRE);                 \
        if (__builtin_expect(fn_ == NULL, 0)) {                                                    \
            fn_ = (__typeof__(libc.name))lookup(#name);                                            \
            __atomic_store_n(&libc.name, fn_, __ATOMIC_RELEASE);                                   \
        }                                                                                          \
        fn_;                                                                                       \
    })

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
    ownfd_grow_table(); /* the first thread the runtime makes may be the process's second */
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

/*
 * libgcc's unwinder (libgcc_s.so.1), which preemption's walk and a G's pthread_exit use:
 * not loaded with goshim, as glibc loads it only for a thread's first pthread_exit or
 * cancellation. The programs goshim is preloaded into that never make a thread (most of
 * those a shell runs) would each load it for nothing: about 250 us an exec on this host
 * (docs/measured.md). It is loaded at the runtime's start, on the main thread before any
 * G runs (0.1-0.2 ms, its constructor's cpuid included), while the TLS probe thread works
 * (schedinit.c): on a second CPU the two overlap. Loading it later,
 * from sysmon before its first preemption request, was tried and undone: a dlopen there
 * runs the loader and the program's malloc (jemalloc in redis) on a thread that is no G,
 * beside Gs that may hold their locks and whose release may need the very preemption
 * sysmon loads it for (a redis soak run at P=1 under chaos stalled 30 s, a G running on
 * the only P unpreempted). Without it (not installed), no preemption is found safe and a
 * pthread_exit runs no cleanup handler, each said once; a failed load is not tried again.
 */
static struct {
    _Unwind_Reason_Code (*backtrace)(_Unwind_Trace_Fn, void *);
    _Unwind_Reason_Code (*forced)(struct _Unwind_Exception *, _Unwind_Stop_Fn, void *);
    _Unwind_Word (*cfa)(struct _Unwind_Context *);
    _Unwind_Ptr (*ipinfo)(struct _Unwind_Context *, int *);
} unw;

bool libc_unwind_load(void)
{
    static int failed; /* not tried again: a dlopen takes the loader's lock */
    if (__atomic_load_n(&unw.backtrace, __ATOMIC_ACQUIRE))
        return true;
    if (__atomic_load_n(&failed, __ATOMIC_RELAXED))
        return false;
    void *h = GET(dlopen)("libgcc_s.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h) {
        unw.forced = (__typeof__(unw.forced))dlsym(h, "_Unwind_ForcedUnwind");
        unw.cfa = (__typeof__(unw.cfa))dlsym(h, "_Unwind_GetCFA");
        unw.ipinfo = (__typeof__(unw.ipinfo))dlsym(h, "_Unwind_GetIPInfo");
        void *bt = dlsym(h, "_Unwind_Backtrace");
        if (unw.forced && unw.cfa && unw.ipinfo && bt) {
            __atomic_store_n(&unw.backtrace, (__typeof__(unw.backtrace))bt, __ATOMIC_RELEASE);
            return true;
        }
    }
    if (!__atomic_exchange_n(&failed, 1, __ATOMIC_RELAXED))
        rt_print(2,
                 "goshim: libgcc_s.so.1 cannot be loaded (%s): threads that compute are not "
                 "preempted, and pthread_exit runs no cleanup handler\n",
                 h ? "an unwinder function is missing" : dlerror());
    return false;
}

_Unwind_Reason_Code libc_unwind_backtrace(_Unwind_Trace_Fn fn, void *arg)
{
    __typeof__(unw.backtrace) bt = __atomic_load_n(&unw.backtrace, __ATOMIC_ACQUIRE);
    return bt ? bt(fn, arg) : _URC_FATAL_PHASE1_ERROR;
}

_Unwind_Reason_Code libc_unwind_forced(struct _Unwind_Exception *exc, _Unwind_Stop_Fn stop,
                                       void *arg)
{
    return libc_unwind_load() ? unw.forced(exc, stop, arg) : _URC_FATAL_PHASE1_ERROR;
}

/* Called by the unwinder, which is loaded then. */
_Unwind_Word libc_unwind_cfa(struct _Unwind_Context *ctx)
{
    return unw.cfa(ctx);
}

_Unwind_Ptr libc_unwind_ipinfo(struct _Unwind_Context *ctx, int *before)
{
    return unw.ipinfo(ctx, before);
}
