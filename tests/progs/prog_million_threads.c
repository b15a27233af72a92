/*
 * N threads (default 1,000,000) alive at once, all blocked in
 * pthread_cond_wait, released by one broadcast, then joined; every one is
 * accounted for: each records that it ran and returns a value made from
 * its own number, and main checks both for every thread it joins.
 *
 *   usage: prog_million_threads [N [STACK_KIB]]   (STACK_KIB 0: default size)
 *
 * Prints "released and joined N threads, every one accounted for" and
 * exits 0; "pthread_create failed after K threads: ..." and exits 2 (the
 * K made are still released and joined); any thread missing or wrong
 * exits 3. Natively it stops near pid_max.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t started_cv = PTHREAD_COND_INITIALIZER;
static pthread_cond_t go_cv = PTHREAD_COND_INITIALIZER;
static long started, finished, target = -1; /* m */
static int go;                              /* m */
static unsigned char *ran;                  /* ran[i]: thread i got past its wait */

static void *waiter(void *arg)
{
    uintptr_t i = (uintptr_t)arg;
    pthread_mutex_lock(&m);
    if (++started == target)
        pthread_cond_signal(&started_cv);
    while (!go)
        pthread_cond_wait(&go_cv, &m);
    finished++;
    pthread_mutex_unlock(&m);
    ran[i]++;
    return (void *)(i * 2 + 1);
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    long kib = argc > 2 ? atol(argv[2]) : 64;
    if (n < 1 || kib < 0) {
        fprintf(stderr, "usage: %s [N [STACK_KIB]]\n", argv[0]);
        return 1;
    }
    pthread_t *t = calloc((size_t)n, sizeof *t);
    ran = calloc((size_t)n, 1);
    if (!t || !ran)
        return 1;
    pthread_attr_t a;
    pthread_attr_init(&a);
    if (kib)
        pthread_attr_setstacksize(&a, (size_t)kib * 1024);
    long made = 0;
    int err = 0;
    for (; made < n; made++) {
        err = pthread_create(&t[made], &a, waiter, (void *)(uintptr_t)made);
        if (err)
            break;
    }
    pthread_mutex_lock(&m);
    target = made;
    while (started < made)
        pthread_cond_wait(&started_cv, &m);
    go = 1;
    pthread_cond_broadcast(&go_cv);
    pthread_mutex_unlock(&m);
    long bad = 0;
    for (long i = 0; i < made; i++) {
        void *ret = NULL;
        int e = pthread_join(t[i], &ret);
        if (e != 0 || ret != (void *)(uintptr_t)(i * 2 + 1) || ran[i] != 1) {
            if (bad++ < 5)
                printf("thread %ld: join %d, returned %p, ran %d times\n", i, e, ret, ran[i]);
        }
    }
    if (bad || finished != made) {
        printf("%ld threads wrong, %ld finished of %ld\n", bad, finished, made);
        return 3;
    }
    if (made < n) {
        printf("pthread_create failed after %ld threads: %s\n", made, strerror(err));
        return 2;
    }
    printf("released and joined %ld threads, every one accounted for\n", n);
    return 0;
}
