/*
 * Shared helpers for the Criterion suites: loop scaling, running code in a
 * child process, and running tests/progs programs natively or under
 * LD_PRELOAD=libgoshim.so. Everything is static inline so any number of
 * tests/test_*.c files may include this header.
 *
 * The Makefile defines GOSHIM_BUILD_DIR (absolute build directory of this
 * variant, e.g. .../build or .../build/san-address) and GOSHIM_SRC_DIR
 * (absolute source tree). Under SAN=address it also defines
 * GOSHIM_PRELOAD_FIRST, the sanitizer runtime that must precede
 * libgoshim.so in LD_PRELOAD.
 *
 * Never preload the Criterion runner itself: LD_PRELOAD is set only in the
 * child that execs the program.
 */
#ifndef GOSHIM_TESTS_HELPERS_H
#define GOSHIM_TESTS_HELPERS_H

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <asm/ldt.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef GOSHIM_BUILD_DIR
#error "GOSHIM_BUILD_DIR must be defined by the Makefile"
#endif
#ifndef GOSHIM_SRC_DIR
#error "GOSHIM_SRC_DIR must be defined by the Makefile"
#endif

/* A child (run_child, run_exec) gets SIGALRM after this many seconds. */
#ifndef TEST_CHILD_TIMEOUT
#define TEST_CHILD_TIMEOUT 120
#endif

#define TEST_LIBGOSHIM   GOSHIM_BUILD_DIR "/libgoshim.so"
#define TEST_PROGS_DIR   GOSHIM_BUILD_DIR "/tests/progs"
#define TEST_SCRIPTS_DIR GOSHIM_SRC_DIR "/scripts"

/*
 * test_scale returns n multiplied by GOSHIM_TEST_SCALE (a positive number,
 * e.g. 0.1 or 10; unset or malformed: 1), never less than 1. Use it for loop
 * counts and sizes, never for timeouts.
 */
static inline long test_scale(long n)
{
    const char *s = getenv("GOSHIM_TEST_SCALE");
    char *end;
    double f;
    long r;

    if (s == NULL || *s == '\0')
        return n;
    errno = 0;
    f = strtod(s, &end);
    if (errno != 0 || *end != '\0' || !(f > 0))
        return n;
    r = (long)((double)n * f);
    return r < 1 ? 1 : r;
}

/* Child set-up shared by run_child and run_exec: output to the pipe, a deadline, die with the parent. */
static inline void test_child_setup_(int wfd)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    alarm(TEST_CHILD_TIMEOUT);
    if (dup2(wfd, STDOUT_FILENO) < 0 || dup2(wfd, STDERR_FILENO) < 0)
        _exit(126);
    if (wfd != STDOUT_FILENO && wfd != STDERR_FILENO)
        close(wfd);
}

/*
 * Read the pipe until EOF into out (always NUL-terminated; excess is read
 * and dropped), then reap pid. Returns the wait status, or -1 on error.
 */
static inline int test_collect_(pid_t pid, int rfd, char *out, size_t outlen)
{
    size_t len = 0;
    char scratch[512];
    int status;

    for (;;) {
        char *dst = scratch;
        size_t room = sizeof scratch;
        ssize_t n;

        if (out != NULL && outlen > 0 && len + 1 < outlen) {
            dst = out + len;
            room = outlen - 1 - len;
        }
        n = read(rfd, dst, room);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        if (dst != scratch)
            len += (size_t)n;
    }
    if (out != NULL && outlen > 0)
        out[len] = '\0';
    close(rfd);
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR)
            return -1;
    }
    return status;
}

/* Flush stdio, make a close-on-exec pipe and fork: the pid (0 in the child), or -1. */
static inline pid_t test_fork_piped_(int fds[2])
{
    pid_t pid;

    fflush(NULL);
    if (pipe2(fds, O_CLOEXEC) < 0)
        return -1;
    pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
    }
    return pid;
}

/*
 * run_child runs fn(arg) in a forked child whose stdout and stderr go to a
 * pipe; the output is copied into out (NUL-terminated, truncated to outlen).
 * The child exits with fn's return value after flushing stdio. Returns the
 * wait status (use WIFEXITED/WEXITSTATUS/WTERMSIG), or -1 if fork failed.
 * Use it for code that is expected to crash, abort or print diagnostics.
 */
static inline int run_child(int (*fn)(void *), void *arg, char *out, size_t outlen)
{
    int fds[2];
    pid_t pid = test_fork_piped_(fds);

    if (pid < 0)
        return -1;
    if (pid == 0) {
        int rc;

        close(fds[0]);
        test_child_setup_(fds[1]);
        setvbuf(stdout, NULL, _IONBF, 0);
        rc = fn(arg);
        fflush(NULL);
        _exit(rc);
    }
    close(fds[1]);
    return test_collect_(pid, fds[0], out, outlen);
}

/*
 * run_exec runs the executable at path with argv (NULL: just the path) in a
 * child, output captured as by run_child. env_extra is NULL or a
 * space-separated list of NAME=VALUE assignments added to the child's
 * environment. preload is NULL (LD_PRELOAD removed) or the LD_PRELOAD value
 * for the child. Returns the wait status; exit status 127 means exec failed.
 */
