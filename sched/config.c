/*
 * Configuration from the environment (the GOSHIM_ variables, listed once
 * in config.def) and the default number of Ps.
 *
 * A malformed value is never fatal and never silently misread: we print
 * which variable, what it held and what is accepted, and keep the default.
 * Reading happens once, at start-up, on an ordinary thread.
 *
 * Once per process tree, not once per process: the variable is inherited,
 * and a program that is a shell script runs dozens of processes (one
 * `python3 -c` through pyenv's shim script said the same line 36 times).
 * The first process to complain about NAME=VALUE appends "NAME=VALUE;" to
 * GOSHIM_REPORTED in its own environment, which its children inherit (a
 * shell imports it at start-up and exports it again); they stay quiet
 * about that same value, and a different value is reported anew. setenv is
 * safe here only because this runs in the constructor, before any thread.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/statfs.h>
#include <sys/syscall.h>

#include "libc.h"
#include "sched.h"
#include "preempt.h"
#include "throw.h"
#include "tls.h"

bool config_parse_int(const char *s, long min, long max, long *out)
{
    char *end;
    if (!s || !*s || isspace((unsigned char)*s))
        return false;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < min || v > max)
        return false;
    *out = v;
    return true;
}

bool config_parse_size(const char *s, size_t *out)
{
    char *end;
    if (!s || !isdigit((unsigned char)*s))
        return false;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return false;
    unsigned shift = 0;
    switch (*end) {
    case 'k':
    case 'K':
        shift = 10;
        end++;
        break;
    case 'm':
    case 'M':
        shift = 20;
        end++;
        break;
    case 'g':
    case 'G':
        shift = 30;
        end++;
        break;
    }
    if (*end || v > (~0ULL >> 24) >> shift)
        return false;
    *out = (size_t)(v << shift);
    return true;
}

bool config_parse_bool(const char *s, bool *out)
{
    if (s && (!strcmp(s, "1") || !strcmp(s, "0"))) {
        *out = s[0] == '1';
        return true;
    }
    return false;
}

/* The CPUs a cgroup v2 cpu.max ("QUOTA PERIOD", or "max PERIOD") allows, rounded up;
 * 0 for no limit or a text that is not one. */
int sched_cpu_max_cpus(const char *text)
{
    char *end;
    long quota = strtol(text, &end, 10);
    if (end == text || quota <= 0)
        return 0;
    const char *rest = end;
    long period = strtol(rest, &end, 10);
    if (end == rest || period <= 0)
        return 0;
    long cpus = (quota + period - 1) / period;
    return cpus > INT_MAX ? INT_MAX : (int)cpus;
}

/* CPUs in the affinity mask, capped by the cgroup v2 cpu.max quota of this
 * cgroup and its ancestors (rounded up, at least 1). */
int sched_usable_cpus(void)
{
    cpu_set_t set;
    int n = 1;
    CPU_ZERO(&set); /* the system call writes the kernel's mask size only */
    if (rt_syscall(SYS_sched_getaffinity, 0, sizeof set, &set) > 0)
        n = CPU_COUNT(&set);
    if (n < 1)
        n = 1;

    /* cpu.max is cgroup v2's: with none mounted at /sys/fs/cgroup (v1, or v2 only beside
     * it) there is none to read, nor the process's cgroup (0.08-0.1 ms of a start). */
    struct statfs fs;
    if (rt_syscall(SYS_statfs, "/sys/fs/cgroup", &fs, 0) != 0 || fs.f_type != CGROUP2_SUPER_MAGIC)
        return n;
    /* Raw reads, no stdio: fopen and fgets here cost a process's start 0.3-0.5 ms. */
    char text[4096], path[sizeof text + 32];
    if (rt_read_text("/proc/self/cgroup", text, sizeof text) < 0)
        return n;
    char *rel = strncmp(text, "0::", 3) == 0 ? text : strstr(text, "\n0::");
    if (!rel)
        return n;
    rel += rel == text ? 3 : 4;
    rel[strcspn(rel, "\n")] = 0;
    for (;;) {
        char quota[64];
        rt_snprint(path, sizeof path, "/sys/fs/cgroup%s/cpu.max", strcmp(rel, "/") ? rel : "");
        int lim = rt_read_text(path, quota, sizeof quota) > 0 ? sched_cpu_max_cpus(quota) : 0;
        if (lim > 0 && lim < n)
            n = lim;
        char *slash = strrchr(rel, '/');
        if (!slash || slash == rel)
            break;
        *slash = 0;
    }
    return n;
}

/* What a parser found wrong in a value, for complain (else empty). */
static char bad_part[160];

static void complain(const char *name, const char *val, const char *form)
{
    char entry[256], *all = NULL;
    const char *seen = getenv("GOSHIM_REPORTED");
    snprintf(entry, sizeof entry, "%s=%s;", name, val);
    if (seen && strstr(seen, entry))
        return; /* a parent process said it */
    if (bad_part[0])
        rt_print(2, "goshim: %s=%s is not valid: %s; want %s; using the default\n", name, val,
                 bad_part, form);
    else
        rt_print(2, "goshim: %s=%s is not valid: want %s; using the default\n", name, val, form);
    if (asprintf(&all, "%s%s", seen ? seen : "", entry) >= 0) {
        setenv("GOSHIM_REPORTED", all, 1);
        free(all);
    }
}

