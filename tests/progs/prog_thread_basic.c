/*
 * Thread lifecycle, checked the same way natively and under goshim:
 * create/join with return values, tryjoin/timedjoin/clockjoin, join errors,
 * detach, attributes seen by pthread_getattr_np, names, once, keys with
 * destructors, sched_yield. Prints one line per check; exits 1 on failure.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int failures;
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            failures++;                                                                            \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                            \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
        }                                                                                          \
    } while (0)

static void *twice(void *arg)
{
    return (void *)((long)arg * 2);
}

static volatile int release_flag;
static void *wait_flag(void *arg)
{
    while (!__atomic_load_n(&release_flag, __ATOMIC_ACQUIRE))
        sched_yield();
    return arg;
}

static void *join_self(void *arg)
{
    (void)arg;
    return (void *)(long)pthread_join(pthread_self(), NULL);
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int once_runs;
static void once_init(void)
{
    once_runs++;
}
static void *call_once(void *arg)
{
    pthread_once(&once, once_init);
    return arg;
}

static pthread_key_t key;
static int dtor_calls;
static long dtor_sum;
static pthread_mutex_t dtor_lock = PTHREAD_MUTEX_INITIALIZER;
static void key_dtor(void *v)
{
    pthread_mutex_lock(&dtor_lock);
    dtor_calls++;
    dtor_sum += (long)v;
    pthread_mutex_unlock(&dtor_lock);
}
static void *set_key(void *arg)
{
    CHECK(pthread_getspecific(key) == NULL, "a new thread's key value is NULL");
    pthread_setspecific(key, arg);
    sched_yield();
    CHECK(pthread_getspecific(key) == arg, "key value kept across a yield");
    return NULL;
}

static void *attr_check(void *arg)
{
    pthread_attr_t a;
    size_t size = 0;
    void *addr = NULL;
    int detach = -1;
    CHECK(pthread_getattr_np(pthread_self(), &a) == 0, "getattr_np");
    pthread_attr_getstack(&a, &addr, &size);
    pthread_attr_getdetachstate(&a, &detach);
    pthread_attr_destroy(&a);
    char local;
    CHECK(size >= (size_t)(long)arg, "stack size %zu >= requested %ld", size, (long)arg);
    CHECK((char *)addr <= &local && &local < (char *)addr + size, "own stack contains a local");
    CHECK(detach == PTHREAD_CREATE_JOINABLE, "joinable");
    return NULL;
}

static void check_create_join(void)
{
    pthread_t t[8];
    for (long i = 0; i < 8; i++)
        CHECK(pthread_create(&t[i], NULL, twice, (void *)i) == 0, "create %ld", i);
    for (long i = 0; i < 8; i++) {
        void *r;
        CHECK(pthread_join(t[i], &r) == 0, "join %ld", i);
        CHECK((long)r == 2 * i, "return value %ld", (long)r);
    }
    printf("create/join: 8 threads returned their values\n");
}

/* An absolute deadline 20 ms from now on clock c. */
static struct timespec in_20ms(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    ts.tv_nsec += 20000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    return ts;
}

static void check_timed_joins(void)
{
    pthread_t w;
    pthread_create(&w, NULL, wait_flag, (void *)7L);
    CHECK(pthread_tryjoin_np(w, NULL) == EBUSY, "tryjoin on a running thread is EBUSY");
    struct timespec ts = in_20ms(CLOCK_REALTIME);
    CHECK(pthread_timedjoin_np(w, NULL, &ts) == ETIMEDOUT, "timedjoin times out");
    ts = in_20ms(CLOCK_MONOTONIC);
    CHECK(pthread_clockjoin_np(w, NULL, CLOCK_MONOTONIC, &ts) == ETIMEDOUT, "clockjoin times out");
    __atomic_store_n(&release_flag, 1, __ATOMIC_RELEASE);
    void *r = NULL;
    CHECK(pthread_join(w, &r) == 0 && (long)r == 7, "join after the timeouts");
    printf("tryjoin/timedjoin/clockjoin: EBUSY, ETIMEDOUT, ETIMEDOUT, then joined\n");
}

