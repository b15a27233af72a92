/*
 * Tests for sched/tls.c: per-G glibc TCBs over their life: tids and
 * variables, moving the malloc words, resets (from inside and outside),
 * keys, mutex owners, the stack glibc sees, thread_local destructors, fork,
 * and no leak over many cycles. How tls_init picks the FS-base method, and a
 * fresh TCB seen from inside in each method, are in tests/test_tls_fs.c.
 *
 * Each test calls tls_init itself (Criterion runs every test in its own
 * process). Code that runs with another TCB installed (the *_fn callbacks
 * of tls_call_with_fs) only records what it sees into a struct; all
 * assertions run afterwards on the caller's own TCB.
 */
#include <criterion/criterion.h>

#include "tests/helpers.h"
#include "tests/tls_helpers.h"

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

extern int __cxa_thread_atexit_impl(void (*fn)(void *), void *obj, void *dso);
extern void *__dso_handle;

#define BELOW_MAX 2048

/*
 * below returns how many bytes below a thread pointer are surely static
 * TLS (at most BELOW_MAX): glibc's static TLS size less struct pthread.
 * Reading further may leave the TCB's memory: a TCB of the ldt method's
 * low arena may sit at the very start of a mapping.
 */
static long below(void)
{
    struct tls_stats st;
    tls_get_stats(&st);
    const unsigned *sz = dlvsym(RTLD_DEFAULT, "_thread_db_sizeof_pthread", "GLIBC_PRIVATE");
    cr_assert_not_null(sz);
    long n = (long)st.static_size - (long)*sz;
    cr_assert_gt(n, 256, "static TLS %zu, struct pthread %u", st.static_size, *sz);
    return (n < BELOW_MAX ? n : BELOW_MAX) & ~7L;
}

Test(tls, var_in_and_unique_tids, .timeout = 10)
{
    skip_without_full_tls();
    init_full();
    tls_int = 99;
    void *t[100];
    for (int i = 0; i < 100; i++) {
        t[i] = tls_tcb_new();
        cr_assert_not_null(t[i]);
        cr_assert_eq(*(int *)tls_var_in(t[i], &tls_int), 1234);
        unsigned tid = tls_tcb_tid(t[i]);
        cr_assert(tid >= 0x01000000u && tid < 0x3fffffffu, "tid %#x", tid);
        for (int j = 0; j < i; j++)
            cr_assert_neq(tid, tls_tcb_tid(t[j]));
    }
    for (int i = 0; i < 100; i++)
        tls_tcb_destroy(t[i]);
    struct tls_stats st;
    tls_get_stats(&st);
    cr_assert_geq(st.tcbs_created, 100);
    cr_assert_geq(st.tcbs_destroyed, 100);
}

/* find_words moves this thread's malloc words into t and reports where they landed. */
static int find_words(void *t, long off[2], uintptr_t val[2])
{
    static unsigned char before[BELOW_MAX];
    long BELOW = below();
    memcpy(before, (char *)t - BELOW, BELOW);
    tls_malloc_move(tls_self(), t);
    int n = 0;
    for (long i = 0; i < BELOW; i += 8) {
        uintptr_t b, a;
        memcpy(&b, before + i, 8);
        memcpy(&a, (char *)t - BELOW + i, 8);
        if (a != b) {
            if (n < 2) {
                off[n] = i - BELOW;
                val[n] = a;
            }
            n++;
        }
    }
    return n;
}

Test(tls, malloc_move_moves_exactly_the_words, .timeout = 10)
{
    skip_without_full_tls();
    init_full();
    free(malloc(24)); /* this thread surely has a tcache and an arena */
    void *self = tls_self();
    void *a = tls_tcb_new(), *b = tls_tcb_new();
    long off[2];
    uintptr_t val[2];
    cr_assert_eq(find_words(a, off, val), 2, "expected 2 malloc words");
    cr_assert(val[0] && val[1]);
    /* The caller's copies are now zero. */
    for (int i = 0; i < 2; i++)
        cr_assert_eq(*(uintptr_t *)((char *)self + off[i]), 0);

    static unsigned char sa[BELOW_MAX], sb[BELOW_MAX];
    long BELOW = below();
    memcpy(sa, (char *)a - BELOW, BELOW);
    memcpy(sb, (char *)b - BELOW, BELOW);
    tls_malloc_move(a, a); /* same TCB: no-op */
    cr_assert_eq(memcmp(sa, (char *)a - BELOW, BELOW), 0);
    tls_malloc_move(a, b);
    for (long i = 0; i < BELOW; i += 8) {
        long rel = i - BELOW;
        uintptr_t va = *(uintptr_t *)((char *)a + rel), vb = *(uintptr_t *)((char *)b + rel);
        int is_word = rel == off[0] || rel == off[1];
        uintptr_t want = rel == off[0] ? val[0] : val[1];
        if (is_word) {
            cr_assert_eq(va, 0);
            cr_assert_eq(vb, want);
        } else {
            cr_assert_eq(va, *(uintptr_t *)(sa + i), "a changed at %ld", rel);
            cr_assert_eq(vb, *(uintptr_t *)(sb + i), "b changed at %ld", rel);
        }
    }
    tls_malloc_move(b, self);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(*(uintptr_t *)((char *)self + off[i]), val[i]);
    void *p = malloc(100);
    cr_assert_not_null(p);
    free(p);
    tls_tcb_destroy(a);
    tls_tcb_destroy(b);
}

