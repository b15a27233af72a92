/*
 * Finding what the launcher runs: libgoshim.so, and commands on $PATH.
 *
 * The library is $GOSHIM_LIB if set, else libgoshim.so in the launcher's
 * own directory (the build tree: build/goshim beside build/libgoshim.so),
 * else ../lib/libgoshim.so from there (installed: PREFIX/bin/goshim and
 * PREFIX/lib/libgoshim.so). The directory comes from /proc/self/exe, so a
 * PATH lookup or a symlink to the launcher changes nothing. The path put in
 * LD_PRELOAD is absolute: the program may chdir, and its children inherit
 * it. A sanitizer build (GOSHIM_PRELOAD_FIRST) puts its runtime first.
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tools/cli.h"
#include "tools/library.h"

/*
 * find_library returns the absolute path of libgoshim.so (malloc'd), from
 * $GOSHIM_LIB, beside the launcher, or in ../lib from it. If there is none
 * it says where it looked and exits 2.
 */
char *find_library(const char *who)
{
    const char *env = getenv("GOSHIM_LIB");
    char exe[PATH_MAX], *slash, *path;
    ssize_t n;

    if (env != NULL && *env != '\0') {
        path = realpath(env, NULL);
        if (path == NULL || access(path, R_OK) != 0)
            fail(EXIT_USAGE, "%s: GOSHIM_LIB=%s: %s", who, env, strerror(errno));
        return path;
    }
    n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n < 0)
        fail(EXIT_USAGE, "%s: cannot find libgoshim.so: /proc/self/exe: %s (set GOSHIM_LIB)", who,
             strerror(errno));
    exe[n] = '\0';
    slash = strrchr(exe, '/');
    if (slash != NULL)
        *slash = '\0';
    for (int k = 0; k < 2; k++) {
        char cand[PATH_MAX + 32];

        snprintf(cand, sizeof cand, k == 0 ? "%s/libgoshim.so" : "%s/../lib/libgoshim.so", exe);
        if (access(cand, R_OK) == 0 && (path = realpath(cand, NULL)) != NULL)
            return path;
    }
    fail(EXIT_USAGE, "%s: libgoshim.so not found in %s or %s/../lib (set GOSHIM_LIB to its path)",
         who, exe, exe);
}

/*
 * preload_value returns (malloc'd) the LD_PRELOAD for CMD: the library
 * first, then whatever LD_PRELOAD held (ld.so takes colons or spaces).
 */
char *preload_value(const char *lib)
{
    const char *old = getenv("LD_PRELOAD");
    const char *first = "";
    char *v;

#ifdef GOSHIM_PRELOAD_FIRST
    first = GOSHIM_PRELOAD_FIRST ":"; /* a sanitizer runtime must precede the library */
#endif
    if (asprintf(&v, "%s%s%s%s", first, lib, old && *old ? ":" : "", old && *old ? old : "") < 0)
        fail(EXIT_USAGE, "goshim: out of memory");
    return v;
}

/* Whether an executable file called name is in $PATH. */
bool find_in_path(const char *name)
{
    const char *path = getenv("PATH");
    char *copy, *save = NULL;
    bool found = false;

    copy = strdup(path != NULL && *path != '\0' ? path : "/usr/local/bin:/usr/bin:/bin");
    if (copy == NULL)
        return false;
    for (char *dir = strtok_r(copy, ":", &save); dir != NULL && !found;
         dir = strtok_r(NULL, ":", &save)) {
        char file[PATH_MAX];
        struct stat st;

        snprintf(file, sizeof file, "%s/%s", dir, name);
        found = stat(file, &st) == 0 && S_ISREG(st.st_mode) && access(file, X_OK) == 0;
    }
    free(copy);
    return found;
}

/* Whether cmd can be executed: a path to an executable file, or such a file in $PATH. */
bool find_command(const char *cmd)
{
    if (strchr(cmd, '/') != NULL)
        return access(cmd, X_OK) == 0;
    if (find_in_path(cmd))
        return true;
    errno = ENOENT;
    return false;
}
