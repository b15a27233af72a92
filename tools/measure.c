/*
 * Measuring runs of a command, for goshim compare.
 *
 * run_measured runs CMD once and measures it: wall time; CPU time, peak
 * RSS and context switches from wait4's rusage; and the peak number of OS
 * threads of its process tree, sampled from /proc every millisecond while
 * CMD runs (a pidfd wakes the sampler the moment CMD exits, so sampling
 * adds no wall time). Rejected: reading /proc/PID/task once at the end
 * (the threads are gone by then) and counting clone() calls with ptrace
 * (slows down exactly what is measured).
 *
 * summarize reduces the runs of one mode to median, minimum and maximum:
 * a median is what one run is likely to cost, the range how much to trust
 * it on a busy machine.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tools/cli.h"
#include "tools/measure.h"

/* How often the thread count is sampled, and how far the process tree is walked. */
#define SAMPLE_MS     1
#define TREE_DEPTH    8
#define TREE_PROCS    256
#define TREE_CHILDREN 64

double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The Threads: line of /proc/PID/status; 0 if the process is gone. */
static long read_threads(pid_t pid)
{
    static char buf[8192];
    char path[64];
    size_t len = 0;
    ssize_t n;
    const char *p;
    int fd;

    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    while (len < sizeof buf - 1 && (n = read(fd, buf + len, sizeof buf - 1 - len)) > 0)
        len += (size_t)n;
    close(fd);
    buf[len] = '\0';
    p = strstr(buf, "\nThreads:");
    return p != NULL ? strtol(p + 9, NULL, 10) : 0;
}

/*
 * tree_threads counts the OS threads of pid and of its descendants, found
 * through the children file of each process's main thread (children forked
 * by its other threads are not seen), at most TREE_DEPTH levels and *budget
 * processes deep.
 */
static long tree_threads(pid_t pid, int depth, int *budget)
{
    static char buf[4096];
    pid_t kids[TREE_CHILDREN];
    int nkids = 0, fd;
    long n = read_threads(pid);
    char path[64], *p;
    ssize_t len;

    if (n <= 0 || depth >= TREE_DEPTH)
        return n;
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)pid, (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return n;
    len = read(fd, buf, sizeof buf - 1);
    close(fd);
    buf[len > 0 ? len : 0] = '\0';
    for (p = buf; nkids < TREE_CHILDREN;) {
        char *end;
        long kid = strtol(p, &end, 10);

        if (end == p)
            break;
        kids[nkids++] = (pid_t)kid;
        p = end;
    }
    for (int k = 0; k<nkids && * budget> 0; k++) {
        (*budget)--;
        n += tree_threads(kids[k], depth + 1, budget);
    }
    return n;
}

/*
 * exec_measured is run_measured's child: stdin from /dev/null and, unless
 * show, stdout and stderr too; LD_PRELOAD=preload and GOSHIM_PROCS=procs
 * (if not NULL) for the goshim mode; then argv. A failed exec writes its
 * errno into errfd for the parent. Never returns.
 */
__attribute__((noreturn)) static void exec_measured(char **argv, const char *preload,
                                                    const char *procs, bool show, int errfd)
{
    int null = open("/dev/null", O_RDWR | O_CLOEXEC), err;

    if (null >= 0) {
        dup2(null, STDIN_FILENO);
        if (!show) {
            dup2(null, STDOUT_FILENO);
            dup2(null, STDERR_FILENO);
        }
    }
    if (preload != NULL) {
        setenv("LD_PRELOAD", preload, 1);
        if (procs != NULL)
            setenv("GOSHIM_PROCS", procs, 1);
    }
    execvp(argv[0], argv);
    err = errno;
    if (write(errfd, &err, sizeof err) < 0)
        _exit(EXIT_NOEXEC);
    _exit(EXIT_NOTFOUND);
}