static void dirty_fn(void *arg)
{
    pthread_key_t *key = arg;
    tls_thread_start();
    tls_int = 1;
    strcpy(tls_str, "dirty");
    tls_bss = 7;
    void *volatile p = malloc(100);
    free(p);
    (void)strerror(987655);
    (void)strsignal(98766);
    pthread_setspecific(*key, (void *)2);
    errno = 55;
}

struct after_reset {
    long off[2];
    uintptr_t words[2];
    int tint, tbss, err;
    char tstr[16];
    unsigned tid;
    void *spec;
    pthread_key_t key;
    int malloc_ok;
};

static void reset_self_fn(void *arg)
{
    struct after_reset *r = arg;
    tls_tcb_reset(tls_self());
    r->tint = tls_int;
    r->tbss = tls_bss;
    r->err = errno;
    memcpy(r->tstr, tls_str, sizeof r->tstr);
    r->tid = tls_tcb_tid(tls_self());
    r->spec = pthread_getspecific(r->key);
    for (int i = 0; i < 2; i++)
        r->words[i] = *(uintptr_t *)((char *)tls_self() + r->off[i]);
    tls_thread_start();
    void *volatile p = malloc(200);
    r->malloc_ok = p != NULL && isalpha('z');
    free(p);
}

Test(tls, reset_while_installed, .timeout = 10)
{
    skip_without_full_tls();
    init_full();
    free(malloc(24));
    struct after_reset r;
    memset(&r, 0, sizeof r);
    cr_assert_eq(pthread_key_create(&r.key, NULL), 0);
    void *self = tls_self();
    void *t = tls_tcb_new();
    uintptr_t val[2];
    cr_assert_eq(find_words(t, r.off, val), 2);
    unsigned tid0 = tls_tcb_tid(t);
    tls_call_with_fs(t, dirty_fn, &r.key);
    cr_assert_eq(*(int *)tls_var_in(t, &tls_int), 1);
    tls_call_with_fs(t, reset_self_fn, &r);
    tls_malloc_move(t, self);

    cr_assert_eq(r.tint, 1234);
    cr_assert_eq(r.tbss, 0);
    cr_assert_str_eq(r.tstr, "initial");
    cr_assert_eq(r.err, 0);
    cr_assert_null(r.spec);
    cr_assert_neq(r.tid, tid0);
    cr_assert_eq(r.tid, tls_tcb_tid(t));
    cr_assert_eq(r.words[0], val[0], "malloc word 0 lost by reset");
    cr_assert_eq(r.words[1], val[1], "malloc word 1 lost by reset");
    cr_assert(r.malloc_ok);
    tls_tcb_destroy(t);
}

static void *spec_seen;

/* specific_fn records the TCB's value of the key, then adds 2 to it. */
static void specific_fn(void *arg)
{
    pthread_key_t *key = arg;
    spec_seen = pthread_getspecific(*key);
    pthread_setspecific(*key, (void *)((uintptr_t)spec_seen + 2));
}

