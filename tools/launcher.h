/*
 * The launcher's commands, one file each (tools/cmd_run.c, cmd_compare.c,
 * cmd_stress.c, cmd_trace_plot.c), for the command table in tools/goshim.c,
 * as git declares its builtin commands in one header. A new command is a
 * new file, its three names here and a row in the table.
 */
#ifndef GOSHIM_TOOLS_LAUNCHER_H
#define GOSHIM_TOOLS_LAUNCHER_H

#include "tools/cli.h"

/* goshim run (tools/cmd_run.c). */
extern const char usage_run[], help_run[];
int cmd_run(const struct command *cmd, int argc, char **argv);

/* goshim compare (tools/cmd_compare.c). */
extern const char usage_compare[], help_compare[];
int cmd_compare(const struct command *cmd, int argc, char **argv);

/* goshim stress (tools/cmd_stress.c). */
extern const char usage_stress[], help_stress[];
int cmd_stress(const struct command *cmd, int argc, char **argv);

/* goshim trace-plot (tools/cmd_trace_plot.c). */
extern const char usage_trace_plot[], help_trace_plot[];
int cmd_trace_plot(const struct command *cmd, int argc, char **argv);

#endif
