/*
 * Shared by the launcher suites (tests/test_launcher.c: arguments, --help,
 * --version, run; tests/test_launcher_tools.c: compare, trace-plot, stress):
 * launch runs build/goshim in a child and captures the chosen streams into
 * out; assert_exit checks its status; small file helpers for the temporary
 * trees the tests build. Everything is static (inline), so each suite gets
 * its own out and may use only part.
 */
#ifndef GOSHIM_TESTS_LAUNCHER_HELPERS_H
#define GOSHIM_TESTS_LAUNCHER_HELPERS_H

#include <criterion/criterion.h>
#include <errno.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/helpers.h"

#define LAUNCHER GOSHIM_BUILD_DIR "/goshim"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define skip_if_sanitized()                                                                        \
    cr_skip_test("preloads this build's sanitized libgoshim.so into a program; the preload "       \
                 "suites do not run under ASan/TSan either")
#else
#define skip_if_sanitized()                                                                        \
    do {                                                                                           \
    } while (0)
#endif

/* Which of the launcher's streams a launch captures. */
enum stream { BOTH, STDOUT_ONLY, STDERR_ONLY };

static char out[1 << 16];

/*
 * launch runs `goshim ARGS...` (NULL-terminated) in a child, with env_extra
 * and preload as run_exec takes them, capturing the chosen streams into
 * out. Returns the wait status.
 */
static inline int launch_v(enum stream which, const char *env_extra, const char *preload,
                           va_list ap)
{
    static const char *const redirect[] = {
        [BOTH] = "exec \"$@\"",
        [STDOUT_ONLY] = "exec \"$@\" 2>/dev/null",
        [STDERR_ONLY] = "exec \"$@\" >/dev/null",
    };
    char *argv[64];
    int n = 0;

    cr_assert(access(LAUNCHER, X_OK) == 0, "%s is not built: run make", LAUNCHER);
    argv[n++] = "/bin/sh";
    argv[n++] = "-c";
    argv[n++] = (char *)redirect[which];
    argv[n++] = "sh";
    argv[n++] = LAUNCHER;
    for (char *a; (a = va_arg(ap, char *)) != NULL;) {
        cr_assert(n < 63, "too many arguments");
        argv[n++] = a;
    }
    argv[n] = NULL;
    return run_exec("/bin/sh", argv, env_extra, preload, out, sizeof out);
}

static inline int launch(enum stream which, ...)
{
    va_list ap;
    int st;

    va_start(ap, which);
    st = launch_v(which, NULL, NULL, ap);
    va_end(ap);
    return st;
}

static inline int launch_env(enum stream which, const char *env_extra, const char *preload, ...)
{
    va_list ap;
    int st;

    va_start(ap, preload);
    st = launch_v(which, env_extra, preload, ap);
    va_end(ap);
    return st;
}

#define GOSHIM(which, ...) launch(which, __VA_ARGS__, (char *)NULL)

static inline void assert_exit(int st, int code, const char *what)
{
    cr_assert(WIFEXITED(st), "%s: not an exit: status %#x\n%s", what, st, out);
    cr_assert_eq(WEXITSTATUS(st), code, "%s: exit %d, want %d\n%s", what, WEXITSTATUS(st), code,
                 out);
}

static inline size_t count_lines(const char *s)
{
    size_t n = 0;

    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* A fresh directory under /tmp (in dir), removed by remove_tree. */
static inline void make_tmpdir(char *dir, size_t len)
{
    snprintf(dir, len, "/tmp/goshim-launcher-XXXXXX");
    cr_assert(mkdtemp(dir) != NULL, "mkdtemp: %s", strerror(errno));
}

static inline int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static inline void remove_tree(const char *dir)
{
    nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

static inline void write_file(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");

    cr_assert(f != NULL, "%s: %s", path, strerror(errno));
    fputs(text, f);
    cr_assert(fclose(f) == 0, "%s: %s", path, strerror(errno));
    cr_assert(chmod(path, mode) == 0);
}

static inline void copy_file(const char *from, const char *to, mode_t mode)
{
    char buf[1 << 16];
    FILE *in = fopen(from, "rb"), *o = fopen(to, "wb");
    size_t n;

    cr_assert(in != NULL && o != NULL, "copy %s to %s: %s", from, to, strerror(errno));
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        cr_assert_eq(fwrite(buf, 1, n, o), n);
    fclose(in);
    cr_assert(fclose(o) == 0);
    cr_assert(chmod(to, mode) == 0);
}

#endif
