/*
 * A signal handler that makes a wrapped call (write) while its thread is
 * blocked in another one (read): the handler's write must simply go
 * through, and the read then returns what it wrote.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int p[2];
static pthread_t main_thread;

static void on_usr1(int sig)
{
    (void)sig;
    if (write(p[1], "s", 1) != 1)
        _exit(2);
}

static void *poker(void *arg)
{
    (void)arg;
    usleep(50000);
    pthread_kill(main_thread, SIGUSR1);
    return NULL;
}

int main(void)
{
    if (pipe(p))
        return 3;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);
    main_thread = pthread_self();
    pthread_t t;
    pthread_create(&t, NULL, poker, NULL);
    char c = 0;
    ssize_t n = read(p[0], &c, 1);
    pthread_join(t, NULL);
    printf("read %zd byte '%c' written by the handler\n", n, c);
    return n == 1 && c == 's' ? 0 : 1;
}
