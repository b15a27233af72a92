/*
 * Reading GOSHIM_SCHEDTRACE output (tools/schedtrace.c), for trace-plot:
 * schedtrace_line is a pure function of one line, with no input or output
 * of its own, so a unit test calls it directly (tests/test_schedtrace.c).
 */
#ifndef GOSHIM_TOOLS_SCHEDTRACE_H
#define GOSHIM_TOOLS_SCHEDTRACE_H

#include <stdbool.h>
#include <stddef.h>

/* One SCHED line of a trace, with the local run queues of the P lines after it. */
struct trace_point {
    double t_ms;
    long gomaxprocs, idleprocs, threads, spinning, idlethreads, runqueue, local;
    bool has_spinning, has_idlethreads, has_local, local_from_bracket;
    long line; /* in the file, set by the reader */
};

/* What a line of a trace is. */
enum trace_line {
    TRACE_OTHER,     /* anything else: the program's output, goshim's stats, M and G lines */
    TRACE_SCHED,     /* "SCHED <N>ms: key=value ... [N N ...]" */
    TRACE_P,         /* SCHEDDETAIL's "  P<n>: ... runqsize=<k> ..." */
    TRACE_MALFORMED, /* a SCHED line that cannot be read */
};

/* Room for schedtrace_line's reason (longer ones are cut). */
#define SCHEDTRACE_WHY_MAX 96

enum trace_line schedtrace_line(const char *line, struct trace_point *tp, long *runqsize, char *why,
                                size_t whylen);

#endif
