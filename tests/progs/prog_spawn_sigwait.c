/*
 * After threads have started children with posix_spawn or vfork, a signal
 * sent to the process that every thread blocks still reaches the one thread
 * that sigwaits for it (goshim issue 27, item 3: the process died of the
 * signal's default action instead).
 *
 *   prog_spawn_sigwait spawn|vfork [child] [winch]
 *       eight threads each start 15 children of /bin/true (posix_spawn, or
 *       vfork then execve) and reap them; then main blocks SIGUSR2, a new
 *       thread sigwaits for it and main sends it to the process with kill
 *       (with child: a child process sends it; with winch: SIGWINCH, whose
 *       default action is to ignore it, instead of SIGUSR2, whose default
 *       action ends the process)
 *
 * The children get an empty environment: they need not run under goshim
 * (what goshim's statistics would print from them is no output of this).
 *
 * Prints "sigwait got SIGUSR2" (or SIGWINCH); exit 0.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "prog_check.h"

enum { THREADS = 8, CHILDREN = 15 };

static bool use_vfork;

/* One child of /bin/true, started as the mode says; waited for. */
static void run_true(void)
{
    char *argv[] = {"true", NULL}, *envp[] = {NULL};
    pid_t pid;
    if (use_vfork) {
        pid = vfork();
        if (pid == 0) {
            execve("/bin/true", argv, envp);
            _exit(127);
        }
        CHECK(pid > 0);
    } else {
        EXPECT(posix_spawn(&pid, "/bin/true", NULL, NULL, argv, envp), 0);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "/bin/true ended with status %#x\n", st);
        exit(1);
    }
}

static void *spawner(void *arg)
{
    (void)arg;
    for (int i = 0; i < CHILDREN; i++)
        run_true();
    return NULL;
}

static void *waiter(void *arg)
{
    sigset_t *set = arg;
    int sig = 0;
    EXPECT(sigwait(set, &sig), 0);
    printf("sigwait got %s\n", sig == SIGUSR2    ? "SIGUSR2"
                               : sig == SIGWINCH ? "SIGWINCH"
                                                 : strsignal(sig));
    return NULL;
}

int main(int argc, char **argv)
{
    bool from_child = false, winch = false,
         ok = argc >= 2 && argc <= 4 && (!strcmp(argv[1], "spawn") || !strcmp(argv[1], "vfork"));
    for (int i = 2; ok && i < argc; i++) {
        if (!strcmp(argv[i], "child"))
            from_child = true;
        else if (!strcmp(argv[i], "winch"))
            winch = true;
        else
            ok = false;
    }
    if (!ok) {
        fprintf(stderr, "usage: %s spawn|vfork [child] [winch]\n", argv[0]);
        return 2;
    }
    use_vfork = !strcmp(argv[1], "vfork");
    int sig = winch ? SIGWINCH : SIGUSR2;
    setvbuf(stdout, NULL, _IONBF, 0);

    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        EXPECT(pthread_create(&t[i], NULL, spawner, NULL), 0);
    for (int i = 0; i < THREADS; i++)
        EXPECT(pthread_join(t[i], NULL), 0);

    static sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    EXPECT(pthread_sigmask(SIG_BLOCK, &set, NULL), 0);
    pthread_t w;
    EXPECT(pthread_create(&w, NULL, waiter, &set), 0);
    if (from_child) {
        pid_t parent = getpid(), pid = fork();
        if (pid == 0)
            _exit(kill(parent, sig) == 0 ? 0 : 1);
        CHECK(pid > 0);
        int st;
        CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    } else {
        CHECK(kill(getpid(), sig) == 0);
    }
    EXPECT(pthread_join(w, NULL), 0);
    return 0;
}
