/*
 * The launcher's command line (tools/cli.c): the command table's entry,
 * options and their values, and how a command says what went wrong. Every
 * command includes it, through tools/launcher.h.
 */
#ifndef GOSHIM_TOOLS_CLI_H
#define GOSHIM_TOOLS_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

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

/* Every command's usage lines, then goshim's own (tools/goshim.c, which holds the table). */
void print_usages(FILE *f);

/* "goshim CMD: message" and the usage on stderr, exit 2. */
void usage_error(const struct command *cmd, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 2, 3)));
/* The message (one line) on stderr, exit with status. */
void fail(int status, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));
int next_option(const struct command *cmd, const struct option_spec *opts, int argc, char **argv,
                int *i, const char **val);
/* s is a whole decimal number in [min, max]. */
bool parse_uint(const char *s, unsigned long long min, unsigned long long max);
/* s is a number of milliseconds, DIGITS or DIGITS.DIGITS, at most max. */
bool parse_msec(const char *s, double max);
/* mkdir -p dir (the --out DIR of compare and stress): 0, or -1 with errno set. */
int mkdir_p(const char *dir);
/* A failed exec of file reported as a shell would; the status to exit with. */
int exec_failed(const char *who, const char *file, int err);
/* "SIGSEGV", or "signal 40" for signals without a name. */
const char *sig_name(char *buf, size_t len, int sig);

#endif
