/*
 * prog_tcb_block: what a thread's control block (TCB, static TLS) must do
 * wherever it lives; under goshim it lives at the top of the thread's stack
 * block, as glibc puts it (sched/proc.c). Plain pthreads, the same output
 * natively.
 *
 *   usage: prog_tcb_block tls | layout | joinable | detached N | deep N KIB | heap N
 *          | reuse N
 *
 * tls: threads of 64 KiB and of default stacks, made before and after a
 *   dlopen of libgoshim_tlsmod.so (dynamic TLS through each thread's DTV),
 *   check across many yields: errno, __thread initial values and their own
 *   copies, the stack protector canary (%fs:0x28 equals main's, and a
 *   stack_protect function with a live buffer returns across yields), the
 *   module's TLS (its initial value, a per-thread address, their values).
 *   Prints "tls: T threads, 0 failures".
 * layout: each thread says whether pthread_self() lies inside the stack
 *   block pthread_getattr_np reports, above its own frames (as glibc
 *   places it). Prints "layout: tcb in stack block: K of T".
 * joinable: a joinable thread's attributes are read, then it exits; 200
 *   threads made and joined one by one after it never get its pthread_t or
 *   stack; its attributes still read its own stack and its join returns its
 *   value. Prints "joinable: ok" or what went wrong. Under GOSHIM_FS=ldt,
 *   where a TCB lives apart from its stack (below 4 GiB), the exited
 *   thread's stack may serve a later thread before the join (docs/limits.md):
 *   only its pthread_t and attributes are checked there.
 * detached: N detached threads, at most 64 alive at a time, each exits
 *   alone; then "detached: N done" (under GOSHIM_STATS the test checks that
 *   their blocks were reused, not made N times).
 * deep: N threads of the default stack size each use KIB KiB of their
 *   stack, all alive at once, then are joined; main then sleeps in 10 ms
 *   steps (at most 10 s) until the process's resident memory is back within
 *   half of what the threads touched. Prints "deep: released yes" or
 *   "deep: released no (X MiB still resident of Y touched)".
 * reuse: after the dlopen, N threads one after another (each made once
 *   the last is joined, so it gets the last one's TCB under goshim and its
 *   cached stack natively) find the module's TLS and their own __thread
 *   variables at their initial values, set their own and exit; the blocks of the module's TLS they allocated must
 *   be freed with them. Prints "reuse: N threads, F failures, heap X bytes
 *   a thread" (X: heap growth from the 2nd thread to the last).
 * heap: N threads blocked at once in pthread_cond_wait; prints the malloc
 *   heap in use (mallinfo2, every arena) they added, per thread:
 *   "heap: X bytes a thread" (natively glibc's DTV), then how many pages
 *   of the top four of each thread's stack block (above its pthread_t,
 *   which lies in the top page natively and under goshim) are resident:
 *   "pages: A one, B two, C more, D other" (other: the top page is not,
 *   or a hole lies between resident ones). Exact only when every thread
 *   has parked by the time main counts (GOSHIM_PROCS=1).
 */
#include <alloca.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static __thread long tvar = 77;
static __thread char tbuf[128] = "init";
static uintptr_t main_canary;
static int failures; /* atomic */

static long (*mod_get)(void);
static void (*mod_set)(long);
static void *(*mod_addr)(void);
static int (*mod_buf_ok)(long);
static int mod_loaded; /* atomic: set once the module is loaded */

static void fail(const char *what, long id)
{
    fprintf(stderr, "thread %ld: %s\n", id, what);
    __atomic_fetch_add(&failures, 1, __ATOMIC_RELAXED);
}

static uintptr_t canary(void)
{
    uintptr_t v;
    __asm__ volatile("mov %%fs:0x28, %0" : "=r"(v));
    return v;
}

/* A protected frame with a live buffer across yields: a changed canary aborts. */
__attribute__((stack_protect, noinline)) static int guarded(long id)
{
    char buf[64];
    snprintf(buf, sizeof buf, "guarded %ld", id);
    for (int i = 0; i < 20; i++)
        sched_yield();
    char want[64];
    snprintf(want, sizeof want, "guarded %ld", id);
    return strcmp(buf, want) == 0;
}

static pthread_barrier_t loaded;

