/*
 * What the launcher's commands share (tools/goshim.c defines these; each
 * command may live in its own file: tools/stress.c is goshim stress).
 */
#ifndef GOSHIM_TOOLS_LAUNCHER_H
#define GOSHIM_TOOLS_LAUNCHER_H

#include <stdbool.h>
#include <stddef.h>

#define EXIT_USAGE    2   /* bad arguments, or no libgoshim.so */
#define EXIT_NOEXEC   126 /* CMD found but not executable (as sh) */
#define EXIT_NOTFOUND 127 /* CMD not found (as sh) */

#define MAX_PROCS 1024 /* the runtime's limit (sched/config.def) */

/* One option of a command: --name (and -letter), with a value or not. */
struct option_spec {
    const char *name;
    char letter; /* 0: long form only */
    bool has_value;
};

/* next_option's results besides an index into the option table. */
enum { OPT_END = -1, OPT_OPERAND = -2 };

/* A command: how it is called, its usage line(s), its help and its function. */
struct command {
    const char *name;
    const char *usage;
    const char *help;
    int (*fn)(const struct command *cmd, int argc, char **argv);
};

/* "goshim CMD: message" and the usage on stderr, exit 2. */
void usage_error(const struct command *cmd, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 2, 3)));
/* The message (one line) on stderr, exit with status. */
void fail(int status, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));
int next_option(const struct command *cmd, const struct option_spec *opts, int argc, char **argv,
                int *i, const char **val);
/* s is a whole decimal number in [min, max]. */
bool parse_uint(const char *s, unsigned long long min, unsigned long long max);
/* The absolute path of libgoshim.so (malloc'd), or exit 2 saying where it looked. */
char *find_library(const char *who);
/* The LD_PRELOAD for CMD (malloc'd): the library first, then the caller's. */
char *preload_value(const char *lib);
/* A failed exec of file reported as a shell would; the status to exit with. */
int exec_failed(const char *who, const char *file, int err);
/* Whether CMD can be executed (a path, or a name in $PATH); else false with errno set. */
bool find_command(const char *cmd);
double now_ms(void);
/* mkdir -p dir: 0, or -1 with errno set. */
int mkdir_p(const char *dir);
/* "SIGSEGV", or "signal 40" for signals without a name. */
const char *sig_name(char *buf, size_t len, int sig);

/* goshim stress (tools/stress.c). */
extern const char usage_stress[], help_stress[];
int cmd_stress(const struct command *cmd, int argc, char **argv);

#endif
