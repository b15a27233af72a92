/*
 * prog_malloc_arenas: how many malloc arenas threads that allocate leave the process, and
 * that every block stays its owner's.
 *
 *   prog_malloc_arenas THREADS MAX
 *   prog_malloc_arenas main THREADS MAX
 *
 * main: THREADS threads wait (parked in a condition wait), and main alone allocates, in 20
 * rounds 1 ms apart (under goshim its thread may resume on another OS thread each time):
 * glibc keeps the main thread on main_arena, so natively the process has that one arena.
 * Prints "main allocating, THREADS threads waiting: at most MAX arenas" (else how many,
 * exit 1). Otherwise:
 *
 * THREADS threads each allocate 1000 blocks of assorted sizes, all alive at once (a
 * barrier), each filled with its owner's byte; main counts glibc's arenas then
 * (malloc_info: one <heap nr=...> per arena) and the threads check their blocks and free
 * them. glibc gives each thread that allocates an arena of its own, up to eight per CPU:
 * natively THREADS + 1. Every arena is locked and unlocked at each fork, a page copied in
 * the parent and in the child. Then a fork child does it all again with the same threads
 * count, and must exit 0. Prints "THREADS threads allocating at once: at most MAX arenas"
 * and exits 0; else says how many and exits 1.
 */
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "prog_check.h"

enum { BLOCKS = 1000, MAX_THREADS = 64 };

static pthread_barrier_t all_hold, counted;

static void *allocator(void *arg)
{
    unsigned char mark = (unsigned char)(uintptr_t)arg;
    unsigned char *blocks[BLOCKS];
    size_t sizes[BLOCKS];
    for (int i = 0; i < BLOCKS; i++) {
        sizes[i] = 16 + (size_t)(i * 37 % 2000);
        blocks[i] = malloc(sizes[i]);
        CHECK(blocks[i] != NULL);
        memset(blocks[i], mark, sizes[i]);
    }
    pthread_barrier_wait(&all_hold);
    pthread_barrier_wait(&counted);
    for (int i = 0; i < BLOCKS; i++) {
        for (size_t j = 0; j < sizes[i]; j++)
            CHECK(blocks[i][j] == mark);
        free(blocks[i]);
    }
    return NULL;
}

static int count_arenas(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK(f != NULL);
    CHECK(malloc_info(0, f) == 0);
    fclose(f);
    int n = 0;
    for (char *p = buf; (p = strstr(p, "<heap nr=")); p++)
        n++;
    free(buf);
    return n;
}

/* The threads allocate, main counts the arenas meanwhile. */
static int one_run(int nthreads)
{
    pthread_t t[MAX_THREADS];
    EXPECT(pthread_barrier_init(&all_hold, NULL, (unsigned)nthreads + 1), 0);
    EXPECT(pthread_barrier_init(&counted, NULL, (unsigned)nthreads + 1), 0);
    for (int i = 0; i < nthreads; i++)
        EXPECT(pthread_create(&t[i], NULL, allocator, (void *)(uintptr_t)(i + 1)), 0);
    pthread_barrier_wait(&all_hold);
    int arenas = count_arenas();
    pthread_barrier_wait(&counted);
    for (int i = 0; i < nthreads; i++)
        EXPECT(pthread_join(t[i], NULL), 0);
    EXPECT(pthread_barrier_destroy(&all_hold), 0);
    EXPECT(pthread_barrier_destroy(&counted), 0);
    return arenas;
}

static pthread_mutex_t park_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t park_cv = PTHREAD_COND_INITIALIZER;
static int park_done;

static void *parked(void *arg)
{
    EXPECT(pthread_mutex_lock(&park_mu), 0);
    while (!park_done)
        EXPECT(pthread_cond_wait(&park_cv, &park_mu), 0);
    EXPECT(pthread_mutex_unlock(&park_mu), 0);
    return arg;
}

static int main_alone(int nthreads, int max)
{
    pthread_t t[MAX_THREADS];
    for (int i = 0; i < nthreads; i++)
        EXPECT(pthread_create(&t[i], NULL, parked, NULL), 0);
    static unsigned char *blocks[20][100];
    for (int r = 0; r < 20; r++) {
        for (int i = 0; i < 100; i++) {
            blocks[r][i] = malloc(64 + (size_t)i * 7);
            CHECK(blocks[r][i] != NULL);
            memset(blocks[r][i], r + 1, 64 + (size_t)i * 7);
        }
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    int arenas = count_arenas();
    for (int r = 0; r < 20; r++)
        for (int i = 0; i < 100; i++) {
            for (size_t j = 0; j < 64 + (size_t)i * 7; j++)
                CHECK(blocks[r][i][j] == r + 1);
            free(blocks[r][i]);
        }
    EXPECT(pthread_mutex_lock(&park_mu), 0);
    park_done = 1;
    EXPECT(pthread_cond_broadcast(&park_cv), 0);
    EXPECT(pthread_mutex_unlock(&park_mu), 0);
    for (int i = 0; i < nthreads; i++)
        EXPECT(pthread_join(t[i], NULL), 0);
    if (arenas > max) {
        printf("main allocating, %d threads waiting: %d arenas, more than %d\n", nthreads, arenas,
               max);
        return 1;
    }
    printf("main allocating, %d threads waiting: at most %d arenas\n", nthreads, max);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "main")) {
        int n = atoi(argv[2]), m = atoi(argv[3]);
        if (n < 0 || n > MAX_THREADS || m < 1) {
            fprintf(stderr, "usage: prog_malloc_arenas main THREADS MAX\n");
            return 2;
        }
        return main_alone(n, m);
    }
    int nthreads = argc > 2 ? atoi(argv[1]) : 0, max = argc > 2 ? atoi(argv[2]) : 0;
    if (nthreads < 1 || nthreads > MAX_THREADS || max < 1) {
        fprintf(stderr, "usage: prog_malloc_arenas THREADS MAX   (THREADS <= %d)\n", MAX_THREADS);
        return 2;
    }
    int arenas = one_run(nthreads);
    if (arenas > max) {
        printf("%d threads allocating at once: %d arenas, more than %d\n", nthreads, arenas, max);
        return 1;
    }
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0)
        _exit(one_run(nthreads) > 0 ? 0 : 3);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        printf("fork child: status %#x\n", st);
        return 1;
    }
    printf("%d threads allocating at once: at most %d arenas\n", nthreads, max);
    return 0;
}
