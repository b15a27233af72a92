/*
 * prog_fd_table: the size of the process's fd table (FDSize in /proc/self/status) before
 * and right after its first thread, in the process and again in a forked child.
 *
 *   usage: prog_fd_table
 *
 * Sets the soft RLIMIT_NOFILE to 1024 (or the hard limit, if lower) and prints
 * "limit N". Then, in the process and in a child it forks (which makes a thread of its
 * own), "NAME before: N" before any thread and "NAME after: N" while a thread it made
 * waits on a condition variable (no descriptor made or touched), then lets it end and
 * joins it. A table that threads share grows only after an RCU grace period (milliseconds),
 * one of a lone thread at once: a runtime that will put descriptors of its own high must
 * grow the table before its first thread. Natively nothing grows it.
 *
 * Before any thread, fd 0 becomes a temporary file the process holds a POSIX write lock on
 * (fcntl F_SETLK); after the first thread, a forked child asks (F_GETLK) whether the
 * lock is still held and prints "lock held: yes" or "no". Closing any descriptor of the
 * file drops such a lock: growing the table through a copy of fd 0 would.
 *
 * Exit 0, or 2 (a call failed), 3 (the child failed).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static void die(const char *what)
{
    fprintf(stderr, "prog_fd_table: %s: %s\n", what, strerror(errno));
    exit(2);
}

static long fdsize(void)
{
    char buf[4096];
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        die("open /proc/self/status");
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        die("read /proc/self/status");
    buf[n] = 0;
    char *p = strstr(buf, "\nFDSize:");
    if (!p)
        die("no FDSize line");
    return strtol(p + 8, NULL, 10);
}

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int go;

static void *waiter(void *arg)
{
    pthread_mutex_lock(&mu);
    while (!go)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    return arg;
}

/* "NAME before", a thread made, "NAME after", the thread let go and joined. */
static void one_thread(const char *name)
{
    pthread_t t;
    printf("%s before: %ld\n", name, fdsize());
    go = 0;
    if ((errno = pthread_create(&t, NULL, waiter, NULL)) != 0)
        die("pthread_create");
    printf("%s after: %ld\n", name, fdsize());
    fflush(stdout);
    pthread_mutex_lock(&mu);
    go = 1;
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&mu);
    if ((errno = pthread_join(t, NULL)) != 0)
        die("pthread_join");
}

/* fd 0: a temporary file the process holds a write lock on. */
static void lock_stdin(void)
{
    FILE *f = tmpfile(); /* unnamed, gone with its last descriptor */
    if (!f)
        die("tmpfile");
    if (dup2(fileno(f), 0) != 0)
        die("dup2");
    fclose(f);
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (fcntl(0, F_SETLK, &fl) != 0)
        die("fcntl F_SETLK");
}

/* Whether another process sees the lock on fd 0's file. */
static void lock_check(void)
{
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
        if (fcntl(0, F_GETLK, &fl) != 0)
            _exit(2);
        printf("lock held: %s\n", fl.l_type == F_WRLCK ? "yes" : "no");
        fflush(stdout);
        _exit(0);
    }
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        die("the lock's checker");
}

int main(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        die("getrlimit");
    rl.rlim_cur = rl.rlim_max < 1024 ? rl.rlim_max : 1024;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        die("setrlimit");
    printf("limit %lu\n", (unsigned long)rl.rlim_cur);
    fflush(stdout);
    lock_stdin();
    one_thread("process");
    lock_check();
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        one_thread("child");
        exit(0);
    }
    int st;
    if (waitpid(pid, &st, 0) != pid)
        die("waitpid");
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 3;
}
