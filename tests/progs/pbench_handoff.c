/*
 * pbench_handoff: does one thread blocked in the kernel stop the others?
 * Meant to be run with GOSHIM_PROCS=1 under goshim: with one logical
 * processor, only the hand-off of the P around a blocking call lets the
 * CPU-bound threads run while the blocked one waits.
 *
 *   usage: pbench_handoff pipe|fsync [DIR]
 *
 * One thread blocks:
 *   pipe   read() on a pipe that a forked child writes to 300 ms after start
 *   fsync  writes 64 MiB to a temporary file in DIR (default $TMPDIR, else
 *          /var/tmp), fsync()s it, unlinks it
 * and is surely inside that call (or just before it) when four CPU-bound
 * threads start, each doing ~50 ms of arithmetic (calibrated first).
 * Prints, in completion order, "cpuN done at X ms" and "blocked done at Y ms"
 * (since start), then
 *   "cpu_all_done_ms=A blocked_done_ms=B order=ok|bad"
 * where ok means every CPU thread finished before the blocked one. Exit 0
 * whatever the order; 1 usage, 2 a system call failed, 3 wrong arithmetic.
 *
 * The child uses raw system calls only (syscall(2)): it sleeps and writes
 * without touching any thread library state it inherited.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NCPU     4
#define FILE_MIB 64

static double t_start;
static long iters; /* arithmetic iterations for ~50 ms */
static int pfd[2];
static const char *mode, *dir;
static volatile int blocker_entering;
static uint64_t results[NCPU];

struct finish {
    const char *name;
    double ms;
};
static struct finish done_at[NCPU + 1];
static int ndone;
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void record(const char *name)
{
    double t = now_ms() - t_start;
    pthread_mutex_lock(&m);
    done_at[ndone].name = name;
    done_at[ndone].ms = t;
    ndone++;
    pthread_mutex_unlock(&m);
}

static void die(const char *what)
{
    fprintf(stderr, "pbench_handoff: %s: %s\n", what, strerror(errno));
    exit(2);
}

/* xorshift steps: cheap, no memory traffic, not foldable by the compiler. */
static uint64_t crunch(uint64_t x, long n)
{
    for (long i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        __asm__ volatile("" : "+r"(x));
    }
    return x;
}

static const char *cpu_names[NCPU] = {"cpu1", "cpu2", "cpu3", "cpu4"};

static void *cpu_thread(void *arg)
{
    long k = (long)arg;
    results[k] = crunch((uint64_t)k + 1, iters);
    record(cpu_names[k]);
    return NULL;
}

static void block_pipe(void)
{
    char c;
    blocker_entering = 1;
    ssize_t n;
    do
        n = read(pfd[0], &c, 1);
    while (n < 0 && errno == EINTR);
    if (n != 1)
        die("read from the pipe");
}

static void block_fsync(void)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/pbench_handoff.XXXXXX", dir);
    int fd = mkstemp(path);
    if (fd < 0)
        die(path);
    char *buf = malloc(1 << 20);
    if (buf == NULL)
        die("malloc");
    memset(buf, 0x5a, 1 << 20);
    blocker_entering = 1;
    for (int i = 0; i < FILE_MIB; i++) {
        size_t put = 0;
        while (put < (1u << 20)) {
            ssize_t w = write(fd, buf + put, (1u << 20) - put);
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0) {
                unlink(path);
                die("write to the temporary file");
            }
            put += (size_t)w;
        }
    }
    if (fsync(fd) != 0) {
        unlink(path);
        die("fsync");
    }
    close(fd);
    unlink(path);
    free(buf);
}

static void *blocked_thread(void *arg)
{
    (void)arg;
    if (strcmp(mode, "pipe") == 0)
        block_pipe();
    else
        block_fsync();
    record("blocked");
    return NULL;
}

