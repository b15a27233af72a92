/*
 * The launcher's command line: options and their values, and how a
 * command says what went wrong.
 *
 * Every command reads its options with next_option, from a table of
 * option_spec: "--name VALUE", "--name=VALUE", "-xVALUE", "-x VALUE", flags
 * alone, "--" ending the options. The commands check the values with
 * parse_uint and parse_msec against the ranges the runtime accepts, so
 * that a typo fails in the launcher, at once, instead of becoming a
 * warning and a default inside the program.
 *
 * Errors are one line on stderr, in words a user can act on: a usage
 * error names the command and repeats its usage, then exits 2; fail
 * exits with the status given; exec_failed words a failed exec as a shell
 * does (127 not found, 126 not executable).
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tools/cli.h"

/*
 * usage_error prints "goshim CMD: message" and the command's usage (every
 * command's when cmd is NULL) on stderr, and exits 2.
 */
void usage_error(const struct command *cmd, const char *fmt, ...)
{
    va_list ap;

    fflush(stdout);
    fprintf(stderr, "goshim%s%s: ", cmd ? " " : "", cmd ? cmd->name : "");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    if (cmd != NULL)
        fputs(cmd->usage, stderr);
    else
        print_usages(stderr);
    fputs("Run 'goshim --help' for the options.\n", stderr);
    exit(EXIT_USAGE);
}

/* fail prints the message (one line, newline added) on stderr and exits with status. */
void fail(int status, const char *fmt, ...)
{
    va_list ap;

    fflush(stdout);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(status);
}

/*
 * next_option reads argv[*i]: the index of the option in opts (its value,
 * if it takes one, in *val: "--name VALUE", "--name=VALUE", "-xVALUE" or
 * "-x VALUE"), OPT_OPERAND at an operand (not consumed), or OPT_END after
 * "--" (consumed) or at the end. An unknown option, a missing value or a
 * value given to a flag is a usage error.
 */
int next_option(const struct command *cmd, const struct option_spec *opts, int argc, char **argv,
                int *i, const char **val)
{
    const char *a;

    *val = NULL;
    if (*i >= argc)
        return OPT_END;
    a = argv[*i];
    if (strcmp(a, "--") == 0) {
        (*i)++;
        return OPT_END;
    }
    if (a[0] != '-' || a[1] == '\0')
        return OPT_OPERAND;
    for (int k = 0; opts[k].name != NULL; k++) {
        const struct option_spec *o = &opts[k];

        if (a[1] == '-') {
            size_t len = strlen(o->name);

            if (strncmp(a + 2, o->name, len) != 0 || (a[2 + len] != '\0' && a[2 + len] != '='))
                continue;
            (*i)++;
            if (a[2 + len] == '=') {
                if (!o->has_value)
                    usage_error(cmd, "option '--%s' takes no value", o->name);
                *val = a + 3 + len;
            } else if (o->has_value) {
                if (*i >= argc)
                    usage_error(cmd, "option '--%s' needs a value", o->name);
                *val = argv[(*i)++];
            }
            return k;
        }
        if (o->letter != 0 && a[1] == o->letter) {
            (*i)++;
            if (!o->has_value) {
                if (a[2] != '\0')
                    usage_error(cmd, "unknown option '%s'", a);
            } else if (a[2] != '\0') {
                *val = a + 2;
            } else if (*i >= argc) {
                usage_error(cmd, "option '-%c' needs a value", o->letter);
            } else {
                *val = argv[(*i)++];
            }
            return k;
        }
    }
    usage_error(cmd, "unknown option '%s'", a);
}

/* s is a whole decimal number (digits only: no sign, blanks or 0x) in [min, max]. */
bool parse_uint(const char *s, unsigned long long min, unsigned long long max)
{
    unsigned long long v;

    if (*s == '\0' || strspn(s, "0123456789") != strlen(s))
        return false;
    errno = 0;
    v = strtoull(s, NULL, 10);
    return errno == 0 && v >= min && v <= max;
}

/* s is a number of milliseconds, DIGITS or DIGITS.DIGITS, at most max. */
bool parse_msec(const char *s, double max)
{
    size_t whole = strspn(s, "0123456789");

    if (whole == 0)
        return false;
    if (s[whole] == '.') {
        size_t frac = strspn(s + whole + 1, "0123456789");

        if (frac == 0 || s[whole + 1 + frac] != '\0')
            return false;
    } else if (s[whole] != '\0') {
        return false;
    }
    return strtod(s, NULL) <= max;
}

/* mkdir -p dir: 0, or -1 with errno set. */
int mkdir_p(const char *dir)
{
    char *copy = strdup(dir);
    int rc = 0;

    if (copy == NULL)
        return -1;
    for (char *p = copy + 1; rc == 0; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;

        *p = '\0';
        if (mkdir(copy, 0777) != 0 && errno != EEXIST)
            rc = -1;
        *p = c;
        if (c == '\0')
            break;
    }
    free(copy);
    if (rc == 0) {
        struct stat st;

        if (stat(dir, &st) != 0)
            return -1;
        if (!S_ISDIR(st.st_mode)) {
            errno = ENOTDIR;
            return -1;
        }
    }
    return rc;
}

/* exec_failed reports a failed exec of file as a shell would, and returns the status to exit with. */
int exec_failed(const char *who, const char *file, int err)
{
    if (err == ENOENT && strchr(file, '/') == NULL) {
        fprintf(stderr, "%s: %s: command not found\n", who, file);
        return EXIT_NOTFOUND;
    }
    fprintf(stderr, "%s: %s: %s\n", who, file, strerror(err));
    return err == ENOENT ? EXIT_NOTFOUND : EXIT_NOEXEC;
}

/* sig_name returns "SIGSEGV" for SIGSEGV, "signal 40" for signals without a name. */
const char *sig_name(char *buf, size_t len, int sig)
{
    const char *abbrev = sigabbrev_np(sig);

    if (abbrev != NULL)
        snprintf(buf, len, "SIG%s", abbrev);
    else
        snprintf(buf, len, "signal %d", sig);
    return buf;
}