static void *tls_worker(void *arg)
{
    long id = (long)arg;
    if (errno != 0 || tvar != 77 || strcmp(tbuf, "init") != 0)
        fail("initial TLS values", id);
    if (canary() != main_canary)
        fail("stack protector canary differs from main's", id);
    if (id % 2 == 0) /* half of them were made before the dlopen */
        pthread_barrier_wait(&loaded);
    if (!__atomic_load_n(&mod_loaded, __ATOMIC_ACQUIRE)) {
        fail("module not loaded", id);
        return NULL;
    }
    if (mod_get() != 4242)
        fail("module TLS initial value", id);
    void *addr = mod_addr();
    mod_set(id);
    tvar = id;
    for (int i = 0; i < 2000; i++) {
        errno = (int)id;
        snprintf(tbuf, sizeof tbuf, "t%ld", id);
        sched_yield();
        if (errno != (int)id || tvar != id || tbuf[0] != 't' || atol(tbuf + 1) != id)
            fail("errno or __thread changed across a yield", id);
        if (mod_get() != id || !mod_buf_ok(id) || mod_addr() != addr)
            fail("module TLS changed across a yield", id);
        if (i % 500 == 0 && !guarded(id))
            fail("protected buffer changed", id);
    }
    return NULL;
}

static int load_module(const char *argv0)
{
    char path[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 64);
    (void)argv0;
    if (n <= 0)
        return -1;
    path[n] = '\0';
    char *slash = strrchr(path, '/');
    strcpy(slash ? slash + 1 : path, "libgoshim_tlsmod.so");
    void *h = dlopen(path, RTLD_NOW);
    if (!h) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return -1;
    }
    mod_get = (long (*)(void))dlsym(h, "tlsmod_get");
    mod_set = (void (*)(long))dlsym(h, "tlsmod_set");
    mod_addr = (void *(*)(void))dlsym(h, "tlsmod_addr");
    mod_buf_ok = (int (*)(long))dlsym(h, "tlsmod_buf_ok");
    if (!mod_get || !mod_set || !mod_addr || !mod_buf_ok)
        return -1;
    __atomic_store_n(&mod_loaded, 1, __ATOMIC_RELEASE);
    return 0;
}

static int run_tls(const char *argv0)
{
    enum { T = 16 };
    pthread_t t[T];
    pthread_attr_t small;
    pthread_attr_init(&small);
    pthread_attr_setstacksize(&small, 64 * 1024);
    pthread_barrier_init(&loaded, NULL, T / 2 + 1);
    for (long i = 0; i < T; i += 2) /* before the dlopen; they wait for it */
        pthread_create(&t[i], (i / 2) % 2 ? &small : NULL, tls_worker, (void *)i);
    if (load_module(argv0) != 0) {
        fprintf(stderr, "cannot load libgoshim_tlsmod.so\n");
        return 1;
    }
    pthread_barrier_wait(&loaded);
    for (long i = 1; i < T; i += 2)
        pthread_create(&t[i], (i / 2) % 2 ? &small : NULL, tls_worker, (void *)i);
    for (int i = 0; i < T; i++)
        pthread_join(t[i], NULL);
    printf("tls: %d threads, %d failures\n", T, failures);
    return failures != 0;
}

static int inside; /* atomic */

static void *layout_worker(void *arg)
{
    (void)arg;
    pthread_attr_t a;
    void *base;
    size_t size;
    char here;
    if (pthread_getattr_np(pthread_self(), &a) != 0)
        return NULL;
    pthread_attr_getstack(&a, &base, &size);
    pthread_attr_destroy(&a);
    char *self = (char *)pthread_self();
    if (self >= (char *)base && self < (char *)base + size && &here < self)
        __atomic_fetch_add(&inside, 1, __ATOMIC_RELAXED);
    return NULL;
}

static int run_layout(void)
{
    enum { T = 8 };
    pthread_t t[T];
    pthread_attr_t small;
    pthread_attr_init(&small);
    pthread_attr_setstacksize(&small, 64 * 1024);
    for (int i = 0; i < T; i++)
        pthread_create(&t[i], i % 2 ? &small : NULL, layout_worker, NULL);
    for (int i = 0; i < T; i++)
        pthread_join(t[i], NULL);
    printf("layout: tcb in stack block: %d of %d\n", inside, T);
    return 0;
}

static sem_t exiting, looked;

/* Alive until main has read its attributes; the 200 threads after it run once it ended. */
static void *first(void *arg)
{
    tvar = 5150;
    sem_post(&exiting);
    sem_wait(&looked);
    return arg;
}

struct seen {
    pthread_t self;
    void *base;
    size_t size;
};

static void *later(void *arg)
{
    struct seen *s = arg;
    pthread_attr_t a;
    s->self = pthread_self();
    pthread_getattr_np(s->self, &a);
    pthread_attr_getstack(&a, &s->base, &s->size);
    pthread_attr_destroy(&a);
    return NULL;
}