static inline int run_exec(const char *path, char *const argv[], const char *env_extra,
                           const char *preload, char *out, size_t outlen)
{
    int fds[2];
    pid_t pid = test_fork_piped_(fds);

    if (pid < 0)
        return -1;
    if (pid == 0) {
        char *const default_argv[] = {(char *)path, NULL};

        close(fds[0]);
        test_child_setup_(fds[1]);
        if (env_extra != NULL) {
            char *copy = strdup(env_extra);
            char *save = NULL;

            for (char *tok = strtok_r(copy, " \t\n", &save); tok != NULL;
                 tok = strtok_r(NULL, " \t\n", &save)) {
                char *eq = strchr(tok, '=');

                if (eq == NULL)
                    continue;
                *eq = '\0';
                setenv(tok, eq + 1, 1);
            }
        }
        if (preload != NULL)
            setenv("LD_PRELOAD", preload, 1);
        else
            unsetenv("LD_PRELOAD");
        execv(path, argv != NULL ? argv : default_argv);
        dprintf(STDERR_FILENO, "run_exec: cannot exec %s: %s\n", path, strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    return test_collect_(pid, fds[0], out, outlen);
}

/*
 * Per-G TCBs (full TLS mode) cannot run under ASan or TSan: their runtimes
 * keep per-thread state in TLS, which a fresh TCB does not have. Tests of
 * full mode call this first; the sanitizer runs use GOSHIM_TLS=errno.
 */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define skip_without_full_tls()                                                                    \
    cr_skip_test("needs per-G TCBs, which sanitizer runtimes do not support (run `make test`)")
#else
#define skip_without_full_tls()                                                                    \
    do {                                                                                           \
        const char *tls_env_ = getenv("GOSHIM_TLS");                                               \
        if (tls_env_ && strcmp(tls_env_, "full") != 0)                                             \
            cr_skip_test("needs GOSHIM_TLS=full; this run uses GOSHIM_TLS=%s", tls_env_);          \
    } while (0)
#endif

/* Path of build/tests/progs/<prog> in buf. */
static inline const char *test_prog_path(const char *prog, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", TEST_PROGS_DIR, prog);
    return buf;
}

/* The LD_PRELOAD value that loads this build's libgoshim.so (after libasan under ASan). */
static inline const char *test_preload_value(void)
{
#ifdef GOSHIM_PRELOAD_FIRST
    return GOSHIM_PRELOAD_FIRST ":" TEST_LIBGOSHIM;
#else
    return TEST_LIBGOSHIM;
#endif
}

/* run_native runs build/tests/progs/<prog> without goshim; see run_exec. */
static inline int run_native(const char *prog, char *const argv[], const char *env_extra, char *out,
                             size_t outlen)
{
    char path[4096];

    return run_exec(test_prog_path(prog, path, sizeof path), argv, env_extra, NULL, out, outlen);
}

/*
 * run_preloaded runs build/tests/progs/<prog> with LD_PRELOAD=<abs path of
 * libgoshim.so> set in the child only; see run_exec.
 */
static inline int run_preloaded(const char *prog, char *const argv[], const char *env_extra,
                                char *out, size_t outlen)
{
    char path[4096];

    return run_exec(test_prog_path(prog, path, sizeof path), argv, env_extra, test_preload_value(),
                    out, outlen);
}

static inline int test_cmp_lines_(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * sort_lines sorts the lines of buf in place (bytewise), for comparing the
 * output of threads that print in any order. Returns the number of lines.
 */
static inline size_t sort_lines(char *buf)
{
    size_t len = strlen(buf), n = 0, cap = 16;
    char **lines = malloc(cap * sizeof *lines);
    char *copy = strdup(buf), *p = copy, *dst = buf;

    if (lines == NULL || copy == NULL) {
        free(lines);
        free(copy);
        return 0;
    }
    while (*p != '\0') {
        char *nl = strchr(p, '\n');

        if (n == cap) {
            char **grown = realloc(lines, 2 * cap * sizeof *lines);

            if (grown == NULL)
                break;
            lines = grown;
            cap *= 2;
        }
        lines[n++] = p;
        if (nl == NULL)
            break;
        *nl = '\0';
        p = nl + 1;
    }
    qsort(lines, n, sizeof *lines, test_cmp_lines_);
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(lines[i]);

        memcpy(dst, lines[i], l);
        dst += l;
        if ((size_t)(dst - buf) < len)
            *dst++ = '\n';
    }
    *dst = '\0';
    free(lines);
    free(copy);
    return n;
}

/*
 * host_ldt_works says whether this CPU loads an LDT entry that modify_ldt
 * wrote: on some virtual machines the kernel keeps the entry but the CPU
 * never sees it (lar fails), and goshim falls back to arch_prctl there.
 * Asked in a child, so the test process's own LDT stays empty.
 */
static inline bool host_ldt_works(void)
{
    static int works = -1;
    if (works >= 0)
        return works;
    pid_t pid = fork();
    if (pid == 0) {
        static char base[64];
        struct user_desc d = {.entry_number = 1,
                              .base_addr = (unsigned)(uintptr_t)base,
                              .limit = 0xfffff,
                              .seg_32bit = 1,
                              .limit_in_pages = 1,
                              .useable = 1};
        uint32_t sel = 1 << 3 | 4 | 3, rights = 0;
        bool ok = false;
        if (syscall(SYS_modify_ldt, 0x11, &d, sizeof d) == 0)
            __asm__ volatile("lar %2, %1\n\tsetz %0" : "=q"(ok), "=r"(rights) : "r"(sel) : "cc");
        _exit(ok ? 0 : 1);
    }
    int st = 0;
    works = pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    return works;
}

#endif