/*
 * peak_threads samples the OS threads of pid's process tree every
 * SAMPLE_MS until pid exits (not reaped), and returns the most seen. The
 * pidfd (-1: none) wakes it at the exit; if polling it fails, the pidfd is
 * closed and set to -1, and waitid's WNOWAIT watches for the exit instead.
 */
static long peak_threads(pid_t pid, int *pidfd)
{
    long peak = 0;

    for (;;) {
        int budget = TREE_PROCS;
        long t = tree_threads(pid, 0, &budget);

        if (t > peak)
            peak = t;
        if (*pidfd >= 0) {
            struct pollfd pfd = {.fd = *pidfd, .events = POLLIN};
            int r = poll(&pfd, 1, SAMPLE_MS);

            if (r > 0)
                return peak;
            if (r < 0 && errno != EINTR) {
                close(*pidfd); /* sample by waitpid polling instead */
                *pidfd = -1;
            }
        } else {
            siginfo_t si = {0};
            struct timespec ts = {0, SAMPLE_MS * 1000000L};

            if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid)
                return peak;
            nanosleep(&ts, NULL);
        }
    }
}

/* put_usage fills res from the ended run's rusage, wait status and peak thread count. */
static void put_usage(struct run_result *res, const struct rusage *ru, int status, long peak)
{
    res->v[M_CPU] = (double)(ru->ru_utime.tv_sec + ru->ru_stime.tv_sec) * 1e3 +
                    (double)(ru->ru_utime.tv_usec + ru->ru_stime.tv_usec) / 1e3;
    res->v[M_RSS] = (double)ru->ru_maxrss / 1024.0;
    res->v[M_THREADS] = (double)peak;
    res->v[M_VCSW] = (double)ru->ru_nvcsw;
    res->v[M_IVCSW] = (double)ru->ru_nivcsw;
    res->v[M_STATUS] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    res->wstatus = status;
}

/*
 * run_measured runs argv to completion, natively (preload NULL) or with
 * LD_PRELOAD=preload and GOSHIM_PROCS=procs (if not NULL), stdin from
 * /dev/null and, unless show, stdout and stderr to /dev/null. Returns 0
 * with the metrics in res, or -1: the fork failed (errno), or the exec did
 * (its errno in *exec_errno).
 */
int run_measured(char **argv, const char *preload, const char *procs, bool show,
                 struct run_result *res, int *exec_errno)
{
    struct rusage ru;
    int errp[2], status, pidfd = -1, err = 0;
    long peak;
    double t0;
    pid_t pid;
    ssize_t n;

    *exec_errno = 0;
    if (pipe2(errp, O_CLOEXEC) != 0)
        return -1;
    fflush(NULL);
    t0 = now_ms();
    pid = fork();
    if (pid < 0) {
        close(errp[0]);
        close(errp[1]);
        return -1;
    }
    if (pid == 0) {
        close(errp[0]);
        exec_measured(argv, preload, procs, show, errp[1]);
    }
    close(errp[1]);

#ifdef SYS_pidfd_open
    pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
#endif
    peak = peak_threads(pid, &pidfd);
    while (wait4(pid, &status, 0, &ru) < 0 && errno == EINTR)
        ;
    res->v[M_WALL] = now_ms() - t0;
    if (pidfd >= 0)
        close(pidfd);
    while ((n = read(errp[0], &err, sizeof err)) < 0 && errno == EINTR)
        ;
    close(errp[0]);
    if (n == (ssize_t)sizeof err) {
        *exec_errno = err;
        return -1;
    }
    put_usage(res, &ru, status, peak);
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* summarize computes median, minimum and maximum of metric over rr[0..n-1]; 0, or -1 (no memory). */
int summarize(const struct run_result *rr, int n, int metric, double *med, double *lo, double *hi)
{
    double *v = malloc((size_t)n * sizeof *v);

    if (v == NULL)
        return -1;
    for (int k = 0; k < n; k++)
        v[k] = rr[k].v[metric];
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    *med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    *lo = v[0];
    *hi = v[n - 1];
    free(v);
    return 0;
}
