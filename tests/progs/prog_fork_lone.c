/*
 * The fork child of a threaded program is one thread again: what it sees, and that signals,
 * waits and new threads work there from its first instruction.
 *
 *   prog_fork_lone signals   the parent has 4 threads waiting on a condition variable and
 *                            forks; the child reports the threads /proc/self/status counts
 *                            (1, as natively), that a kill() to itself ran the handler before
 *                            kill returned, that a signal the parent sent while the child
 *                            blocked it was pending (sigpending) and was handled when the
 *                            child unblocked it, that a sem_wait was ended by the sem_post of
 *                            a handler of a signal the parent sent, and that 2 threads it
 *                            makes then (one blocked in read() until the other writes) run
 *                            and are joined
 *   prog_fork_lone parked    the same parent; the child locks a mutex it holds (a deadlock:
 *                            it never returns natively)
 *   prog_fork_lone quit      the same parent; the child computes until the parent's SIGQUIT
 *                            ends it; the parent prints how it ended
 *   prog_fork_lone term      the same parent, where one thread blocked SIGTERM for a moment
 *                            (as Python's resource tracker does) and a thread that is not
 *                            main forks; the child waits in sem_wait, again on EINTR (as
 *                            Python's SemLock does), until the parent's SIGTERM ends it
 *
 * Each line is fixed for a correct run; exit 0 (parked: the child's end is the test's).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "parked.h"
#include "prog_check.h"

static sem_t posted;
static volatile sig_atomic_t usr1_ran, usr2_ran;
static int to_child[2], to_parent[2];

static void on_usr1(int sig)
{
    (void)sig;
    usr1_ran++;
    sem_post(&posted);
}

static void on_usr2(int sig)
{
    (void)sig;
    usr2_ran++;
}

static int status_threads(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    int n = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Threads: %d", &n) == 1)
            break;
    if (f)
        fclose(f);
    return n;
}

/* One byte each way: the child tells the parent what it waits for, the parent answers. */
static void tell(int fd, char c)
{
    CHECK(write(fd, &c, 1) == 1);
}

static char hear(int fd)
{
    char c = 0;
    CHECK(read(fd, &c, 1) == 1);
    return c;
}

static void *reader(void *arg)
{
    int *fds = arg;
    char c = 0;
    CHECK(read(fds[0], &c, 1) == 1);
    return (void *)(long)c;
}

static void *writer(void *arg)
{
    int *fds = arg;
    CHECK(write(fds[1], "w", 1) == 1);
    return NULL;
}

static bool pending(int sig)
{
    sigset_t set;
    CHECK(sigpending(&set) == 0);
    return sigismember(&set, sig);
}

static int child_signals(void)
{
    printf("child threads at start: %d\n", status_threads());
    int before = usr1_ran;
    CHECK(kill(getpid(), SIGUSR1) == 0);
    printf("kill to itself ran the handler before it returned: %s\n",
           usr1_ran == before + 1 ? "yes" : "no");
    CHECK(sem_wait(&posted) == 0); /* that handler's post */

    sigset_t usr2, old;
    sigemptyset(&usr2);
    sigaddset(&usr2, SIGUSR2);
    CHECK(sigprocmask(SIG_BLOCK, &usr2, &old) == 0);
    tell(to_parent[1], '2'); /* send SIGUSR2 */
    CHECK(hear(to_child[0]) == 's');
    /* The parent's kill has returned: the signal is pending here (a process signal). */
    bool was_pending = pending(SIGUSR2);
    CHECK(sigprocmask(SIG_SETMASK, &old, NULL) == 0);
    printf("blocked signal pending: %s; handled when unblocked: %s\n", was_pending ? "yes" : "no",
           usr2_ran == 1 ? "yes" : "no");

    tell(to_parent[1], '1'); /* send SIGUSR1 */
    while (sem_wait(&posted) != 0)
        CHECK(errno == EINTR);
    printf("sem_wait ended by a handler's post: %s\n", usr1_ran == 2 ? "yes" : "no");

    int fds[2];
    pthread_t r, w;
    void *got = NULL;
    CHECK(pipe(fds) == 0);
    CHECK(pthread_create(&r, NULL, reader, fds) == 0);
    CHECK(pthread_create(&w, NULL, writer, fds) == 0);
    CHECK(pthread_join(w, NULL) == 0);
    CHECK(pthread_join(r, &got) == 0);
    printf("threads made in the child ran: %s\n", got == (void *)(long)'w' ? "yes" : "no");
    return 0;
}