static void check_join_errors(void)
{
    void *r = NULL;
    CHECK(pthread_join(pthread_self(), NULL) == EDEADLK, "joining oneself is EDEADLK");
    pthread_t s;
    pthread_create(&s, NULL, join_self, NULL);
    pthread_join(s, &r);
    CHECK((long)r == EDEADLK, "a thread joining itself gets EDEADLK");
    pthread_attr_t da;
    pthread_attr_init(&da);
    pthread_attr_setdetachstate(&da, PTHREAD_CREATE_DETACHED);
    release_flag = 0;
    pthread_t d;
    CHECK(pthread_create(&d, &da, wait_flag, NULL) == 0, "create detached");
    CHECK(pthread_join(d, NULL) == EINVAL, "joining a detached thread is EINVAL");
    CHECK(pthread_detach(d) == EINVAL, "detaching twice is EINVAL");
    __atomic_store_n(&release_flag, 1, __ATOMIC_RELEASE);
    pthread_attr_destroy(&da);
    pthread_t d2;
    pthread_create(&d2, NULL, twice, NULL);
    CHECK(pthread_detach(d2) == 0, "detach a joinable thread");
    printf("join errors: EDEADLK, EDEADLK, EINVAL, EINVAL; detach ok\n");
}

static void check_getattr(void)
{
    pthread_attr_t sa;
    pthread_attr_init(&sa);
    pthread_attr_setstacksize(&sa, 256 * 1024);
    pthread_t a;
    pthread_create(&a, &sa, attr_check, (void *)(256L * 1024));
    pthread_join(a, NULL);
    pthread_attr_destroy(&sa);
    printf("getattr_np: the thread sees its own stack\n");
}

static void check_names(void)
{
    char name[16];
    CHECK(pthread_setname_np(pthread_self(), "mainthread") == 0, "setname");
    CHECK(pthread_getname_np(pthread_self(), name, sizeof name) == 0 && !strcmp(name, "mainthread"),
          "getname");
    CHECK(pthread_setname_np(pthread_self(), "a-name-that-is-too-long") == ERANGE,
          "too long a name is ERANGE");
    printf("names: set, get, ERANGE\n");
}

static void check_once(void)
{
    pthread_t t[8];
    for (long i = 0; i < 8; i++)
        pthread_create(&t[i], NULL, call_once, NULL);
    for (int i = 0; i < 8; i++)
        pthread_join(t[i], NULL);
    CHECK(once_runs == 1, "once ran %d times", once_runs);
    printf("once: ran once for 8 threads\n");
}

static void check_keys(void)
{
    pthread_t t[8];
    pthread_key_create(&key, key_dtor);
    for (long i = 0; i < 8; i++)
        pthread_create(&t[i], NULL, set_key, (void *)(i + 1));
    for (int i = 0; i < 8; i++)
        pthread_join(t[i], NULL);
    CHECK(dtor_calls == 8 && dtor_sum == 36, "destructors: %d calls, sum %ld", dtor_calls,
          dtor_sum);
    pthread_key_delete(key);
    printf("keys: 8 destructors ran with their values\n");
}

/* Calls glibc makes with the kernel tid: affinity, scheduling, the kill probe. */
static void check_tid_calls(void)
{
    pthread_t w;
    release_flag = 0;
    pthread_create(&w, NULL, wait_flag, NULL);
    cpu_set_t cs;
    CPU_ZERO(&cs);
    CHECK(pthread_getaffinity_np(w, sizeof cs, &cs) == 0 && CPU_COUNT(&cs) >= 1, "getaffinity");
    CPU_ZERO(&cs);
    CPU_SET(0, &cs);
    CHECK(pthread_setaffinity_np(w, sizeof cs, &cs) == 0, "setaffinity");
    CPU_ZERO(&cs);
    pthread_getaffinity_np(w, sizeof cs, &cs);
    CHECK(CPU_COUNT(&cs) == 1 && CPU_ISSET(0, &cs), "affinity reads back");
    int pol = -1;
    struct sched_param sp = {0};
    CHECK(pthread_getschedparam(w, &pol, &sp) == 0 && pol == SCHED_OTHER && sp.sched_priority == 0,
          "getschedparam");
    sp.sched_priority = 5;
    CHECK(pthread_setschedparam(w, SCHED_OTHER, &sp) == EINVAL, "SCHED_OTHER priority 5 is EINVAL");
    CHECK(pthread_kill(w, 0) == 0, "pthread_kill(t, 0) finds a live thread");
    __atomic_store_n(&release_flag, 1, __ATOMIC_RELEASE);
    pthread_join(w, NULL);
    int (*py)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "pthread_yield");
    /* Only a compat symbol in glibc 2.36 (dlsym finds none); goshim's, if found, yields. */
    CHECK(!py || py() == 0, "the pthread_yield symbol of older binaries");
    printf("affinity, scheduling, kill probe: as natively\n");
}

int main(void)
{
    check_create_join();
    check_timed_joins();
    check_join_errors();
    check_getattr();
    check_names();
    check_once();
    check_keys();
    check_tid_calls();
    CHECK(sched_yield() == 0, "sched_yield");
    printf("%s\n", failures ? "FAILED" : "all passed");
    return failures ? 1 : 0;
}
