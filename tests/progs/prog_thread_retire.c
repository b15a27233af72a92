/*
 * prog_thread_retire: the OS threads that a program's blocked threads held go away once
 * those threads are done, and come back when they are needed again.
 *
 *   prog_thread_retire [THREADS [ROUNDS [FORKS]]]   (defaults 100, 2 and 1)
 *
 * Each round, THREADS threads wait on a process-shared condition variable: glibc's own
 * wait, in the kernel, so each holds an OS thread natively and under goshim (an M). Once
 * every one waits (counted under the mutex the wait releases), the program checks that
 * it has at least THREADS OS threads (/proc/self/task), broadcasts and joins them all.
 * Then it watches its OS threads fall to a few (at most 8 and two per CPU), for at most
 * 30 s: natively at once; under goshim once the surplus idle Ms have retired. Right after
 * the joins, while those Ms are still there, it makes FORKS children one after another,
 * each alive until the last is made (as the Open POSIX Test Suite's pthread_cond_broadcast
 * 1-2 does): every one must run and exit 0. A process
 * that kept them would copy them at every fork: last, with one more thread parked in a
 * pipe read, a fork child must find itself the only OS thread and exit 0. Prints one
 * line per round and one for the child; exit 0.
 */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "prog_check.h"

static pthread_mutex_t mu;
static pthread_cond_t cv;
static int waiting;       /* under mu */
static unsigned released; /* under mu: the last round released */

/* The calling process's OS threads. */
static int os_threads(void)
{
    DIR *d = opendir("/proc/self/task");
    CHECK(d != NULL);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static void *waiter(void *arg)
{
    unsigned mine = (unsigned)(uintptr_t)arg;
    EXPECT(pthread_mutex_lock(&mu), 0);
    waiting++;
    while (released != mine)
        EXPECT(pthread_cond_wait(&cv, &mu), 0);
    EXPECT(pthread_mutex_unlock(&mu), 0);
    return NULL;
}

static int pipefd[2];

static void *reader(void *arg)
{
    (void)arg;
    char c;
    CHECK(read(pipefd[0], &c, 1) == 1);
    return NULL;
}

/* Wait until the process has at most limit OS threads, for at most 30 s; the count. */
static int settle(int limit)
{
    struct timespec tick = {0, 10 * 1000 * 1000};
    int n = os_threads();
    for (int i = 0; i < 3000 && n > limit; i++) {
        nanosleep(&tick, NULL);
        n = os_threads();
    }
    return n;
}

/* forks children, one after another, each alive until the last is made; each must find
 * itself its process's only OS thread. */
static void fork_children(int forks)
{
    int gate[2];
    CHECK(pipe(gate) == 0);
    fflush(stdout);
    for (int i = 0; i < forks; i++) {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            char c;
            close(gate[1]);
            _exit(os_threads() == 1 && read(gate[0], &c, 1) == 0 ? 0 : 3);
        }
    }
    close(gate[0]);
    close(gate[1]);
    for (int i = 0; i < forks; i++) {
        int st;
        CHECK(wait(&st) > 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "fork child: failed, status %d\n", st);
            exit(1);
        }
    }
}

static void one_round(pthread_t *t, int nthreads, unsigned r, int limit, int forks)
{
    EXPECT(pthread_mutex_lock(&mu), 0);
    waiting = 0;
    EXPECT(pthread_mutex_unlock(&mu), 0);
    for (int i = 0; i < nthreads; i++)
        EXPECT(pthread_create(&t[i], NULL, waiter, (void *)(uintptr_t)r), 0);
    struct timespec tick = {0, 1000 * 1000};
    for (;;) { /* the waits end only at the broadcast: nothing to wait on but the count */
        EXPECT(pthread_mutex_lock(&mu), 0);
        int w = waiting;
        EXPECT(pthread_mutex_unlock(&mu), 0);
        if (w == nthreads)
            break;
        nanosleep(&tick, NULL);
    }
    int peak = os_threads();
    if (peak < nthreads) {
        fprintf(stderr, "round %u: %d threads wait in the kernel on %d OS threads\n", r, nthreads,
                peak);
        exit(1);
    }
    EXPECT(pthread_mutex_lock(&mu), 0);
    released = r;
    EXPECT(pthread_cond_broadcast(&cv), 0);
    EXPECT(pthread_mutex_unlock(&mu), 0);
    for (int i = 0; i < nthreads; i++)
        EXPECT(pthread_join(t[i], NULL), 0);
    fork_children(forks); /* at once: under goshim, with the idle Ms still there */
    int left = settle(limit);
    if (left > limit) {
        fprintf(stderr, "round %u: still %d OS threads 30 s after the %d threads ended\n", r, left,
                nthreads);
        exit(1);
    }
    printf("round %u: %d threads blocked in the kernel, then at most %d OS threads\n", r, nthreads,
           limit);
}

int main(int argc, char **argv)
{
    int nthreads = argc > 1 ? atoi(argv[1]) : 100;
    int rounds = argc > 2 ? atoi(argv[2]) : 2;
    int forks = argc > 3 ? atoi(argv[3]) : 1;
    if (nthreads < 1 || nthreads > 5000 || rounds < 1 || forks < 1 || forks > 1000) {
        fprintf(stderr, "usage: prog_thread_retire [THREADS [ROUNDS [FORKS]]]\n");
        return 2;
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int limit = 8 + 2 * (int)(cpus > 0 ? cpus : 1);
    pthread_mutexattr_t ma;
    pthread_condattr_t ca;
    EXPECT(pthread_mutexattr_init(&ma), 0);
    EXPECT(pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED), 0);
    EXPECT(pthread_mutex_init(&mu, &ma), 0);
    EXPECT(pthread_condattr_init(&ca), 0);
    EXPECT(pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED), 0);
    EXPECT(pthread_cond_init(&cv, &ca), 0);
    pthread_t *t = calloc((size_t)nthreads, sizeof *t);
    CHECK(t != NULL);
    for (int r = 1; r <= rounds; r++)
        one_round(t, nthreads, (unsigned)r, limit, forks);
    pthread_t parked;
    CHECK(pipe(pipefd) == 0);
    EXPECT(pthread_create(&parked, NULL, reader, NULL), 0);
    fork_children(1);
    CHECK(write(pipefd[1], "x", 1) == 1);
    EXPECT(pthread_join(parked, NULL), 0);
    printf("fork child: ran, exited 0\n");
    free(t);
    return 0;
}
