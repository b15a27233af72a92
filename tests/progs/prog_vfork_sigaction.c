/*
 * A vfork child that resets the parent's handlers to SIG_DFL before exec
 * (as Python's _posixsubprocess does in every child it starts) changes
 * its own dispositions only; the parent's signal to itself still runs its
 * handler before kill returns (goshim issue 27 item 6: python3 -m test
 * test_multiprocessing_fork was "interrupted by signal SIGINT": the
 * KeyboardInterrupt that os.kill(os.getpid(), SIGINT) should raise inside
 * the test came a moment later, in the test runner).
 *
 * The main thread installs a SIGUSR1 handler, then each round: vfork, the
 * child sets SIGUSR1 to SIG_DFL and execs /bin/true, the parent reaps it;
 * one CPU-bound thread per CPU (blocking SIGUSR1) runs while the main
 * thread makes a waitpid call (WNOHANG), then they are stopped and
 * joined; then the main thread sends itself SIGUSR1 with kill and notes
 * whether the handler ran before kill returned. With no other thread, the
 * signal is delivered to the sending thread before kill returns (POSIX,
 * kill). 20 rounds, scaled by GOSHIM_TEST_SCALE.
 *
 * Under goshim the child's sigaction went through goshim's wrapper (the
 * runtime is off in a vfork child, so it passed through) and also cleared
 * the parent's record that SIGUSR1 has a handler (the child runs on the
 * parent's memory): kill then left the signal to the kernel, which gave it
 * to another OS thread, and the handler ran on the main thread only after
 * kill had returned. The waitpid with the CPU-bound threads moves the
 * main thread off the process's first OS thread, the one the kernel
 * prefers; still, the kernel's choice and the router's speed let the late
 * handler come before kill returned in about two rounds in three.
 *
 * Output is fixed; exit 0.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "prog_check.h"

enum { MAX_SPIN = 64 };

extern char **environ;

static volatile int stop, in_kill;
static volatile sig_atomic_t handled, during_kill;

static void on_usr1(int sig)
{
    (void)sig;
    handled++;
    during_kill += in_kill;
}

static void *spin(void *arg)
{
    (void)arg;
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    EXPECT(pthread_sigmask(SIG_BLOCK, &usr1, NULL), 0);
    while (!stop)
        for (volatile int i = 0; i < 1000; i++)
            ;
    return NULL;
}

/* vfork, reset SIGUSR1 in the child, exec /bin/true; reap it. */
static __attribute__((noinline)) void run_child(void)
{
    static char *const argv[] = {"true", NULL};
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    int status;
    pid_t pid = vfork();
    if (pid == 0) {
        sigaction(SIGUSR1, &dfl, NULL);
        execve("/bin/true", argv, environ);
        _exit(127);
    }
    CHECK(pid > 0);
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* One CPU-bound thread per CPU while the main thread makes a call that may block. */
static void move_main_thread(void)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    long nspin = ncpu < 1 ? 1 : ncpu > MAX_SPIN ? MAX_SPIN : ncpu;
    pthread_t spinners[MAX_SPIN];
    stop = 0;
    for (long i = 0; i < nspin; i++)
        EXPECT(pthread_create(&spinners[i], NULL, spin, NULL), 0);
    CHECK(waitpid(-1, NULL, WNOHANG) <= 0);
    stop = 1;
    for (long i = 0; i < nspin; i++)
        EXPECT(pthread_join(spinners[i], NULL), 0);
}

int main(void)
{
    long rounds = scaled(20), before_return = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
    for (long i = 0; i < rounds; i++) {
        run_child();
        move_main_thread();
        sig_atomic_t seen = during_kill;
        in_kill = 1;
        CHECK(kill(getpid(), SIGUSR1) == 0);
        in_kill = 0;
        before_return += during_kill != seen;
        while (handled <= i) /* it comes, late or not */
            ;
    }
    struct sigaction now;
    CHECK(sigaction(SIGUSR1, NULL, &now) == 0);
    printf("handler still installed after the children: %s\n",
           now.sa_handler == on_usr1 ? "yes" : "no");
    printf("kill to itself ran the handler before it returned: %s\n",
           before_return == rounds ? "every round" : "not every round");
    return 0;
}
