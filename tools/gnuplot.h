/*
 * Drawing charts with gnuplot (tools/gnuplot.c), for compare --out and
 * trace-plot: the PNG is optional, so a missing gnuplot is a hint, not an
 * error.
 */
#ifndef GOSHIM_TOOLS_GNUPLOT_H
#define GOSHIM_TOOLS_GNUPLOT_H

#include <stddef.h>
#include <stdio.h>

/* run_gnuplot's results. */
enum { PLOT_OK, PLOT_FAILED, PLOT_MISSING };

/* gnuplot in dir (NULL: here) on script_file, or on script_text through a pipe; what went wrong
 * is said on stderr, prefixed with who. */
int run_gnuplot(const char *who, const char *dir, const char *script_file, const char *script_text,
                size_t script_len);
/* s as a gnuplot single-quoted string. */
void gp_quote(FILE *f, const char *s);

#endif
