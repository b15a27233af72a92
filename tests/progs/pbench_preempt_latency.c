/*
 * pbench_preempt_latency: how late does a sleeping thread wake up beside a
 * thread that never gives way?
 *
 *   usage: pbench_preempt_latency [SAMPLES]     (default 500)
 *
 * A "ticker" thread sleeps 1 ms with nanosleep SAMPLES times and records
 * how late each wake-up is: (time after the call - time before it) - 1 ms,
 * on CLOCK_MONOTONIC. A "spinner" thread spins, with no calls at all, until
 * the ticker is done. Meant for scripts/bench_preempt.sh, which runs it
 * under goshim with GOSHIM_PROCS=1 (one P: the ticker runs again only when
 * the spinner is preempted, so it is late by up to GOSHIM_PREEMPT ms) with
 * GOSHIM_PREEMPT=10 and =2, and natively for information. Without
 * preemption (GOSHIM_PREEMPT=0) and one P it never finishes. Prints one
 * line (times in ms):
 *   samples=N sleep_ms=1 median_ms=A p90_ms=B p99_ms=C max_ms=D spinner_ran=yes|no
 * (spinner_ran: the spinner counted iterations, i.e. it did compete); exit
 * 0, or 1 (usage), 2 (a call failed).
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SLEEP_NS   1000000L
#define MAX_SAMPLE 1000000L

static long samples = 500;
static double *late_ms;
static int done;
static unsigned long spins;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void *ticker(void *arg)
{
    const struct timespec req = {0, SLEEP_NS};

    (void)arg;
    for (long i = 0; i < samples; i++) {
        double t0 = now_ms();
        /* One sleep of 1 ms per sample: an interrupted sleep would not be one (none expected). */
        if (nanosleep(&req, NULL) != 0) {
            fprintf(stderr, "pbench_preempt_latency: nanosleep: %s\n", strerror(errno));
            exit(2);
        }
        late_ms[i] = now_ms() - t0 - (double)SLEEP_NS * 1e-6;
    }
    __atomic_store_n(&done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* No calls in the loop. */
static void *spinner(void *arg)
{
    unsigned long n = 0;

    (void)arg;
    while (!__atomic_load_n(&done, __ATOMIC_ACQUIRE))
        n++;
    spins = n;
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The p-th percentile (nearest rank) of the sorted v[0..n-1]. */
static double pct(const double *v, long n, double p)
{
    long r = (long)(p / 100.0 * (double)n + 0.999999);
    if (r < 1)
        r = 1;
    return v[r > n ? n - 1 : r - 1];
}

int main(int argc, char **argv)
{
    pthread_t tt, st;
    int rc;

    if (argc > 2) {
        fprintf(stderr, "usage: %s [SAMPLES]\n", argv[0]);
        return 1;
    }
    if (argc == 2) {
        char *end;
        errno = 0;
        samples = strtol(argv[1], &end, 10);
        if (errno != 0 || *end != '\0' || end == argv[1] || samples < 1 || samples > MAX_SAMPLE) {
            fprintf(stderr, "pbench_preempt_latency: SAMPLES must be 1..%ld, not '%s'\n",
                    MAX_SAMPLE, argv[1]);
            return 1;
        }
    }
    late_ms = calloc((size_t)samples, sizeof *late_ms);
    if (late_ms == NULL) {
        fprintf(stderr, "pbench_preempt_latency: out of memory\n");
        return 2;
    }
    if ((rc = pthread_create(&st, NULL, spinner, NULL)) != 0 ||
        (rc = pthread_create(&tt, NULL, ticker, NULL)) != 0 || (rc = pthread_join(tt, NULL)) != 0 ||
        (rc = pthread_join(st, NULL)) != 0) {
        fprintf(stderr, "pbench_preempt_latency: pthread: %s\n", strerror(rc));
        return 2;
    }
    qsort(late_ms, (size_t)samples, sizeof *late_ms, cmp_double);
    printf("samples=%ld sleep_ms=1 median_ms=%.3f p90_ms=%.3f p99_ms=%.3f max_ms=%.3f "
           "spinner_ran=%s\n",
           samples, pct(late_ms, samples, 50), pct(late_ms, samples, 90), pct(late_ms, samples, 99),
           late_ms[samples - 1], spins > 0 ? "yes" : "no");
    return 0;
}
