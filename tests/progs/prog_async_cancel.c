/*
 * Asynchronous cancellation (redis's killIOThreads): a thread that set
 * PTHREAD_CANCEL_ASYNCHRONOUS is cancelled while blocked on a mutex that
 * main holds, or while spinning without calls, and joined.
 *
 *   prog_async_cancel mutex|spin
 *
 * Output: "cancel 0, join 0, PTHREAD_CANCELED: yes"; exit 0.
 */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static volatile unsigned long spins;
static int started;

static void *victim(void *arg)
{
    pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
    pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, NULL);
    __atomic_store_n(&started, 1, __ATOMIC_RELEASE);
    if (arg)
        for (;;)
            spins++;
    pthread_mutex_lock(&mu); /* main holds it */
    pthread_mutex_unlock(&mu);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 2 || (strcmp(argv[1], "mutex") && strcmp(argv[1], "spin"))) {
        fprintf(stderr, "usage: prog_async_cancel mutex|spin\n");
        return 2;
    }
    int spinning = !strcmp(argv[1], "spin");
    pthread_t t;
    void *ret;
    pthread_mutex_lock(&mu);
    pthread_create(&t, NULL, victim, spinning ? (void *)1 : NULL);
    while (!__atomic_load_n(&started, __ATOMIC_ACQUIRE))
        sched_yield();
    int c = pthread_cancel(t);
    int j = pthread_join(t, &ret);
    printf("cancel %d, join %d, PTHREAD_CANCELED: %s\n", c, j,
           ret == PTHREAD_CANCELED ? "yes" : "no");
    return 0;
}