static void child_quit(void)
{
    tell(to_parent[1], 'q');
    for (volatile unsigned long spin = 0;; spin++)
        ;
}

/* The SIGTERM the parent sends ends the child at its default action: nothing posts. */
static void child_term(void)
{
    sem_t shared; /* process-shared: glibc's own wait, as a named semaphore's */
    CHECK(sem_init(&shared, 1, 0) == 0);
    tell(to_parent[1], 't');
    while (sem_wait(&shared) != 0)
        CHECK(errno == EINTR);
    _exit(8);
}

/* A thread that blocks SIGTERM once, and unblocks it. */
static void *blocks_term(void *arg)
{
    (void)arg;
    sigset_t term, old;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    CHECK(pthread_sigmask(SIG_BLOCK, &term, &old) == 0);
    CHECK(pthread_sigmask(SIG_SETMASK, &old, NULL) == 0);
    return NULL;
}

static void *forks_term(void *arg)
{
    (void)arg;
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(to_child[1]);
        close(to_parent[0]);
        child_term();
    }
    return (void *)(long)pid;
}

/* The term mode's child, forked by a thread that is not main: its pid. */
static pid_t fork_from_thread(void)
{
    pthread_t t;
    void *pid = NULL;
    CHECK(pthread_create(&t, NULL, blocks_term, NULL) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    CHECK(pthread_create(&t, NULL, forks_term, NULL) == 0);
    CHECK(pthread_join(t, &pid) == 0);
    return (pid_t)(long)pid;
}

static void parent_serves(pid_t pid)
{
    char c;
    while (read(to_parent[0], &c, 1) == 1) {
        if (c == '2') {
            CHECK(kill(pid, SIGUSR2) == 0);
            tell(to_child[1], 's');
        } else if (c == '1') {
            CHECK(kill(pid, SIGUSR1) == 0);
        } else if (c == 'q') {
            CHECK(kill(pid, SIGQUIT) == 0);
        } else if (c == 't') {
            CHECK(kill(pid, SIGTERM) == 0);
        }
    }
}

int main(int argc, char **argv)
{
    const char *mode = argc == 2 ? argv[1] : "";
    if (strcmp(mode, "signals") && strcmp(mode, "parked") && strcmp(mode, "quit") &&
        strcmp(mode, "term")) {
        fprintf(stderr, "usage: prog_fork_lone signals|parked|quit|term\n");
        return 2;
    }
    CHECK(sem_init(&posted, 0, 0) == 0);
    if (!strcmp(mode, "signals")) { /* (a handler the signal could run is no deadlock) */
        signal(SIGUSR1, on_usr1);
        signal(SIGUSR2, on_usr2);
    }
    CHECK(pipe(to_child) == 0 && pipe(to_parent) == 0);
    CHECK(parked_start(4) == 0);
    fflush(stdout);
    pid_t pid = !strcmp(mode, "term") ? fork_from_thread() : fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(to_child[1]);
        close(to_parent[0]);
        if (!strcmp(mode, "signals"))
            exit(child_signals());
        if (!strcmp(mode, "quit"))
            child_quit();
        pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
        pthread_mutex_lock(&mu);
        pthread_mutex_lock(&mu);
        _exit(9);
    }
    close(to_child[0]);
    close(to_parent[1]);
    parent_serves(pid);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    parked_stop();
    if (WIFEXITED(st))
        printf("child exit %d\n", WEXITSTATUS(st));
    else
        printf("child signal %s\n", strsignal(WTERMSIG(st)));
    return 0;
}
