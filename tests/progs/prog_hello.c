/*
 * prog_hello: four threads each print one line, main joins them and prints
 * "done". The smallest check that a preloaded library leaves a threaded
 * program's behaviour alone.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define NTHREADS 4

static void *hello(void *arg)
{
    printf("hello from thread %ld\n", (long)arg);
    return NULL;
}

int main(void)
{
    pthread_t th[NTHREADS];

    for (long i = 0; i < NTHREADS; i++) {
        int rc = pthread_create(&th[i], NULL, hello, (void *)i);

        if (rc != 0) {
            fprintf(stderr, "prog_hello: pthread_create: %s\n", strerror(rc));
            return 1;
        }
    }
    for (int i = 0; i < NTHREADS; i++) {
        int rc = pthread_join(th[i], NULL);

        if (rc != 0) {
            fprintf(stderr, "prog_hello: pthread_join: %s\n", strerror(rc));
            return 1;
        }
    }
    printf("done\n");
    return 0;
}
