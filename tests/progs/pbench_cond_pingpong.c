/*
 * pbench_cond_pingpong: two threads hand a turn back and forth through one
 * mutex and two condition variables; ns per one-way hand-off.
 *
 *   usage: pbench_cond_pingpong ROUNDS     (2 * ROUNDS hand-offs)
 *
 * Prints one line: "ns_per_op=X handoffs=N".
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv[2] = {PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER};
static long turn; /* whose turn: turn % 2; protected by m */
static long rounds;

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void *player(void *arg)
{
    long me = (long)arg;
    pthread_mutex_lock(&m);
    for (long i = 0; i < rounds; i++) {
        while (turn % 2 != me)
            pthread_cond_wait(&cv[me], &m);
        turn++;
        pthread_cond_signal(&cv[1 - me]);
    }
    pthread_mutex_unlock(&m);
    return NULL;
}

int main(int argc, char **argv)
{
    rounds = argc > 1 ? atol(argv[1]) : 10000;
    if (rounds < 1) {
        fprintf(stderr, "usage: %s ROUNDS\n", argv[0]);
        return 1;
    }
    pthread_t t[2];
    double t0 = now_ns();
    for (long i = 0; i < 2; i++)
        if (pthread_create(&t[i], NULL, player, (void *)i) != 0) {
            fprintf(stderr, "pbench_cond_pingpong: pthread_create failed\n");
            return 2;
        }
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    double ns = now_ns() - t0;
    if (turn != 2 * rounds) {
        fprintf(stderr, "pbench_cond_pingpong: turn %ld, expected %ld\n", turn, 2 * rounds);
        return 3;
    }
    printf("ns_per_op=%.1f handoffs=%ld\n", ns / (double)(2 * rounds), 2 * rounds);
    return 0;
}
