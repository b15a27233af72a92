/*
 * prog_fault_create: does every pthread_create either make a thread that
 * runs, or fail with EAGAIN and nothing else?
 *
 *   prog_fault_create N [small]
 *
 * Creates N threads, joinable, each adding its index to a sum; "small"
 * gives them a 32 KiB stack (pthread_attr_setstacksize), else the default.
 * Every one created is joined and must have run; a failed create must say
 * EAGAIN (glibc's answer when the stack or the thread cannot be made).
 * Prints
 *   create: N tried, every created thread ran, failures were EAGAIN
 * and, on stderr, how many were created and how many failed. Exit 0, 1
 * when a check fails, 2 on a usage error.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXN 256

static long ran[MAXN];

static void *body(void *arg)
{
    long i = (long)arg;
    ran[i] = i + 1;
    return (void *)(i + 1);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 0;
    if (n < 1 || n > MAXN)
        return 2;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    if (argc > 2 && !strcmp(argv[2], "small"))
        pthread_attr_setstacksize(&attr, 32 * 1024);
    pthread_t t[MAXN];
    int made[MAXN], ncreated = 0, nfailed = 0;
    for (int i = 0; i < n; i++) {
        int err = pthread_create(&t[i], &attr, body, (void *)(long)i);
        made[i] = err == 0;
        if (err == 0) {
            ncreated++;
        } else if (err == EAGAIN) {
            nfailed++;
        } else {
            fprintf(stderr, "pthread_create %d: %s, not EAGAIN\n", i, strerror(err));
            return 1;
        }
    }
    for (int i = 0; i < n; i++) {
        void *ret;
        if (!made[i])
            continue;
        if (pthread_join(t[i], &ret) != 0 || (long)ret != i + 1 || ran[i] != i + 1) {
            fprintf(stderr, "thread %d did not run\n", i);
            return 1;
        }
    }
    fprintf(stderr, "created=%d eagain=%d\n", ncreated, nfailed);
    printf("create: %d tried, every created thread ran, failures were EAGAIN\n", n);
    return 0;
}