/* Iterations for ~50 ms of crunch on the machine it runs on (best of 3). */
static long calibrate(void)
{
    long probe = 2000000;
    double best = 1e30;
    for (int i = 0; i < 3; i++) {
        double t = now_ms();
        results[0] = crunch(1, probe);
        t = now_ms() - t;
        if (t < best)
            best = t;
    }
    return (long)((double)probe * 50.0 / (best > 0.01 ? best : 0.01));
}

/* Forks the child that writes to the pipe 300 ms from now; returns its pid. */
static pid_t start_pipe_writer(void)
{
    if (pipe(pfd) != 0)
        die("pipe");
    pid_t child = fork();
    if (child < 0)
        die("fork");
    if (child == 0) {
        struct timespec ts = {0, 300 * 1000 * 1000};
        syscall(SYS_nanosleep, &ts, NULL);
        syscall(SYS_write, pfd[1], "x", 1);
        syscall(SYS_exit_group, 0);
    }
    close(pfd[1]);
    return child;
}

/* Starts the blocker, then (once it is entering its call) the CPU threads;
 * joins them all. Returns 0, or 2 if a thread could not be created. */
static int run_threads(void)
{
    pthread_t blocker, cpu[NCPU];
    int err = pthread_create(&blocker, NULL, blocked_thread, NULL);
    if (err != 0) {
        fprintf(stderr, "pbench_handoff: pthread_create: %s\n", strerror(err));
        return 2;
    }
    /* Let the blocker get into its call first (a yield lets it run on one CPU). */
    while (!blocker_entering)
        sched_yield();
    for (long k = 0; k < NCPU; k++)
        if ((err = pthread_create(&cpu[k], NULL, cpu_thread, (void *)k)) != 0) {
            fprintf(stderr, "pbench_handoff: pthread_create: %s\n", strerror(err));
            return 2;
        }
    for (int k = 0; k < NCPU; k++)
        pthread_join(cpu[k], NULL);
    pthread_join(blocker, NULL);
    return 0;
}

/* The completion lines, then the summary line. */
static void report(void)
{
    double cpu_all = 0, blocked = 0;
    int ok = 1, seen_blocked = 0;
    for (int i = 0; i < ndone; i++) {
        printf("%s done at %.0f ms\n", done_at[i].name, done_at[i].ms);
        if (strcmp(done_at[i].name, "blocked") == 0) {
            blocked = done_at[i].ms;
            seen_blocked = 1;
        } else {
            cpu_all = done_at[i].ms > cpu_all ? done_at[i].ms : cpu_all;
            if (seen_blocked)
                ok = 0;
        }
    }
    printf("cpu_all_done_ms=%.0f blocked_done_ms=%.0f order=%s\n", cpu_all, blocked,
           ok ? "ok" : "bad");
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3 || (strcmp(argv[1], "pipe") != 0 && strcmp(argv[1], "fsync") != 0)) {
        fprintf(stderr, "usage: %s pipe|fsync [DIR]\n", argv[0]);
        return 1;
    }
    mode = argv[1];
    dir = argc > 2 ? argv[2] : getenv("TMPDIR");
    if (dir == NULL || *dir == '\0')
        dir = "/var/tmp";

    iters = calibrate();
    uint64_t expect[NCPU];
    for (long k = 0; k < NCPU; k++)
        expect[k] = crunch((uint64_t)k + 1, iters);

    t_start = now_ms();
    pid_t child = strcmp(mode, "pipe") == 0 ? start_pipe_writer() : -1;
    if (run_threads() != 0)
        return 2;
    if (child > 0) {
        int st;
        if (waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            fprintf(stderr, "pbench_handoff: the child did not exit cleanly\n");
    }
    for (int k = 0; k < NCPU; k++)
        if (results[k] != expect[k]) {
            fprintf(stderr, "pbench_handoff: %s computed a wrong result\n", cpu_names[k]);
            return 3;
        }
    report();
    return 0;
}
