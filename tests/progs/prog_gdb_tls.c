/*
 * For a debugger test: 3 threads, each with its own __thread value, stop
 * in gdb_stop_here() while they hold it; the main thread joins them.
 *
 *   usage: prog_gdb_tls
 *
 * gdb, at the breakpoint in gdb_stop_here, can compare $fs_base with
 * gdb_self (the thread's pthread_self()) and read tls_value, which is
 * 4242 + the thread's number. Prints "tls ok" when every thread read its
 * own value back.
 */
#include <pthread.h>
#include <stdio.h>

static __thread long tls_value;
volatile void *gdb_self; /* pthread_self() of the thread stopped in gdb_stop_here */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int bad;

__attribute__((noinline)) void gdb_stop_here(long id)
{
    __asm__ volatile("" ::"r"(id) : "memory");
}

static void *worker(void *arg)
{
    long id = (long)arg;
    tls_value = 4242 + id;
    sched_yield();
    pthread_mutex_lock(&mu);
    gdb_self = (void *)pthread_self();
    gdb_stop_here(id);
    pthread_mutex_unlock(&mu);
    if (tls_value != 4242 + id)
        bad++;
    return NULL;
}

int main(void)
{
    pthread_t t[3];
    for (long i = 0; i < 3; i++)
        if (pthread_create(&t[i], NULL, worker, (void *)i) != 0)
            return 2;
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    printf(bad ? "tls wrong\n" : "tls ok\n");
    return bad != 0;
}