/* One parser per kind; each returns whether the text was valid. */
#define PARSE_INT(v, field, min, max)                                                              \
    (config_parse_int((v), (min), (max), &iv) && ((field) = (int)iv, 1))
#define PARSE_SIZE(v, field, min, max)                                                             \
    (config_parse_size((v), &sv) && sv >= (size_t)(min) && sv <= (size_t)(max) && ((field) = sv, 1))
#define PARSE_BOOL(v, field, min, max) (config_parse_bool((v), &bv) && ((field) = bv, 1))
#define PARSE_MSEC(v, field, min, max) config_parse_msec((v), (min), (max), &(field))
#define PARSE_PREEMPT(v, field, min, max)                                                          \
    (!strcmp((v), "kernel") ? ((field) = PREEMPT_KERNEL, 1)                                        \
                            : config_parse_msec((v), (min), (max), &(field)))
#define PARSE_WALK(v, field, min, max)                                                             \
    (!strcmp((v), "libgcc")      ? ((field) = PREEMPT_WALK_LIBGCC, 1)                              \
     : !strcmp((v), "libunwind") ? ((field) = PREEMPT_WALK_LIBUNWIND, 1)                           \
     : !strcmp((v), "both")      ? ((field) = PREEMPT_WALK_BOTH, 1)                                \
                                 : 0)
#define PARSE_SIGNAL(v, field, min, max) config_parse_signal((v), &(field))
#define PARSE_SEED(v, field, min, max)   config_parse_seed((v), &(field))
#define PARSE_FAULT(v, field, min, max)  fault_parse((v), &(field), bad_part, sizeof bad_part)
#define PARSE_START(v, field, min, max)                                                            \
    (!strcmp((v), "thread") ? ((field) = false, 1) : !strcmp((v), "now") ? ((field) = true, 1) : 0)
#define PARSE_DEADLOCK(v, field, min, max)                                                         \
    (!strcmp((v), "report")  ? ((field) = DEADLOCK_REPORT, 1)                                      \
     : !strcmp((v), "abort") ? ((field) = DEADLOCK_ABORT, 1)                                       \
     : !strcmp((v), "off")   ? ((field) = DEADLOCK_OFF, 1)                                         \
                             : 0)
#define PARSE_TLSMODE(v, field, min, max)                                                          \
    ((!strcmp((v), "full") || !strcmp((v), "errno")) &&                                            \
     ((field) = strcmp((v), "full") ? TLS_MODE_ERRNO : TLS_MODE_FULL, 1))

/* A number of milliseconds, fractions allowed, in [min, max]: ns. */
bool config_parse_msec(const char *s, long min, long max, int64_t *out)
{
    char *end;
    if (!s || !isdigit((unsigned char)*s))
        return false;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || v < (double)min || v > (double)max)
        return false;
    *out = (int64_t)(v * 1e6 + 0.5);
    return true;
}

/* A whole number that fits 64 bits unsigned, in decimal. */
bool config_parse_seed(const char *s, uint64_t *out)
{
    char *end;
    if (!s || !isdigit((unsigned char)*s))
        return false;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return false;
    *out = v;
    return true;
}

/* A signal number, or one of the names that make sense for preemption. */
bool config_parse_signal(const char *s, int *out)
{
    static const struct {
        const char *name;
        int sig;
    } names[] = {{"SIGURG", SIGURG},   {"URG", SIGURG},      {"SIGUSR1", SIGUSR1},
                 {"USR1", SIGUSR1},    {"SIGUSR2", SIGUSR2}, {"USR2", SIGUSR2},
                 {"SIGPROF", SIGPROF}, {"PROF", SIGPROF},    {"SIGVTALRM", SIGVTALRM},
                 {"VTALRM", SIGVTALRM}};
    long v;
    if (config_parse_int(s, 1, 64, &v) && v != SIGKILL && v != SIGSTOP) {
        *out = (int)v;
        return true;
    }
    for (size_t i = 0; s && i < sizeof names / sizeof names[0]; i++) {
        if (!strcmp(s, names[i].name)) {
            *out = names[i].sig;
            return true;
        }
    }
    return false;
}

int sched_config_from_env(struct sched_config *c)
{
    memset(c, 0, sizeof *c);
    c->maxthreads = 10000;
    c->tls_mode = TLS_MODE_FULL;
    c->preempt_ns = PREEMPT_KERNEL;
    c->preempt_signal = SIGURG;
    c->preempt_handoff = true;
    c->deadlock = DEADLOCK_REPORT;
    int bad = 0;
    const char *v;
    long iv;
    size_t sv;
    bool bv;
#define CONFIG_VAR(name, kind, field, min, max, form, dflt, text)                                  \
    if ((v = getenv(#name)) != NULL && !PARSE_##kind(v, c->field, min, max)) {                     \
        complain(#name, v, form);                                                                  \
        bad_part[0] = 0;                                                                           \
        bad++;                                                                                     \
    }
#include "config.def" /* its CONFIG_ENV variables are read where they are used */
    (void)iv;
    (void)sv;
    (void)bv;
    c->preempt_signal_set = getenv("GOSHIM_PREEMPT_SIGNAL") != NULL;
    uint64_t seed;
    c->chaos = (v = getenv("GOSHIM_CHAOS")) != NULL && config_parse_seed(v, &seed);
    return bad;
}
