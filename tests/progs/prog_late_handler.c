/*
 * A signal handler installed only once threads run: under goshim the helpers a handler
 * needs (the signal router, the waker of a handler's sem_post) are made with the first
 * signal routed to a thread, not at the start of every threaded process.
 *
 *   prog_late_handler none
 *       four threads made and joined, no handler: "none: 4 threads joined".
 *   prog_late_handler late
 *       a thread waits in sem_wait, another computes; then main installs a SIGUSR1 handler
 *       that counts and posts the semaphore, and sends SIGUSR1 to the process: the handler
 *       has run when kill returns (POSIX: the signal reaches the sender, which does not
 *       block it), and the waiting thread wakes. Then an ITIMER_REAL's SIGALRM (a handler
 *       installed then too) reaches its handler while main waits in sigsuspend.
 *       "late: handler before kill returned: yes, waiter woken: yes, timer signal: yes".
 *   prog_late_handler child
 *       a thread made and joined, no handler; then a fork child installs a SIGUSR1 handler
 *       while it has one thread, makes a thread, says so on a pipe and waits for the
 *       signal in sem_wait; the parent sends it. "child: handler ran: yes".
 *
 * Prints one line per mode and exits 0.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "prog_check.h"

static sem_t posted;
static volatile sig_atomic_t usr1, alarms, stop;

static void on_usr1(int sig)
{
    (void)sig;
    usr1++;
    sem_post(&posted);
}

static void on_alarm(int sig)
{
    (void)sig;
    alarms++;
}

static void *nothing(void *arg)
{
    return arg;
}

static void *waiter(void *arg)
{
    (void)arg;
    while (sem_wait(&posted) != 0)
        CHECK(errno == EINTR);
    return NULL;
}

static void *computer(void *arg)
{
    uint64_t x = 1;
    while (!stop)
        x = xorshift_work(x, 1000);
    return (void *)(uintptr_t)(x & (uintptr_t)arg);
}

static void handle(int sig, void (*fn)(int))
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = fn;
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(sig, &sa, NULL) == 0);
}

static int mode_none(void)
{
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        EXPECT(pthread_create(&t[i], NULL, nothing, NULL), 0);
    for (int i = 0; i < 4; i++)
        EXPECT(pthread_join(t[i], NULL), 0);
    printf("none: 4 threads joined\n");
    return 0;
}

static int mode_late(void)
{
    CHECK(sem_init(&posted, 0, 0) == 0);
    pthread_t w, c;
    EXPECT(pthread_create(&w, NULL, waiter, NULL), 0);
    EXPECT(pthread_create(&c, NULL, computer, NULL), 0);
    handle(SIGUSR1, on_usr1);
    CHECK(kill(getpid(), SIGUSR1) == 0);
    int before = usr1 == 1;
    EXPECT(pthread_join(w, NULL), 0);
    handle(SIGALRM, on_alarm);
    sigset_t alrm, old;
    sigemptyset(&alrm);
    sigaddset(&alrm, SIGALRM);
    EXPECT(pthread_sigmask(SIG_BLOCK, &alrm, &old), 0);
    struct itimerval it = {{0, 0}, {0, 20000}};
    CHECK(setitimer(ITIMER_REAL, &it, NULL) == 0);
    while (!alarms)
        sigsuspend(&old);
    EXPECT(pthread_sigmask(SIG_SETMASK, &old, NULL), 0);
    stop = 1;
    EXPECT(pthread_join(c, NULL), 0);
    printf("late: handler before kill returned: %s, waiter woken: yes, timer signal: yes\n",
           before ? "yes" : "no");
    return 0;
}

static int mode_child(void)
{
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, nothing, NULL), 0);
    EXPECT(pthread_join(t, NULL), 0);
    int ready[2];
    CHECK(pipe(ready) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        CHECK(sem_init(&posted, 0, 0) == 0);
        handle(SIGUSR1, on_usr1);
        pthread_t c;
        EXPECT(pthread_create(&c, NULL, computer, NULL), 0);
        CHECK(write(ready[1], "r", 1) == 1);
        while (sem_wait(&posted) != 0)
            CHECK(errno == EINTR);
        stop = 1;
        EXPECT(pthread_join(c, NULL), 0);
        _exit(usr1 == 1 ? 0 : 1);
    }
    char r;
    CHECK(read(ready[0], &r, 1) == 1);
    CHECK(kill(pid, SIGUSR1) == 0);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    printf("child: handler ran: %s\n", WIFEXITED(st) && WEXITSTATUS(st) == 0 ? "yes" : "no");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "none"))
        return mode_none();
    if (argc > 1 && !strcmp(argv[1], "late"))
        return mode_late();
    if (argc > 1 && !strcmp(argv[1], "child"))
        return mode_child();
    fprintf(stderr, "usage: %s none | late | child\n", argv[0]);
    return 2;
}