static int run_joinable(void)
{
    pthread_attr_t small;
    pthread_attr_init(&small);
    pthread_attr_setstacksize(&small, 64 * 1024);
    pthread_t a;
    sem_init(&exiting, 0, 0);
    sem_init(&looked, 0, 0);
    pthread_create(&a, &small, first, (void *)0x5150);
    sem_wait(&exiting);
    pthread_attr_t aa;
    void *abase;
    size_t asize;
    if (pthread_getattr_np(a, &aa) != 0) {
        printf("joinable: pthread_getattr_np of the running thread failed\n");
        return 1;
    }
    pthread_attr_getstack(&aa, &abase, &asize);
    pthread_attr_destroy(&aa);
    sem_post(&looked);
    const char *fs = getenv("GOSHIM_FS");
    bool stack_kept = !(fs && strcmp(fs, "ldt") == 0);
    for (int i = 0; i < 200; i++) {
        struct seen s;
        pthread_t b;
        pthread_create(&b, &small, later, &s);
        pthread_join(b, NULL);
        if (pthread_equal(s.self, a) || (stack_kept && (char *)s.base < (char *)abase + asize &&
                                         (char *)abase < (char *)s.base + s.size)) {
            printf("joinable: thread %d got the unjoined thread's %s\n", i,
                   pthread_equal(s.self, a) ? "pthread_t" : "stack");
            return 1;
        }
    }
    void *base2;
    size_t size2;
    if (pthread_getattr_np(a, &aa) != 0) {
        printf("joinable: the unjoined thread's TCB went away\n");
        return 1;
    }
    pthread_attr_getstack(&aa, &base2, &size2);
    pthread_attr_destroy(&aa);
    void *ret = NULL;
    int e = pthread_join(a, &ret);
    if (base2 != abase || size2 != asize || e != 0 || ret != (void *)0x5150) {
        printf("joinable: the unjoined thread changed: stack %p/%zu then %p/%zu, join %d, %p\n",
               abase, asize, base2, size2, e, ret);
        return 1;
    }
    printf("joinable: ok\n");
    return 0;
}

static sem_t slots;
static long ndone; /* atomic */

static void *detached_worker(void *arg)
{
    (void)arg;
    tvar++;
    __atomic_fetch_add(&ndone, 1, __ATOMIC_RELEASE);
    sem_post(&slots);
    return NULL;
}

static int run_detached(long n)
{
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&a, 64 * 1024);
    sem_init(&slots, 0, 64);
    for (long i = 0; i < n; i++) {
        pthread_t t;
        sem_wait(&slots);
        if (pthread_create(&t, &a, detached_worker, NULL) != 0) {
            printf("detached: pthread_create failed after %ld\n", i);
            return 1;
        }
    }
    for (int i = 0; i < 64; i++)
        sem_wait(&slots);
    printf("detached: %ld done\n", __atomic_load_n(&ndone, __ATOMIC_ACQUIRE));
    return 0;
}

static pthread_barrier_t deep_all;
static size_t deep_bytes;

static long resident_bytes(void)
{
    long size = 0, res = -1;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &size, &res) != 2)
            res = -1;
        fclose(f);
    }
    return res < 0 ? -1 : res * sysconf(_SC_PAGESIZE);
}

static void *deep_worker(void *arg)
{
    (void)arg;
    volatile char *buf = alloca(deep_bytes);
    for (size_t i = 0; i < deep_bytes; i += 512)
        buf[i] = (char)i;
    pthread_barrier_wait(&deep_all); /* every thread's pages are in at once */
    return (void *)(uintptr_t)buf[deep_bytes / 2];
}