Test(tls, reset_from_outside_and_keys, .timeout = 10)
{
    skip_without_full_tls();
    init_full();
    pthread_key_t key;
    cr_assert_eq(pthread_key_create(&key, NULL), 0);
    pthread_setspecific(key, (void *)1);
    void *t = tls_tcb_new();
    run_in(t, specific_fn, &key);
    cr_assert_null(spec_seen);
    cr_assert_eq(pthread_getspecific(key), (void *)1);
    run_in(t, specific_fn, &key);
    cr_assert_eq(spec_seen, (void *)2);
    run_in(t, dirty_fn, &key);
    tls_tcb_reset(t);
    cr_assert_eq(*(int *)tls_var_in(t, &tls_int), 1234);
    cr_assert_str_eq((char *)tls_var_in(t, tls_str), "initial");
    struct inside r;
    memset(&r, 0, sizeof r);
    run_in(t, inside_fn, &r);
    cr_assert_eq(r.err0, 0);
    cr_assert_eq(r.self, t);
    cr_assert(r.ctype_ok);
    run_in(t, specific_fn, &key);
    cr_assert_null(spec_seen, "key value survived the reset");
    cr_assert_eq(pthread_getspecific(key), (void *)1);
    tls_tcb_destroy(t);
}

static pthread_mutex_t test_mx;

struct mx_op {
    int op; /* 0 lock, 1 trylock, 2 unlock */
    int ret;
};

static void mx_fn(void *arg)
{
    struct mx_op *o = arg;
    o->ret = o->op == 0   ? pthread_mutex_lock(&test_mx)
             : o->op == 1 ? pthread_mutex_trylock(&test_mx)
                          : pthread_mutex_unlock(&test_mx);
}

static int mx_in(void *t, int op)
{
    struct mx_op o = {op, -1};
    tls_call_with_fs(t, mx_fn, &o);
    return o.ret;
}

Test(tls, mutex_owner_is_per_tcb, .timeout = 10)
{
    skip_without_full_tls();
    init_full();
    void *a = tls_tcb_new(), *b = tls_tcb_new();
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&test_mx, &ma);
    cr_assert_eq(mx_in(a, 0), 0);
    cr_assert_eq(mx_in(b, 1), EBUSY, "second TCB got a recursive mutex held by the first");
    cr_assert_eq(mx_in(b, 2), EPERM);
    cr_assert_eq(pthread_mutex_trylock(&test_mx), EBUSY); /* the caller is a third owner */
    cr_assert_eq(mx_in(a, 1), 0);                         /* recursion */
    cr_assert_eq(mx_in(a, 2), 0);
    cr_assert_eq(mx_in(a, 2), 0);
    cr_assert_eq(mx_in(b, 1), 0);
    cr_assert_eq(mx_in(b, 2), 0);
    pthread_mutex_destroy(&test_mx);

    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ERRORCHECK);
    pthread_mutex_init(&test_mx, &ma);
    cr_assert_eq(mx_in(a, 0), 0, "errorcheck lock failed on first lock");
    cr_assert_eq(mx_in(a, 0), EDEADLK);
    cr_assert_eq(mx_in(b, 2), EPERM);
    cr_assert_eq(mx_in(a, 2), 0);
    pthread_mutex_destroy(&test_mx);
    pthread_mutexattr_destroy(&ma);
    tls_tcb_destroy(a);
    tls_tcb_destroy(b);
}

struct stack_seen {
    int ret;
    void *addr;
    size_t size, guard;
    int cutoff_small, cutoff_big;
};

static int (*alloca_cutoff)(size_t);

static void stack_fn(void *arg)
{
    struct stack_seen *s = arg;
    pthread_attr_t attr;
    s->ret = pthread_getattr_np(pthread_self(), &attr);
    if (s->ret == 0) {
        pthread_attr_getstack(&attr, &s->addr, &s->size);
        pthread_attr_getguardsize(&attr, &s->guard);
        pthread_attr_destroy(&attr);
    }
    s->cutoff_small = alloca_cutoff(16000);
    s->cutoff_big = alloca_cutoff(20000);
}

