/*
 * pbench_pipeline: three threads pass blocks down a chain, as a parallel
 * decompressor's reader, worker and writer do: the reader fills a block,
 * the worker checksums it (a few microseconds of CPU), the writer folds
 * the checksum in. Each link holds one block (a mutex, two condition
 * variables), so every block is two hand-offs, each to a thread that may
 * be asleep; ns per block.
 *
 *   usage: pbench_pipeline BLOCKS [BLOCK_BYTES]
 *
 * Prints one line: "ns_per_op=X blocks=N".
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct link {
    pthread_mutex_t m;
    pthread_cond_t filled, emptied;
    int full;
    uint64_t value;       /* the writer's link: a checksum */
    unsigned char *block; /* the worker's link: a block */
};

static struct link to_worker = {
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, NULL};
static struct link to_writer = {
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, NULL};
static long blocks;
static size_t block_bytes;
static uint64_t total; /* the writer's sum of checksums */

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void put(struct link *l, unsigned char *block, uint64_t value)
{
    pthread_mutex_lock(&l->m);
    while (l->full)
        pthread_cond_wait(&l->emptied, &l->m);
    l->block = block;
    l->value = value;
    l->full = 1;
    pthread_cond_signal(&l->filled);
    pthread_mutex_unlock(&l->m);
}

static unsigned char *take(struct link *l, uint64_t *value)
{
    pthread_mutex_lock(&l->m);
    while (!l->full)
        pthread_cond_wait(&l->filled, &l->m);
    unsigned char *block = l->block;
    *value = l->value;
    l->full = 0;
    pthread_cond_signal(&l->emptied);
    pthread_mutex_unlock(&l->m);
    return block;
}

static uint64_t checksum(const unsigned char *p, size_t n)
{
    uint64_t h = 1469598103934665603u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211u;
    return h;
}

/* Three buffers: the reader fills one, the link holds one, the worker reads one. */
static unsigned char *buf[3];

/* The reader's blocks: xorshift64 from a fixed seed. */
static void fill(unsigned char *b, uint64_t *x)
{
    for (size_t k = 0; k < block_bytes; k += 8) {
        *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
        memcpy(b + k, x, 8);
    }
}

static void *reader(void *arg)
{
    (void)arg;
    uint64_t x = 88172645463325252u;
    for (long i = 0; i < blocks; i++) {
        unsigned char *b = buf[i % 3];
        fill(b, &x);
        put(&to_worker, b, (uint64_t)i);
    }
    return NULL;
}

static void *worker(void *arg)
{
    (void)arg;
    for (long i = 0; i < blocks; i++) {
        uint64_t seq;
        unsigned char *b = take(&to_worker, &seq);
        put(&to_writer, NULL, checksum(b, block_bytes) + seq);
    }
    return NULL;
}

static void *writer(void *arg)
{
    (void)arg;
    for (long i = 0; i < blocks; i++) {
        uint64_t v;
        take(&to_writer, &v);
        total += v;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    blocks = argc > 1 ? atol(argv[1]) : 20000;
    block_bytes = argc > 2 ? (size_t)atol(argv[2]) : 4096;
    if (blocks < 1 || block_bytes < 8 || block_bytes % 8) {
        fprintf(stderr, "usage: %s BLOCKS [BLOCK_BYTES, a multiple of 8]\n", argv[0]);
        return 1;
    }
    for (int i = 0; i < 3; i++)
        if (!(buf[i] = malloc(block_bytes))) {
            fprintf(stderr, "pbench_pipeline: out of memory\n");
            return 2;
        }
    void *(*stage[3])(void *) = {reader, worker, writer};
    pthread_t t[3];
    double t0 = now_ns();
    for (int i = 0; i < 3; i++)
        if (pthread_create(&t[i], NULL, stage[i], NULL) != 0) {
            fprintf(stderr, "pbench_pipeline: pthread_create failed\n");
            return 2;
        }
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    double ns = now_ns() - t0;
    /* The same sum, computed by one thread: every block went through, once, intact. */
    uint64_t want = 0, x = 88172645463325252u;
    for (long i = 0; i < blocks; i++) {
        fill(buf[0], &x);
        want += checksum(buf[0], block_bytes) + (uint64_t)i;
    }
    if (total != want) {
        fprintf(stderr, "pbench_pipeline: the writer's sum %llx, expected %llx\n",
                (unsigned long long)total, (unsigned long long)want);
        return 3;
    }
    printf("ns_per_op=%.1f blocks=%ld\n", ns / (double)blocks, blocks);
    return 0;
}
