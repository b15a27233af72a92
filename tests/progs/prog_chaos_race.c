/*
 * A check-then-act race that ordinary schedules hide: two threads each
 * withdraw 100 from a balance of 100 if it is large enough, logging the
 * withdrawal under a mutex between the check and the update. Run as it
 * usually is, the first thread is done before the second looks, and the
 * balance ends at 0. Under goshim's chaos mode (GOSHIM_CHAOS=SEED), the
 * mutex is a point where the thread may be switched out, and some seeds
 * let both threads pass the check: the balance goes negative.
 *
 *   prog_chaos_race [ROUNDS]   (default 1: how many times to replay the race)
 *
 * Prints "balance ok" (exit 0) or "overdrawn: balance -100 in round N" (exit 1).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static int balance;
static int withdrawals;
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;

static void *withdraw(void *arg)
{
    (void)arg;
    if (balance >= 100) { /* check ... */
        pthread_mutex_lock(&log_mu);
        withdrawals++;
        pthread_mutex_unlock(&log_mu);
        balance -= 100; /* ... then act: the race */
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 1;
    for (int r = 1; r <= rounds; r++) {
        pthread_t a, b;
        balance = 100;
        if (pthread_create(&a, NULL, withdraw, NULL) || pthread_create(&b, NULL, withdraw, NULL))
            return 2;
        pthread_join(a, NULL);
        pthread_join(b, NULL);
        if (balance < 0) {
            printf("overdrawn: balance %d in round %d\n", balance, r);
            return 1;
        }
    }
    printf("balance ok\n");
    return 0;
}
