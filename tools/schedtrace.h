/*
 * Reading GOSHIM_SCHEDTRACE output (tools/schedtrace.c), for trace-plot:
 * pure functions of a line, no input or output of their own.
 */
#ifndef GOSHIM_TOOLS_SCHEDTRACE_H
#define GOSHIM_TOOLS_SCHEDTRACE_H

#include <stdbool.h>

/* One SCHED line of a trace, with the local run queues of the P lines after it. */
struct trace_point {
    double t_ms;
    long gomaxprocs, idleprocs, threads, spinning, idlethreads, runqueue, local;
    bool has_spinning, has_idlethreads, has_local, local_from_bracket;
    long line;
};

const char *parse_sched_line(char *s, struct trace_point *tp);
bool parse_p_line(const char *s, long *runqsize);

#endif
