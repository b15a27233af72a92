/*
 * Deadlocks, for goshim's reports (GOSHIM_DEADLOCK) and dumps (SIGQUIT).
 *
 *   prog_deadlock lockorder   threads "left" and "right" take mutexes A and B in
 *                             opposite orders, each holding its first until the other
 *                             holds its own: a deadlock. Prints "A=<addr> B=<addr>" first.
 *                             Natively it hangs forever (a test kills it).
 *   prog_deadlock leak        a thread named "stuck" waits on a condition variable nobody
 *                             signals; main prints "exiting" and returns (a leak, for
 *                             GOSHIM_STATS)
 *   prog_deadlock leaks       "left" and "right" deadlock as in lockorder, "joiner" joins
 *                             "left", "stuck" waits as in leak; once both mutexes have a
 *                             waiter main prints "exiting" and returns (for GOSHIM_STATS:
 *                             three threads wait for good, "stuck" only still waits)
 *   prog_deadlock orphan      "owner" locks a mutex and returns holding it; "orphaned"
 *                             then waits on it for good; main prints "exiting" and returns
 *   prog_deadlock handler     a thread named "waiter" waits on a semaphore that only a
 *                             SIGUSR1 handler posts, and main joins it: prints "ready" and
 *                             waits for the signal (no deadlock: it comes from outside).
 *                             Then, SIGUSR1 back at its default, prints "woken" and
 *                             deadlocks as lockorder does.
 *   prog_deadlock quit        main and 3 threads wait on a condition variable nobody
 *                             signals, with a timer-free wait; prints "ready" and waits
 *                             for SIGQUIT.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

static pthread_mutex_t a = PTHREAD_MUTEX_INITIALIZER, b = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t both_hold;

static void *left(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "left");
    pthread_mutex_lock(&a);
    pthread_barrier_wait(&both_hold);
    pthread_mutex_lock(&b);
    return NULL;
}

static void *right(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "right");
    pthread_mutex_lock(&b);
    pthread_barrier_wait(&both_hold);
    pthread_mutex_lock(&a);
    return NULL;
}

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t never = PTHREAD_COND_INITIALIZER;

static int sleeping; /* sleepers that hold or have released mu in their wait; mu */

static void *sleeper(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&mu);
    sleeping++;
    for (;;)
        pthread_cond_wait(&never, &mu);
    return NULL;
}

static void *stuck(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "stuck");
    pthread_mutex_lock(&mu);
    pthread_barrier_wait(&both_hold);
    for (;;)
        pthread_cond_wait(&never, &mu);
    return NULL;
}

static void *joiner(void *arg)
{
    pthread_setname_np(pthread_self(), "joiner");
    pthread_join(*(pthread_t *)arg, NULL);
    return NULL;
}

/* Both mutexes locked with a waiter: glibc's (and goshim's) lock word is 2 then. */
static int both_contended(void)
{
    return __atomic_load_n(&a.__data.__lock, __ATOMIC_ACQUIRE) == 2 &&
           __atomic_load_n(&b.__data.__lock, __ATOMIC_ACQUIRE) == 2;
}

static int leaks(void)
{
    static pthread_t l, r, j, s;
    pthread_barrier_init(&both_hold, NULL, 2);
    pthread_create(&l, NULL, left, NULL);
    pthread_create(&r, NULL, right, NULL);
    pthread_create(&j, NULL, joiner, &l);
    while (!both_contended())
        sched_yield();
    pthread_barrier_destroy(&both_hold);
    pthread_barrier_init(&both_hold, NULL, 2);
    pthread_create(&s, NULL, stuck, NULL);
    pthread_barrier_wait(&both_hold); /* "stuck" holds mu ... */
    pthread_mutex_lock(&mu);          /* ... until its cond_wait lets it go */
    pthread_mutex_unlock(&mu);
    sched_yield(); /* with one P: every runnable thread runs to its wait first */
    printf("exiting\n");
    return 0;
}

static pthread_mutex_t kept = PTHREAD_MUTEX_INITIALIZER;

static void *owner(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&kept); /* and never unlocks it */
    return NULL;
}

static void *orphaned(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "orphaned");
    pthread_mutex_lock(&kept);
    return NULL;
}

static int orphan(void)
{
    pthread_t o, w;
    pthread_create(&o, NULL, owner, NULL);
    pthread_join(o, NULL);
    pthread_create(&w, NULL, orphaned, NULL);
    while (__atomic_load_n(&kept.__data.__lock, __ATOMIC_ACQUIRE) != 2)
        sched_yield();
    sched_yield(); /* with one P: it runs to its wait first */
    printf("exiting\n");
    return 0;
}

static sem_t posted_by_handler;

static void post(int sig)
{
    (void)sig;
    sem_post(&posted_by_handler); /* async-signal-safe */
}

static void *waiter(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "waiter");
    while (sem_wait(&posted_by_handler) != 0)
        ;
    return NULL;
}

static int lockorder(void)
{
    pthread_t l, r;
    printf("A=%p B=%p\n", (void *)&a, (void *)&b);
    pthread_barrier_init(&both_hold, NULL, 2);
    pthread_create(&l, NULL, left, NULL);
    pthread_create(&r, NULL, right, NULL);
    pthread_join(l, NULL);
    pthread_join(r, NULL);
    return 0;
}

static int handler(void)
{
    pthread_t w;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = post;
    sa.sa_flags = SA_RESTART;
    sem_init(&posted_by_handler, 0, 0);
    sigaction(SIGUSR1, &sa, NULL);
    pthread_create(&w, NULL, waiter, NULL);
    printf("ready\n");
    pthread_join(w, NULL);
    signal(SIGUSR1, SIG_DFL);
    printf("woken\n");
    return lockorder();
}

int main(int argc, char **argv)
{
    pthread_t l;
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc == 2 && !strcmp(argv[1], "lockorder"))
        return lockorder();
    if (argc == 2 && !strcmp(argv[1], "handler"))
        return handler();
    if (argc == 2 && !strcmp(argv[1], "leak")) {
        pthread_barrier_init(&both_hold, NULL, 2); /* before the thread can wait on it */
        pthread_create(&l, NULL, stuck, NULL);
        pthread_barrier_wait(&both_hold); /* it is named and holds mu ... */
        pthread_mutex_lock(&mu);          /* ... until its cond_wait lets it go */
        pthread_mutex_unlock(&mu);
        printf("exiting\n");
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "leaks"))
        return leaks();
    if (argc == 2 && !strcmp(argv[1], "orphan"))
        return orphan();
    if (argc == 2 && !strcmp(argv[1], "quit")) {
        pthread_t t[3];
        for (int i = 0; i < 3; i++)
            pthread_create(&t[i], NULL, sleeper, NULL);
        for (;;) { /* all three counted and in cond_wait (mu free again) */
            pthread_mutex_lock(&mu);
            int n = sleeping;
            pthread_mutex_unlock(&mu);
            if (n == 3)
                break;
            sched_yield();
        }
        printf("ready\n");
        pthread_join(t[0], NULL);
        return 0;
    }
    fprintf(stderr, "usage: prog_deadlock lockorder|handler|leak|leaks|orphan|quit\n");
    return 2;
}
