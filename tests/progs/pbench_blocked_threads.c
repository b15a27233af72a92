/*
 * pbench_blocked_threads: N threads alive at once, all blocked in
 * pthread_cond_wait, released by one broadcast, then joined. Reports the
 * wall time of the whole and the peak RSS (getrusage ru_maxrss).
 *
 *   usage: pbench_blocked_threads N [cond|pshared|sleep [STACK_KIB]]
 *
 * cond (the default): as above. pshared: the same with a process-shared mutex and
 * conditions, which are glibc's (under goshim each waiting thread holds an OS thread in
 * the kernel, as natively). sleep: each thread sleeps SLEEP_MS once
 * (nanosleep) instead of waiting for the broadcast, then exits; the time
 * reported is the whole minus that sleep (the sleepers' cost, not their
 * sleep). Threads get 64 KiB stacks (STACK_KIB; 0 = the default size) so
 * that natively the address space is not the limit; natively the limit is
 * kernel.pid_max. tests/bench/go/gobench.go is its Go twin. Prints one line:
 *   "seconds=X peak_rss_kb=Y threads=N"                   exit 0, or
 *   "failed_after=K seconds=X peak_rss_kb=Y error=..."    exit 2
 * (on failure the K threads made are still released and joined).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t started_cv = PTHREAD_COND_INITIALIZER;
static pthread_cond_t go_cv = PTHREAD_COND_INITIALIZER;
static long started, finished; /* protected by m */
static long target = -1;       /* threads made, once known; protected by m */
static int go;                 /* protected by m */
enum { SLEEP_MS = 500 };

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *sleeper(void *arg)
{
    (void)arg;
    struct timespec d = {SLEEP_MS / 1000, (SLEEP_MS % 1000) * 1000000L};
    while (nanosleep(&d, &d) != 0)
        ;
    pthread_mutex_lock(&m);
    finished++;
    pthread_mutex_unlock(&m);
    return NULL;
}

static void *waiter(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&m);
    if (++started == target)
        pthread_cond_signal(&started_cv);
    while (!go)
        pthread_cond_wait(&go_cv, &m);
    finished++;
    pthread_mutex_unlock(&m);
    return NULL;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 10000;
    int sleep_mode = argc > 2 && strcmp(argv[2], "sleep") == 0;
    int pshared = argc > 2 && strcmp(argv[2], "pshared") == 0;
    long kib = argc > 3 ? atol(argv[3]) : 64;
    if (n < 1 || kib < 0 || (argc > 2 && !sleep_mode && !pshared && strcmp(argv[2], "cond") != 0)) {
        fprintf(stderr, "usage: %s N [cond|pshared|sleep [STACK_KIB]]\n", argv[0]);
        return 1;
    }
    if (pshared) {
        pthread_mutexattr_t ma;
        pthread_condattr_t ca;
        pthread_mutexattr_init(&ma);
        pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
        pthread_mutex_init(&m, &ma);
        pthread_condattr_init(&ca);
        pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
        pthread_cond_init(&started_cv, &ca);
        pthread_cond_init(&go_cv, &ca);
    }
    pthread_t *t = calloc((size_t)n, sizeof *t);
    if (t == NULL)
        return 1;
    pthread_attr_t a;
    pthread_attr_init(&a);
    if (kib)
        pthread_attr_setstacksize(&a, (size_t)kib * 1024);
    int err = 0;
    long made = 0;
    double t0 = now_s();
    for (; made < n; made++) {
        err = pthread_create(&t[made], &a, sleep_mode ? sleeper : waiter, NULL);
        if (err != 0)
            break;
    }
    if (sleep_mode)
        goto join;
    /* Wait until every thread made is blocked (or about to block: it holds
     * m until pthread_cond_wait releases it). */
    pthread_mutex_lock(&m);
    target = made;
    while (started < made)
        pthread_cond_wait(&started_cv, &m);
    go = 1;
    pthread_cond_broadcast(&go_cv);
    pthread_mutex_unlock(&m);
join:
    for (long i = 0; i < made; i++)
        pthread_join(t[i], NULL);
    double secs = now_s() - t0 - (sleep_mode ? SLEEP_MS / 1000.0 : 0);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    if (finished != made) {
        fprintf(stderr, "pbench_blocked_threads: %ld finished of %ld\n", finished, made);
        return 3;
    }
    if (made < n) {
        printf("failed_after=%ld seconds=%.3f peak_rss_kb=%ld error=%s\n", made, secs, ru.ru_maxrss,
               strerror(err));
        return 2;
    }
    printf("seconds=%.3f peak_rss_kb=%ld threads=%ld\n", secs, ru.ru_maxrss, n);
    return 0;
}
