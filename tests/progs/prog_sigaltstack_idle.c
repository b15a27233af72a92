/*
 * A thread's alternate signal stack is its own: no other thread's signal
 * frame may land on it while its handler runs there (goshim issue 27 item
 * 6: python3 -m test test_asyncio crashed in its subprocess tests, where
 * faulthandler gives the main thread an alternate stack and asyncio's
 * child watcher a SIGCHLD handler with SA_ONSTACK).
 *
 * The main thread installs an alternate stack, starts one CPU-bound thread
 * per CPU (they block SIGUSR1 and SIGUSR2) and forks a child that sends it
 * SIGUSR1 or SIGUSR2 on request (a signal from another process goes to
 * whichever thread the kernel picks). It makes a waitpid call (WNOHANG),
 * stops and joins the CPU-bound threads, then installs SA_ONSTACK handlers
 * for SIGUSR1 and SIGUSR2 (SIGUSR1's blocks SIGUSR2) and, each round, asks
 * for SIGUSR1 and waits for SIGUSR2's handler, running (no blocking call). SIGUSR1's handler records
 * the alternate stack from its own frame to the top (its callers' frames
 * and the kernel's signal frame), asks for SIGUSR2, waits until SIGUSR2 is
 * pending, and checks that nothing there changed. 5 rounds, scaled by
 * GOSHIM_TEST_SCALE.
 *
 * Under goshim the waitpid hands the main thread's P to a CPU-bound thread
 * and the main thread goes on on another OS thread (also once they are
 * gone: nothing wakes the one it left); the one it left went to sleep with the main thread's alternate stack installed and, having
 * gone to sleep before the handlers existed, with the signals open. The
 * kernel prefers that thread (the process's first) for the child's
 * signals: SIGUSR2's frame went on top of SIGUSR1's handler (it crashed,
 * or said "changed").
 *
 * Output is fixed; exit 0, or 3 at the first change seen (natively
 * never).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "prog_check.h"

enum { ALT_SIZE = 64 * 1024, MAX_SPIN = 64 };

static int cmd[2]; /* requests to the child: '1' SIGUSR1, '2' SIGUSR2 */
static stack_t alt;
static volatile int stop;
static volatile sig_atomic_t nusr1, nusr2;
static char seen[ALT_SIZE];

static void ask(char c)
{
    if (write(cmd[1], &c, 1) != 1)
        _exit(4);
}

static void say_and_exit(const char *msg)
{
    if (write(2, msg, strlen(msg)) < 0)
        _exit(5);
    _exit(3);
}

static __attribute__((noinline)) void on_usr1(int sig)
{
    (void)sig;
    char *from = __builtin_frame_address(0);
    char *top = (char *)alt.ss_sp + alt.ss_size;
    if (from < (char *)alt.ss_sp || from >= top)
        say_and_exit("SIGUSR1's handler is not on the alternate stack\n");
    size_t n = (size_t)(top - from);
    memcpy(seen, from, n);
    ask('2');
    sigset_t pending;
    do
        sigpending(&pending);
    while (!sigismember(&pending, SIGUSR2));
    if (memcmp(seen, from, n) != 0)
        say_and_exit("the alternate stack above SIGUSR1's handler changed while it ran: "
                     "another thread's signal frame\n");
    nusr1++;
}

static void on_usr2(int sig)
{
    (void)sig;
    nusr2++;
}

static void *spin(void *arg)
{
    (void)arg;
    sigset_t both;
    sigemptyset(&both);
    sigaddset(&both, SIGUSR1);
    sigaddset(&both, SIGUSR2);
    EXPECT(pthread_sigmask(SIG_BLOCK, &both, NULL), 0);
    while (!stop)
        for (volatile int i = 0; i < 1000; i++)
            ;
    return NULL;
}

static void child(void)
{
    char c;
    close(cmd[1]);
    while (read(cmd[0], &c, 1) == 1)
        kill(getppid(), c == '1' ? SIGUSR1 : SIGUSR2);
    _exit(0);
}

int main(void)
{
    long rounds = scaled(5), ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    long nspin = ncpu < 1 ? 1 : ncpu > MAX_SPIN ? MAX_SPIN : ncpu;
    pthread_t spinners[MAX_SPIN];
    CHECK(pipe(cmd) == 0);
    pid_t kid = fork();
    CHECK(kid >= 0);
    if (kid == 0)
        child();
    close(cmd[0]);
    alt.ss_sp = malloc(ALT_SIZE);
    alt.ss_size = ALT_SIZE;
    CHECK(alt.ss_sp && sigaltstack(&alt, NULL) == 0);
    for (long i = 0; i < nspin; i++)
        EXPECT(pthread_create(&spinners[i], NULL, spin, NULL), 0);
    CHECK(waitpid(kid, NULL, WNOHANG) == 0);
    stop = 1;
    for (long i = 0; i < nspin; i++)
        EXPECT(pthread_join(spinners[i], NULL), 0);
    struct sigaction sa = {.sa_handler = on_usr1, .sa_flags = SA_ONSTACK | SA_RESTART};
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGUSR2);
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
    sa.sa_handler = on_usr2;
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGUSR2, &sa, NULL) == 0);
    for (long i = 0; i < rounds; i++) {
        ask('1');
        while (nusr2 <= i)
            ;
    }
    close(cmd[1]);
    CHECK(waitpid(kid, NULL, 0) == kid);
    printf("SIGUSR1's handler ran on an alternate stack nobody else wrote: %s\n",
           nusr1 == rounds && nusr2 == rounds ? "every round" : "not every round");
    return 0;
}
