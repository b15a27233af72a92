/*
 * prog_libc_loop: does a thread that loops inside libc (where goshim never
 * preempts) keep a sleeping thread from waking up?
 *
 *   prog_libc_loop [ROUNDS [read]]      (default 5)
 *
 * A "looper" thread calls kill(getpid(), 0) in a loop (a system call
 * inside libc: no signal is sent, as in the conformance suite's signal
 * storms) and reads its signal mask (a call goshim wraps) until told to
 * stop; with read, it also reads a byte of its own program file each time
 * (a system call goshim wraps). The main thread sleeps 20 ms ROUNDS times
 * and counts the looper's calls meanwhile; then it stops the looper and
 * prints
 *   main woke 5 times while the looper ran
 * and exits 0 (1 on a usage error or a failed call).
 *
 * Natively the kernel runs both. Under goshim with one P the looper's
 * stack is in libc whenever preemption asks, so its P is handed to another
 * OS thread; when it comes back at its next call, the main thread's due
 * timer must run before it takes the P again.
 */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "prog_check.h"

static int stop;
static unsigned long calls;
static int fd = -1; /* read: the program's own file */

static void *looper(void *arg)
{
    (void)arg;
    pid_t me = getpid();
    while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
        sigset_t mask;
        CHECK(kill(me, 0) == 0);
        EXPECT(pthread_sigmask(SIG_BLOCK, NULL, &mask), 0);
        char c;
        CHECK(fd < 0 || pread(fd, &c, 1, 0) == 1);
        __atomic_store_n(&calls, calls + 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    long rounds = 5;
    if (argc > 3 || (argc >= 2 && (rounds = atol(argv[1])) < 1) ||
        (argc == 3 && strcmp(argv[2], "read") != 0)) {
        fprintf(stderr, "usage: prog_libc_loop [ROUNDS [read]]\n");
        return 1;
    }
    if (argc == 3)
        CHECK((fd = open(argv[0], O_RDONLY | O_CLOEXEC)) >= 0);
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, looper, NULL), 0);
    /* Let it start looping first. */
    while (__atomic_load_n(&calls, __ATOMIC_RELAXED) == 0)
        sched_yield();
    long woke = 0;
    for (long i = 0; i < rounds; i++) {
        struct timespec ts = {0, 20 * 1000 * 1000};
        CHECK(nanosleep(&ts, NULL) == 0);
        woke++;
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
    EXPECT(pthread_join(t, NULL), 0);
    printf("main woke %ld times while the looper ran\n", woke);
    return 0;
}
