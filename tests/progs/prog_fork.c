/*
 * fork, exec and system from a threaded program.
 *
 *   prog_fork threads   fork from a thread (not main) while other threads wait on a
 *                       condition variable and sleep; the child must have only the
 *                       forking thread (the others never run there), make 200 threads
 *                       of its own, join them, and exit through exit() with status 3
 *   prog_fork lastexit  the same fork, but the child's only thread calls pthread_exit:
 *                       the process ends with status 0, as when any last thread exits
 *   prog_fork exec      16 threads fork+exec (this program, "exec-child N") at once;
 *                       every child prints its number through a pipe, every exit is 0
 *   prog_fork system    system() in one thread while another advances a counter (the
 *                       command waits until it has)
 *   prog_fork spawn     8 threads at once each run popen("echo N"), posix_spawn of
 *                       /bin/sh -c 'exit N', and vfork+exec of the same; then daemon()
 *                       in a forked child, whose detached grandchild reports through a pipe
 *   prog_fork atfork    pthread_atfork handlers run in POSIX order (prepare in reverse
 *                       order of registration, parent and child in order) on the forking
 *                       thread: its __thread value is what they see
 *   prog_fork pshared   main, woken by other threads (so it runs on any OS thread), forks
 *                       two children per round; the second locks a process-shared
 *                       errorcheck mutex the first holds: it waits, never EDEADLK (the
 *                       children of a main thread off its first OS thread all had the
 *                       parent's tid)
 *
 * Output is fixed for each mode (see the printf calls); exit 0.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "prog_check.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int release_waiters;
static int ran_in_child; /* set by a parent thread if it ever runs in the child */
static pid_t parent_pid;

static void *waiter(void *arg)
{
    (void)arg;
    EXPECT(pthread_mutex_lock(&mu), 0);
    while (!release_waiters)
        EXPECT(pthread_cond_wait(&cv, &mu), 0);
    EXPECT(pthread_mutex_unlock(&mu), 0);
    if (getpid() != parent_pid)
        ran_in_child = 1;
    return NULL;
}

static void *sleeper(void *arg)
{
    (void)arg;
    usleep(20000);
    if (getpid() != parent_pid) {
        /* Its timer must not survive into the child: say so loudly. */
        fprintf(stderr, "a parent's sleeping thread woke in the child\n");
        _exit(9);
    }
    return NULL;
}

static void *child_worker(void *arg)
{
    return (void *)((long)arg * 2);
}

static int child_main(void)
{
    enum { N = 200 };
    static pthread_t t[N];
    long sum = 0;
    for (long i = 0; i < N; i++)
        EXPECT(pthread_create(&t[i], NULL, child_worker, (void *)i), 0);
    for (int i = 0; i < N; i++) {
        void *r;
        EXPECT(pthread_join(t[i], &r), 0);
        sum += (long)r;
    }
    usleep(50000); /* the parent's sleeper would have woken by now */
    if (ran_in_child) {
        fprintf(stderr, "a parent's waiting thread ran in the child\n");
        return 8;
    }
    return sum == (long)N * (N - 1) ? 3 : 7;
}

static int last_exit; /* lastexit mode */

static void *forker(void *arg)
{
    (void)arg;
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0 && last_exit)
        pthread_exit(NULL);
    if (pid == 0)
        exit(child_main());
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    if (WIFEXITED(st))
        printf("child exit status %d\n", WEXITSTATUS(st));
    else
        printf("child died of signal %d\n", WTERMSIG(st));
    return NULL;
}

static int mode_threads(void)
{
    pthread_t w[4], s, f;
    for (int i = 0; i < 4; i++)
        EXPECT(pthread_create(&w[i], NULL, waiter, NULL), 0);
    EXPECT(pthread_create(&s, NULL, sleeper, NULL), 0);
    EXPECT(pthread_create(&f, NULL, forker, NULL), 0);
    EXPECT(pthread_join(f, NULL), 0);
    EXPECT(pthread_mutex_lock(&mu), 0);
    release_waiters = 1;
    EXPECT(pthread_cond_broadcast(&cv), 0);
    EXPECT(pthread_mutex_unlock(&mu), 0);
    for (int i = 0; i < 4; i++)
        EXPECT(pthread_join(w[i], NULL), 0);
    EXPECT(pthread_join(s, NULL), 0);
    printf("parent threads ok\n");
    return 0;
}

/* ---- exec ---------------------------------------------------------------------------- */

static const char *self_path;
static int exec_pipe[2];