static int run_deep(long n, long kib)
{
    deep_bytes = (size_t)kib * 1024;
    pthread_t *t = calloc((size_t)n, sizeof *t);
    if (!t || pthread_barrier_init(&deep_all, NULL, (unsigned)n) != 0)
        return 1;
    long before = resident_bytes();
    for (long i = 0; i < n; i++)
        if (pthread_create(&t[i], NULL, deep_worker, NULL) != 0) {
            printf("deep: pthread_create failed after %ld\n", i);
            return 1;
        }
    for (long i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    long touched = n * (long)deep_bytes, left = 0;
    for (int i = 0; i < 1000; i++) {
        left = resident_bytes() - before;
        if (left <= touched / 2)
            break;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (left <= touched / 2)
        printf("deep: released yes\n");
    else
        printf("deep: released no (%ld MiB still resident of %ld touched)\n", left >> 20,
               touched >> 20);
    free(t);
    return 0;
}

static pthread_mutex_t heap_m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t heap_cv = PTHREAD_COND_INITIALIZER,
                      heap_started_cv = PTHREAD_COND_INITIALIZER;
static long heap_started; /* heap_m */
static int heap_go;       /* heap_m */

static void *heap_worker(void *arg)
{
    pthread_mutex_lock(&heap_m);
    heap_started++;
    pthread_cond_signal(&heap_started_cv);
    while (!heap_go)
        pthread_cond_wait(&heap_cv, &heap_m);
    pthread_mutex_unlock(&heap_m);
    return arg;
}

static int run_heap(long n)
{
    pthread_t *t = calloc((size_t)n, sizeof *t);
    pthread_attr_t a;
    if (!t || pthread_attr_init(&a) != 0 || pthread_attr_setstacksize(&a, 64 * 1024) != 0)
        return 1;
    size_t before = mallinfo2().uordblks;
    for (long i = 0; i < n; i++)
        if (pthread_create(&t[i], &a, heap_worker, NULL) != 0) {
            printf("heap: pthread_create failed after %ld\n", i);
            return 1;
        }
    pthread_mutex_lock(&heap_m);
    while (heap_started < n)
        pthread_cond_wait(&heap_started_cv, &heap_m);
    size_t during = mallinfo2().uordblks;
    long pages[4] = {0}; /* one, two, more, other */
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    for (long i = 0; i < n; i++) {
        uintptr_t top = ((uintptr_t)t[i] + pg - 1) & ~(uintptr_t)(pg - 1);
        unsigned char v[4];
        if (mincore((void *)(top - 4 * pg), 4 * pg, v) != 0) {
            printf("heap: mincore: %s\n", strerror(errno));
            return 1;
        }
        int k = 0; /* resident pages from the top down, without a hole */
        while (k < 4 && (v[3 - k] & 1))
            k++;
        int rest = 0;
        for (int j = k; j < 4; j++)
            rest |= v[3 - j] & 1;
        pages[k == 0 || rest ? 3 : k >= 3 ? 2 : k - 1]++;
    }
    heap_go = 1;
    pthread_cond_broadcast(&heap_cv);
    pthread_mutex_unlock(&heap_m);
    for (long i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    printf("heap: %ld bytes a thread\n", (long)(during - before) / n);
    printf("pages: %ld one, %ld two, %ld more, %ld other\n", pages[0], pages[1], pages[2],
           pages[3]);
    free(t);
    return 0;
}

static __thread long reuse_own = 77; /* static TLS, initialised */
static __thread long reuse_zero;     /* static TLS, zero */

static void *reuse_worker(void *arg)
{
    /* Initial values, whoever had this TCB before. */
    long id = (long)arg, bad = mod_get() != 4242 || reuse_own != 77 || reuse_zero != 0;
    mod_set(id);
    reuse_own = reuse_zero = id;
    bad |= mod_get() != id || !mod_buf_ok(id);
    return (void *)bad;
}

static int run_reuse(const char *argv0, long n)
{
    if (n < 2 || load_module(argv0) != 0) {
        fprintf(stderr, "reuse: needs N >= 2 and libgoshim_tlsmod.so\n");
        return 1;
    }
    size_t before = 0;
    long bad = 0;
    for (long i = 0; i < n; i++) {
        pthread_t t;
        void *r;
        if (i == 1)
            before = mallinfo2().uordblks; /* the first thread's one-time allocations are in */
        if (pthread_create(&t, NULL, reuse_worker, (void *)(i + 1)) != 0 ||
            pthread_join(t, &r) != 0)
            return 1;
        bad += r != NULL;
    }
    long grew = (long)(mallinfo2().uordblks - before) / (n - 1);
    printf("reuse: %ld threads, %ld failures, heap %ld bytes a thread\n", n, bad, grew);
    return bad != 0;
}

int main(int argc, char **argv)
{
    main_canary = canary();
    const char *mode = argc > 1 ? argv[1] : "tls";
    if (strcmp(mode, "tls") == 0)
        return run_tls(argv[0]);
    if (strcmp(mode, "layout") == 0)
        return run_layout();
    if (strcmp(mode, "joinable") == 0)
        return run_joinable();
    if (strcmp(mode, "detached") == 0 && argc > 2)
        return run_detached(atol(argv[2]));
    if (strcmp(mode, "deep") == 0 && argc > 3)
        return run_deep(atol(argv[2]), atol(argv[3]));
    if (strcmp(mode, "heap") == 0 && argc > 2)
        return run_heap(atol(argv[2]));
    if (strcmp(mode, "reuse") == 0 && argc > 2)
        return run_reuse(argv[0], atol(argv[2]));
    fprintf(stderr,
            "usage: %s tls | layout | joinable | detached N | deep N KIB | heap N | reuse N\n",
            argv[0]);
    return 2;
}
