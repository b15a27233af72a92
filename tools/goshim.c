/*
 * goshim: the launcher for libgoshim.so.
 *
 *   goshim run [options] [--] CMD [ARGS...]      CMD on goshim's scheduler
 *   goshim compare [options] [--] CMD [ARGS...]  CMD natively and under goshim, side by side
 *   goshim stress [options] [--] CMD [ARGS...]   CMD under chaos mode, one seed per run
 *   goshim trace-plot FILE [-o OUT.png]          GOSHIM_SCHEDTRACE output as a chart
 *
 * Each command is a file of its own behind the table below, as git's
 * builtin commands are: cmd_run.c, cmd_compare.c, cmd_stress.c and
 * cmd_trace_plot.c, declared in launcher.h. What they share has a file
 * each: cli.c (options and errors), library.c (finding libgoshim.so and
 * commands), measure.c (a run's time, memory and threads, and their
 * statistics), gnuplot.c (charts) and schedtrace.c (reading a trace).
 * This file holds main, the command table and the top-level help.
 *
 * Exit statuses: 2 for bad arguments or when libgoshim.so cannot be found;
 * as in a shell, 127 when CMD is not found and 126 when it cannot be
 * executed; otherwise run exits with CMD's own status, compare with 0
 * (every run exited 0 in both modes) or 1, stress with 0 (every seed
 * passed) or 1, trace-plot with 0 or 1.
 */
#include <stdio.h>
#include <string.h>

#include "tools/launcher.h"

#ifndef GOSHIM_VERSION
#define GOSHIM_VERSION "0.0.0-dev"
#endif

/* ---- usage ------------------------------------------------------------------------------- */

static const char intro[] =
    "goshim runs an unmodified pthread program on a Go-style G/M/P scheduler\n"
    "(LD_PRELOAD=libgoshim.so): each thread becomes a task, N processors run them.\n"
    "\n";

static const char outro[] =
    "\n"
    "The library is $GOSHIM_LIB, else libgoshim.so beside this program, else\n"
    "../lib/libgoshim.so from its directory.\n"
    "Exit status: 2 for bad arguments or no library; 127 if CMD is not found, 126 if it\n"
    "cannot be executed; else run: CMD's status; compare: 0 if every run exited 0 in both\n"
    "modes, else 1; stress: 0 if every run passed, else 1; trace-plot: 0, or 1 for\n"
    "unreadable or malformed input.\n"
    "See goshim(1).\n";

static const struct command commands[] = {
    {"run", usage_run, help_run, cmd_run},
    {"compare", usage_compare, help_compare, cmd_compare},
    {"stress", usage_stress, help_stress, cmd_stress},
    {"trace-plot", usage_trace_plot, help_trace_plot, cmd_trace_plot},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

/* print_usages prints every command's usage lines, then goshim's own. */
void print_usages(FILE *f)
{
    for (size_t k = 0; k < NCOMMANDS; k++)
        fputs(commands[k].usage, f);
    fputs("       goshim --help | --version\n", f);
}

static void print_help(FILE *f)
{
    fputs(intro, f);
    print_usages(f);
    for (size_t k = 0; k < NCOMMANDS; k++) {
        fprintf(f, "\n%s:\n", commands[k].name);
        fputs(commands[k].help, f);
    }
    fputs(outro, f);
}

/* ---- main -------------------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    if (argc < 2)
        usage_error(NULL, "missing command");
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        print_help(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("goshim %s\n", GOSHIM_VERSION);
        return 0;
    }
    for (size_t k = 0; k < NCOMMANDS; k++) {
        if (strcmp(argv[1], commands[k].name) == 0)
            return commands[k].fn(&commands[k], argc - 1, argv + 1);
    }
    if (argv[1][0] == '-')
        usage_error(NULL, "unknown option '%s'", argv[1]);
    usage_error(NULL, "unknown command '%s'", argv[1]);
}