static void *execer(void *arg)
{
    long n = (long)arg;
    char num[16];
    snprintf(num, sizeof num, "%ld", n);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        CHECK(dup2(exec_pipe[1], 1) == 1);
        execl(self_path, self_path, "exec-child", num, (char *)NULL);
        _exit(127);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    return (void *)(long)(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
}

static int mode_exec(void)
{
    enum { N = 16 };
    pthread_t t[N];
    CHECK(pipe(exec_pipe) == 0);
    for (long i = 0; i < N; i++)
        EXPECT(pthread_create(&t[i], NULL, execer, (void *)i), 0);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        void *r;
        EXPECT(pthread_join(t[i], &r), 0);
        bad += r != NULL;
    }
    close(exec_pipe[1]);
    int seen[N] = {0}, lines = 0, v;
    FILE *in = fdopen(exec_pipe[0], "r");
    CHECK(in != NULL);
    while (fscanf(in, "exec-child %d\n", &v) == 1 && v >= 0 && v < N) {
        seen[v]++;
        lines++;
    }
    fclose(in);
    int all = lines == N;
    for (int i = 0; i < N; i++)
        all &= seen[i] == 1;
    printf("exec: %d children failed, every child reported once: %s\n", bad, all ? "yes" : "no");
    return 0;
}

/* ---- system ---------------------------------------------------------------------------- */

static int stop_counter;
static long counter;
static int in_system;  /* main is about to call system() */
static int advance[2]; /* the counter writes a byte here once it advanced past that */

/* Counts; once main is in system(), 100 more steps tell the shell's read to go on. */
static void *count(void *arg)
{
    (void)arg;
    long from = -1;
    while (!__atomic_load_n(&stop_counter, __ATOMIC_ACQUIRE)) {
        long n = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
        if (from < 0 && __atomic_load_n(&in_system, __ATOMIC_ACQUIRE))
            from = n;
        if (from >= 0 && n - from == 100)
            CHECK(write(advance[1], "x", 1) == 1);
        sched_yield();
    }
    return NULL;
}

/* The command waits for the counter's byte: it ends only if the counter ran meanwhile
 * (a counter stuck behind system() hangs the test, which then fails by its timeout). */
static int mode_system(void)
{
    pthread_t c;
    char cmd[128];
    CHECK(pipe(advance) == 0);
    snprintf(cmd, sizeof cmd, "echo from system; head -c 1 <&%d >/dev/null; exit 5", advance[0]);
    EXPECT(pthread_create(&c, NULL, count, NULL), 0);
    fflush(stdout);
    long before = __atomic_load_n(&counter, __ATOMIC_RELAXED);
    __atomic_store_n(&in_system, 1, __ATOMIC_RELEASE);
    int st = system(cmd);
    long after = __atomic_load_n(&counter, __ATOMIC_RELAXED);
    __atomic_store_n(&stop_counter, 1, __ATOMIC_RELEASE);
    EXPECT(pthread_join(c, NULL), 0);
    counter = after - before;
    printf("system status %d, counter advanced: %s\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1,
           counter > 0 ? "yes" : "no");
    return 0;
}

/* ---- spawn ----------------------------------------------------------------------------- */

#include <spawn.h>

extern char **environ;

static int exit_code(int st)
{
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* vfork, exec argv (a shell), wait: its exit code, or -1. */
static __attribute__((noinline)) int vfork_exec(char **argv)
{
    int st;
    pid_t pid = vfork();
    if (pid == 0) {
        execve("/bin/sh", argv, environ);
        _exit(127);
    }
    return pid > 0 && waitpid(pid, &st, 0) == pid ? exit_code(st) : -1;
}

static void *spawner(void *arg)
{
    long n = (long)arg;
    char cmd[64];
    int ok = 1;

    snprintf(cmd, sizeof cmd, "echo %ld", n);
    FILE *p = popen(cmd, "r");
    long got = -1;
    ok &= p && fscanf(p, "%ld", &got) == 1 && got == n;
    ok &= p && pclose(p) == 0;

    snprintf(cmd, sizeof cmd, "exit %ld", n);
    char *argv[] = {"sh", "-c", cmd, NULL};
    pid_t pid;
    int st;
    ok &= posix_spawn(&pid, "/bin/sh", NULL, NULL, argv, environ) == 0 &&
          waitpid(pid, &st, 0) == pid && exit_code(st) == n;

    ok &= vfork_exec(argv) == n;
    return (void *)(long)ok;
}

static int mode_spawn(void)
{
    enum { N = 8 };
    pthread_t t[N];
    int good = 0;
    for (long i = 0; i < N; i++)
        EXPECT(pthread_create(&t[i], NULL, spawner, (void *)i), 0);
    for (int i = 0; i < N; i++) {
        void *r;
        EXPECT(pthread_join(t[i], &r), 0);
        good += r != NULL;
    }
    printf("popen, posix_spawn and vfork from %d threads: %d ok\n", N, good);

    int fds[2];
    CHECK(pipe(fds) == 0);
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        if (daemon(1, 1) != 0)
            _exit(1);
        /* The daemon: a new session, its parent gone. */
        char msg[64];
        int len = snprintf(msg, sizeof msg, "daemon: own session %s\n",
                           getsid(0) == getpid() ? "yes" : "no");
        CHECK(write(fds[1], msg, (size_t)len) == len);
        _exit(0);
    }
    close(fds[1]);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    char buf[64] = {0};
    ssize_t n = read(fds[0], buf, sizeof buf - 1);
    printf("daemon's parent exit %d; %s", exit_code(st), n > 0 ? buf : "daemon: nothing\n");
    return 0;
}