Test(tls, set_stack_is_seen_by_glibc, .timeout = 10)
{
    skip_without_full_tls();
    init_full();
    alloca_cutoff = (int (*)(size_t))dlvsym(RTLD_DEFAULT, "__libc_alloca_cutoff", "GLIBC_PRIVATE");
    cr_assert_not_null(alloca_cutoff);
    size_t size = 64 * 1024, guard = 4096;
    char *stk = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(stk, MAP_FAILED);
    void *t = tls_tcb_new();
    tls_tcb_set_stack(t, stk, size, guard);
    struct stack_seen s;
    memset(&s, 0, sizeof s);
    run_in(t, stack_fn, &s);
    if (s.ret == 0) {
        cr_assert_eq(s.addr, stk + guard);
        cr_assert_eq(s.size, size - guard);
        cr_assert_eq(s.guard, guard);
    } else {
        /*
         * glibc 2.36 asks the kernel for the thread's affinity with pd->tid,
         * the fake tid: ESRCH (docs/design.md, "TCB facts"; the shim
         * interposes pthread_getattr_np). Check the four words glibc would
         * have read.
         */
        cr_assert_eq(s.ret, ESRCH);
        int found = 0;
        for (size_t off = 0; off + 32 <= 2048; off += 8) {
            uintptr_t *w = (uintptr_t *)((char *)t + off);
            found += w[0] == (uintptr_t)stk && w[1] == size && w[2] == guard && w[3] == guard;
        }
        cr_assert_eq(found, 1);
    }
    /* __libc_alloca_cutoff reads stackblock_size: a quarter of 64 KiB. */
    cr_assert_eq(s.cutoff_small, 1);
    cr_assert_eq(s.cutoff_big, 0);
    cr_assert_eq(alloca_cutoff(20000), 1, "the caller's own cutoff changed");
    tls_tcb_destroy(t);
    munmap(stk, size);
}

static void note_dtor(void *p)
{
    (*(int *)p)++;
}

struct dtor_seen {
    int flag, before_exit;
};

static void dtor_fn(void *arg)
{
    struct dtor_seen *d = arg;
    tls_thread_start();
    __cxa_thread_atexit_impl(note_dtor, &d->flag, &__dso_handle);
    (void)dlopen("/nonexistent/goshim-no-such-lib.so", RTLD_NOW); /* leaves a dlerror state */
    d->before_exit = d->flag;
    tls_thread_exit();
}

Test(tls, thread_exit_runs_thread_local_dtors, .timeout = 10)
{
    skip_without_full_tls();
    init_full();
    void *t = tls_tcb_new();
    struct dtor_seen d = {0, 0};
    run_in(t, dtor_fn, &d);
    cr_assert_eq(d.before_exit, 0);
    cr_assert_eq(d.flag, 1);
    tls_tcb_destroy(t);
}

static void fork_fn(void *arg)
{
    int *status = arg;
    tls_thread_start();
    pid_t pid = fork();
    if (pid == 0) {
        void *volatile p = malloc(64);
        _exit(p && isalpha('a') && tls_int == 1234 ? 7 : 1);
    }
    waitpid(pid, status, 0);
}

Test(tls, fork_inside_tcb, .timeout = 10)
{
    skip_without_full_tls();
    init_full();
    void *t = tls_tcb_new();
    int status = -1;
    run_in(t, fork_fn, &status);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 7, "status %#x", status);
    tls_tcb_destroy(t);
}

static void work_fn(void *arg)
{
    unsigned i = *(unsigned *)arg;
    tls_thread_start();
    void *volatile a = malloc(40), *volatile b = malloc(3000), *volatile c = malloc(100000);
    free(b);
    free(a);
    free(c);
    (void)strerror(987654 + i % 3);
    (void)strsignal(98765);
    (void)dlopen("/nonexistent/goshim-no-such-lib.so", RTLD_NOW);
    tls_int += i;
    tls_thread_exit();
}

/* Heap growth over cycles 1000..10000 of fn, in bytes. */
static long heap_growth(int reuse)
{
    void *t = reuse ? tls_tcb_new() : NULL;
    size_t start = 0;
    for (unsigned i = 0; i < 10000; i++) {
        if (i == 1000)
            start = mallinfo2().uordblks;
        if (reuse)
            tls_tcb_reset(t);
        else
            t = tls_tcb_new();
        cr_assert_not_null(t);
        run_in(t, work_fn, &i);
        if (!reuse)
            tls_tcb_destroy(t);
    }
    if (reuse)
        tls_tcb_destroy(t);
    return (long)mallinfo2().uordblks - (long)start;
}

Test(tls, new_destroy_cycles_do_not_leak, .timeout = 10)
{
    skip_without_full_tls();
    init_full();
    long growth = heap_growth(0);
    cr_assert_lt(growth, 16384, "heap grew %ld bytes over 9000 TCBs", growth);
}

Test(tls, reset_cycles_do_not_leak, .timeout = 10)
{
    skip_without_full_tls();
    init_full();
    long growth = heap_growth(1);
    cr_assert_lt(growth, 16384, "heap grew %ld bytes over 9000 resets", growth);
    struct tls_stats st;
    tls_get_stats(&st);
    cr_assert_geq(st.tcbs_reset, 10000);
}
