/*
 * vfork children must leave the parent alone (issue 13).
 *
 *   prog_vfork close     8 threads each run rounds of vfork; in the child close both
 *                        ends of a pipe that another thread is blocked reading, then
 *                        exec /bin/true; in the parent wait for it and write one byte
 *                        into that pipe. Every reader must get every byte: a child's
 *                        close is the child's only (it failed with EBADF when the
 *                        child's close went through goshim's wrapper on the parent's
 *                        poller). 1000 rounds in all, scaled by GOSHIM_TEST_SCALE.
 *   prog_vfork others    while a vfork child waits 200 ms before its exec (the parent's
 *                        thread is suspended all that time), another thread must go on
 *                        running, and the child's write of the parent's memory is seen
 *                        by the parent after the exec, as vfork's sharing promises.
 *
 * Output is fixed for each mode; exit 0.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "prog_check.h"

enum { NPAIR = 8 };

extern char **environ;

struct pair {
    int fds[2];
    long rounds;
    long got;    /* bytes the reader read */
    int bad;     /* the reader's first error (errno), 0 if none */
    long failed; /* children that did not exit 0 */
};

static struct pair pairs[NPAIR];
/* The children's environment: the program's without GOSHIM_STATS (1000 summaries would
 * drown the output; LD_PRELOAD stays, so the children run under goshim too). */
static char *child_env[256];

static void make_child_env(void)
{
    int n = 0;
    for (char **e = environ; *e && n < 255; e++)
        if (strncmp(*e, "GOSHIM_STATS=", 13) != 0)
            child_env[n++] = *e;
    child_env[n] = NULL;
}

static void *reader(void *arg)
{
    struct pair *p = arg;
    char c;
    for (;;) {
        ssize_t n = read(p->fds[0], &c, 1);
        if (n == 1) {
            p->got++;
            continue;
        }
        if (n < 0 && !p->bad)
            p->bad = errno;
        if (n <= 0)
            return NULL;
    }
}

static __attribute__((noinline)) pid_t spawn_true(struct pair *p)
{
    char *argv[] = {"true", NULL};
    pid_t pid = vfork();
    if (pid == 0) {
        close(p->fds[0]);
        close(p->fds[1]);
        execve("/bin/true", argv, child_env);
        _exit(127);
    }
    return pid;
}

static void *forker(void *arg)
{
    struct pair *p = arg;
    for (long i = 0; i < p->rounds; i++) {
        int st;
        pid_t pid = spawn_true(p);
        CHECK(pid > 0);
        CHECK(waitpid(pid, &st, 0) == pid);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            p->failed++;
        CHECK(write(p->fds[1], "x", 1) == 1);
    }
    return NULL;
}

static int mode_close(void)
{
    long total = scaled(1000);
    pthread_t r[NPAIR], f[NPAIR];
    for (int i = 0; i < NPAIR; i++) {
        CHECK(pipe(pairs[i].fds) == 0);
        pairs[i].rounds = total / NPAIR + (i < total % NPAIR);
        EXPECT(pthread_create(&r[i], NULL, reader, &pairs[i]), 0);
    }
    for (int i = 0; i < NPAIR; i++)
        EXPECT(pthread_create(&f[i], NULL, forker, &pairs[i]), 0);
    long failed = 0, missing = 0;
    int bad = 0;
    for (int i = 0; i < NPAIR; i++) {
        EXPECT(pthread_join(f[i], NULL), 0);
        close(pairs[i].fds[1]); /* the reader's EOF */
        EXPECT(pthread_join(r[i], NULL), 0);
        close(pairs[i].fds[0]);
        failed += pairs[i].failed;
        missing += pairs[i].rounds - pairs[i].got;
        if (pairs[i].bad && !bad)
            bad = pairs[i].bad;
    }
    if (failed || missing || bad)
        fprintf(stderr, "%ld children failed, %ld bytes not read, first read error %s\n", failed,
                missing, bad ? strerror(bad) : "none");
    printf("vfork+close+exec from %d threads: children ok %s, readers got every byte: %s\n", NPAIR,
           failed ? "no" : "yes", missing || bad ? "no" : "yes");
    return 0;
}

static volatile long spins;
static volatile int stop;

static void *spinner(void *arg)
{
    (void)arg;
    while (!stop)
        spins++;
    return NULL;
}

static int mode_others(void)
{
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, spinner, NULL), 0);
    while (spins == 0) /* it runs */
        sched_yield();
    static volatile int child_wrote;
    char *argv[] = {"true", NULL};
    long before = spins;
    pid_t pid = vfork();
    if (pid == 0) {
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
        child_wrote = 1;
        execve("/bin/true", argv, child_env);
        _exit(127);
    }
    long during = spins - before;
    int st;
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
    stop = 1;
    EXPECT(pthread_join(t, NULL), 0);
    printf("child exit %d; another thread ran meanwhile: %s; child's write seen: %s\n",
           WIFEXITED(st) ? WEXITSTATUS(st) : -1, during > 0 ? "yes" : "no",
           child_wrote ? "yes" : "no");
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "close";
    make_child_env();
    if (!strcmp(mode, "close"))
        return mode_close();
    if (!strcmp(mode, "others"))
        return mode_others();
    fprintf(stderr, "usage: prog_vfork close|others\n");
    return 2;
}
