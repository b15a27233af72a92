/*
 * Measuring runs of a command (tools/measure.c): wall and CPU time, peak
 * RSS, context switches and the peak number of OS threads of its process
 * tree; medians and ranges over several runs. goshim compare uses it.
 */
#ifndef GOSHIM_TOOLS_MEASURE_H
#define GOSHIM_TOOLS_MEASURE_H

#include <stdbool.h>

/* The measurements of a run, in compare's table order. */
enum { M_WALL, M_CPU, M_RSS, M_THREADS, M_VCSW, M_IVCSW, M_STATUS, NMETRICS };

/* One run of CMD: the metrics, and how it ended. */
struct run_result {
    double v[NMETRICS];
    int wstatus;
};

/* Median and range of one metric in one mode (0 native, 1 goshim). */
struct summary {
    double med[2], lo[2], hi[2];
};

/* CLOCK_MONOTONIC in milliseconds. */
double now_ms(void);
/* argv to completion, natively (preload NULL) or under goshim: 0 with res filled, or -1 (fork
 * failed: errno; exec failed: its errno in *exec_errno). */
int run_measured(char **argv, const char *preload, const char *procs, bool show,
                 struct run_result *res, int *exec_errno);
/* Median, minimum and maximum of metric over rr[0..n-1]: 0, or -1 (no memory). */
int summarize(const struct run_result *rr, int n, int metric, double *med, double *lo, double *hi);

#endif
