/*
 * prog_limits_exec [SETTING...] -- PROG [ARGS...]: run PROG under the
 * limits a real system may impose (scripts/test_limits.sh and
 * tests/test_preload_limits.c use it). Each SETTING, applied in order:
 *
 *   as=BYTES[K|M|G]      RLIMIT_AS (soft and hard)
 *   nofile=N             RLIMIT_NOFILE
 *   sigpending=N         RLIMIT_SIGPENDING
 *   nproc=N              RLIMIT_NPROC (root ignores it: give uid= too)
 *   nproc+=N             RLIMIT_NPROC at N more than the processes (threads
 *                        included) the target uid runs now
 *   uid=N                setgroups(0), setgid(N), setuid(N) (last, after
 *                        the limits; the environment, LD_PRELOAD too, passes)
 *   deny=NAME,...:ERR    a seccomp filter makes the system calls named fail
 *                        with ERR (EPERM or ENOSYS); names known: modify_ldt,
 *                        timer_create, membarrier, rt_tgsigqueueinfo,
 *                        process_madvise, clone3
 *
 * PROG with a slash is run as is; else the program of that name next to
 * this one, if any, else PROG from PATH. Exit 125 when a setting is bad or
 * cannot be applied (the message says which), 127 when PROG cannot run.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

static const struct {
    const char *name;
    int nr;
} known[] = {
    {"modify_ldt", SYS_modify_ldt},           {"timer_create", SYS_timer_create},
    {"membarrier", SYS_membarrier},           {"rt_tgsigqueueinfo", SYS_rt_tgsigqueueinfo},
    {"process_madvise", SYS_process_madvise}, {"clone3", SYS_clone3},
};
enum { NKNOWN = sizeof known / sizeof known[0] };

static void die(const char *what, const char *arg)
{
    fprintf(stderr, "prog_limits_exec: %s: %s\n", what, arg);
    exit(125);
}

static rlim_t number(const char *s, const char *arg)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    switch (*end) {
    case 'K':
        v <<= 10, end++;
        break;
    case 'M':
        v <<= 20, end++;
        break;
    case 'G':
        v <<= 30, end++;
        break;
    }
    if (errno || end == s || *end)
        die("not a number", arg);
    return (rlim_t)v;
}

static void set_limit(int res, rlim_t v, const char *arg)
{
    struct rlimit r = {v, v};
    if (setrlimit(res, &r) != 0)
        die(strerror(errno), arg);
}

/* tasks_of counts the threads of every process owned by uid. */
static long tasks_of(uid_t uid)
{
    DIR *d = opendir("/proc");
    long n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        char path[300], line[256];
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        snprintf(path, sizeof path, "/proc/%s/status", e->d_name);
        FILE *f = fopen(path, "r");
        long threads = 0, owner = -1;
        while (f && fgets(line, sizeof line, f)) {
            if (strncmp(line, "Uid:", 4) == 0)
                owner = strtol(line + 4, NULL, 10);
            else if (strncmp(line, "Threads:", 8) == 0)
                threads = strtol(line + 8, NULL, 10);
        }
        if (f)
            fclose(f);
        if (owner == (long)uid)
            n += threads;
    }
    if (d)
        closedir(d);
    return n;
}

static void deny(const char *spec, const char *arg)
{
    char names[256];
    const char *colon = strrchr(spec, ':');
    if (!colon || (size_t)(colon - spec) >= sizeof names)
        die("want deny=NAME,...:EPERM|ENOSYS", arg);
    int err = strcmp(colon + 1, "EPERM") == 0    ? EPERM
              : strcmp(colon + 1, "ENOSYS") == 0 ? ENOSYS
                                                 : 0;
    if (!err)
        die("want EPERM or ENOSYS after the colon", arg);
    memcpy(names, spec, (size_t)(colon - spec));
    names[colon - spec] = '\0';
    struct sock_filter f[2 + 2 * NKNOWN];
    unsigned n = 0;
    f[n++] =
        (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
    char *save = NULL;
    for (char *tok = strtok_r(names, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int i = 0;
        while (i < (int)NKNOWN && strcmp(known[i].name, tok) != 0)
            i++;
        if (i == (int)NKNOWN || n + 3 > sizeof f / sizeof f[0])
            die("unknown or repeated system call", tok);
        f[n++] =
            (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)known[i].nr, 0, 1);
        f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (unsigned)err);
    }
    f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    struct sock_fprog prog = {(unsigned short)n, f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
        die(strerror(errno), arg);
}

int main(int argc, char **argv)
{
    int i = 1;
    long uid = -1;
    long nproc_more = -1;
    for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
        char *a = argv[i], *eq = strchr(a, '=');
        if (!eq)
            die("want NAME=VALUE", a);
        const char *v = eq + 1;
        size_t klen = (size_t)(eq - a);
        if (klen == 2 && !strncmp(a, "as", 2))
            set_limit(RLIMIT_AS, number(v, a), a);
        else if (klen == 6 && !strncmp(a, "nofile", 6))
            set_limit(RLIMIT_NOFILE, number(v, a), a);
        else if (klen == 10 && !strncmp(a, "sigpending", 10))
            set_limit(RLIMIT_SIGPENDING, number(v, a), a);
        else if (klen == 5 && !strncmp(a, "nproc", 5))
            set_limit(RLIMIT_NPROC, number(v, a), a);
        else if (klen == 6 && !strncmp(a, "nproc+", 6))
            nproc_more = (long)number(v, a);
        else if (klen == 3 && !strncmp(a, "uid", 3))
            uid = (long)number(v, a);
        else if (klen == 4 && !strncmp(a, "deny", 4))
            deny(v, a);
        else
            die("unknown setting", a);
    }
    if (i + 1 >= argc)
        die("usage", "prog_limits_exec [SETTING...] -- PROG [ARGS...]");
    if (nproc_more >= 0) /* counted last: this process is one of the uid's once it is set */
        set_limit(RLIMIT_NPROC,
                  (rlim_t)(tasks_of(uid >= 0 ? (uid_t)uid : getuid()) + (uid >= 0) + nproc_more),
                  "nproc+");
    if (uid >= 0 && (setgroups(0, NULL) != 0 || setgid((gid_t)uid) != 0 || setuid((uid_t)uid) != 0))
        die(strerror(errno), "uid");
    char **av = argv + i + 1;
    char path[4096];
    const char *slash = strrchr(argv[0], '/');
    if (!strchr(av[0], '/')) {
        snprintf(path, sizeof path, "%.*s%s", slash ? (int)(slash - argv[0] + 1) : 0, argv[0],
                 av[0]);
        if (slash && access(path, X_OK) == 0)
            execv(path, av);
        execvp(av[0], av);
    } else {
        execv(av[0], av);
    }
    fprintf(stderr, "prog_limits_exec: cannot run %s: %s\n", av[0], strerror(errno));
    return 127;
}