/* ---- atfork ------------------------------------------------------------------------------ */

static __thread int who; /* the forking thread sets 42 */
static char order[64];

static void note(char c)
{
    size_t n = strlen(order);
    if (n + 2 < sizeof order) {
        order[n] = who == 42 ? c : '?';
        order[n + 1] = 0;
    }
}
static void prep1(void)
{
    note('A');
}
static void prep2(void)
{
    note('B');
}
static void par1(void)
{
    note('c');
}
static void par2(void)
{
    note('d');
}
static void chi1(void)
{
    note('e');
}
static void chi2(void)
{
    note('f');
}

static void *atfork_forker(void *arg)
{
    (void)arg;
    who = 42;
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        printf("child saw %s\n", order);
        fflush(stdout);
        _exit(0);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    printf("parent saw %s\n", order);
    return NULL;
}

static int mode_atfork(void)
{
    EXPECT(pthread_atfork(prep1, par1, chi1), 0);
    EXPECT(pthread_atfork(prep2, par2, chi2), 0);
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, atfork_forker, NULL), 0);
    EXPECT(pthread_join(t, NULL), 0);
    return 0;
}

/* ---- pshared ---- */

static sem_t hop;

static volatile int hop_stop;

static void *post_hop(void *arg)
{
    if (arg) { /* the spinner: keeps one OS thread busy, so main resumes on another */
        while (!hop_stop)
            sched_yield();
        return NULL;
    }
    sem_post(&hop);
    return NULL;
}

static int mode_pshared(void)
{
    pthread_mutex_t *m =
        mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(m != MAP_FAILED);
    pthread_mutexattr_t ma;
    CHECK(pthread_mutexattr_init(&ma) == 0);
    CHECK(pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ERRORCHECK) == 0);
    CHECK(pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED) == 0);
    CHECK(pthread_mutex_init(m, &ma) == 0);
    CHECK(sem_init(&hop, 0, 0) == 0);
    long rounds = scaled(20), deadlocks = 0;
    for (long i = 0; i < rounds; i++) {
        pthread_t t, spin;
        hop_stop = 0;
        CHECK(pthread_create(&spin, NULL, post_hop, &hop) == 0);
        CHECK(pthread_create(&t, NULL, post_hop, NULL) == 0);
        while (sem_wait(&hop) != 0)
            ;
        hop_stop = 1;
        CHECK(pthread_join(t, NULL) == 0);
        CHECK(pthread_join(spin, NULL) == 0);
        int held[2];
        CHECK(pipe(held) == 0);
        pid_t a = fork();
        CHECK(a >= 0);
        if (a == 0) {
            CHECK(pthread_mutex_lock(m) == 0);
            CHECK(write(held[1], "x", 1) == 1);
            struct timespec ts = {0, 20 * 1000 * 1000}; /* holds it a while */
            nanosleep(&ts, NULL);
            CHECK(pthread_mutex_unlock(m) == 0);
            _exit(0);
        }
        pid_t b = fork();
        CHECK(b >= 0);
        if (b == 0) {
            char c;
            CHECK(read(held[0], &c, 1) == 1); /* a holds the mutex now */
            int r = pthread_mutex_lock(m);
            if (r == 0)
                pthread_mutex_unlock(m);
            _exit(r == EDEADLK ? 1 : r == 0 ? 0 : 2);
        }
        close(held[0]);
        close(held[1]);
        int sa, sb;
        CHECK(waitpid(a, &sa, 0) == a && waitpid(b, &sb, 0) == b);
        CHECK(WIFEXITED(sa) && WEXITSTATUS(sa) == 0 && WIFEXITED(sb));
        deadlocks += WEXITSTATUS(sb) == 1;
        CHECK(WEXITSTATUS(sb) != 2);
    }
    printf("pshared: the second child waited for the first's mutex: %s\n",
           deadlocks == 0 ? "every time" : "not always");
    if (deadlocks)
        fprintf(stderr, "pshared: EDEADLK in %ld of %ld rounds\n", deadlocks, rounds);
    return 0;
}

int main(int argc, char **argv)
{
    parent_pid = getpid();
    self_path = argv[0];
    if (argc == 3 && !strcmp(argv[1], "exec-child")) {
        printf("exec-child %s\n", argv[2]);
        return 0;
    }
    if (argc != 2) {
        fprintf(stderr, "usage: prog_fork threads|lastexit|exec|system|spawn|atfork\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!strcmp(argv[1], "threads"))
        return mode_threads();
    if (!strcmp(argv[1], "lastexit")) {
        last_exit = 1;
        return mode_threads();
    }
    if (!strcmp(argv[1], "exec"))
        return mode_exec();
    if (!strcmp(argv[1], "system"))
        return mode_system();
    if (!strcmp(argv[1], "spawn"))
        return mode_spawn();
    if (!strcmp(argv[1], "atfork"))
        return mode_atfork();
    if (!strcmp(argv[1], "pshared"))
        return mode_pshared();
    fprintf(stderr, "prog_fork: unknown mode '%s'\n", argv[1]);
    return 2;
}
