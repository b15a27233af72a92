/*
 * A schedule made visible: 4 threads take turns at a mutex 50 times each,
 * appending their number to a shared log; the program prints the first 60
 * entries and a hash of all 200. Its own behaviour does not depend on time,
 * so with one processor the order is the scheduler's alone: under
 * GOSHIM_CHAOS=SEED with GOSHIM_PROCS=1 the same seed prints the same line.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

enum { THREADS = 4, TURNS = 50 };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char order[THREADS * TURNS + 1];
static int len;

static void *turns(void *arg)
{
    char me = (char)('a' + (int)(intptr_t)arg);
    for (int i = 0; i < TURNS; i++) {
        pthread_mutex_lock(&mu);
        order[len++] = me;
        pthread_mutex_unlock(&mu);
    }
    return NULL;
}

int main(void)
{
    pthread_t t[THREADS];
    for (intptr_t i = 0; i < THREADS; i++)
        if (pthread_create(&t[i], NULL, turns, (void *)i))
            return 2;
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (int i = 0; i < len; i++)
        h = (h ^ (unsigned char)order[i]) * 1099511628211ULL;
    printf("%.60s %016llx\n", order, (unsigned long long)h);
    return len == THREADS * TURNS ? 0 : 1;
}
