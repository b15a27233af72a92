/*
 * goshim compare [options] [--] CMD [ARGS...]: CMD natively and under
 * goshim, side by side.
 *
 * compare runs CMD RUNS times in each mode, alternating, so that drift of
 * the machine (clock frequency, caches, other load) falls on both modes,
 * and reports medians and ranges: wall time; CPU time, peak RSS and context
 * switches from wait4's rusage; and the peak number of OS threads of its
 * process tree (tools/measure.c measures them). The table goes to stdout
 * in Markdown; --out DIR also writes it with its data and a gnuplot
 * script, and the chart if gnuplot is installed. Exit status 0 when every
 * run exited 0 in both modes, else 1, with the statuses of both modes on
 * stderr.
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "tools/gnuplot.h"
#include "tools/launcher.h"
#include "tools/library.h"
#include "tools/measure.h"

/* The most runs in each mode. */
#define MAX_RUNS 10000

const char usage_compare[] =
    "usage: goshim compare [-n RUNS] [-p N] [--out DIR] [--show-output] [--] CMD [ARGS...]\n";
const char help_compare[] =
    "  run CMD natively and under goshim, alternately, and print a Markdown table of\n"
    "  medians (min-max): wall time, CPU time, peak RSS, peak OS threads, context switches\n"
    "  and exit status\n"
    "  -n, --runs RUNS   runs in each mode (default 5)\n"
    "  -p, --procs N     GOSHIM_PROCS for the goshim runs\n"
    "  --out DIR         also write DIR/compare.md, compare.dat, compare.gp and compare.png\n"
    "  --show-output     keep CMD's stdout and stderr (default: /dev/null)\n";

static const struct {
    const char *label; /* table row */
    const char *key;   /* compare.dat, no blanks */
} metrics[NMETRICS] = {
    [M_WALL] = {"wall time (ms)", "wall_ms"},
    [M_CPU] = {"CPU user+sys (ms)", "cpu_ms"},
    [M_RSS] = {"peak RSS (MiB)", "maxrss_mib"},
    [M_THREADS] = {"peak OS threads", "threads"},
    [M_VCSW] = {"voluntary context switches", "nvcsw"},
    [M_IVCSW] = {"involuntary context switches", "nivcsw"},
    [M_STATUS] = {"exit status", "status"},
};

/* fmt_num prints v with as many decimals as its size deserves: 3, 12.5, 1.23. */
static const char *fmt_num(char *buf, size_t len, double v)
{
    if (v > -1e15 && v < 1e15 && v == (double)(long long)v)
        snprintf(buf, len, "%lld", (long long)v);
    else if (v >= 100 || v <= -100)
        snprintf(buf, len, "%.0f", v);
    else if (v >= 10 || v <= -10)
        snprintf(buf, len, "%.1f", v);
    else
        snprintf(buf, len, "%.2f", v);
    return buf;
}

static void write_table(FILE *f, const struct summary *sum, bool status_same)
{
    fputs("| metric | native median (min–max) | goshim median (min–max) | native/goshim |\n", f);
    fputs("| --- | ---: | ---: | ---: |\n", f);
    for (int m = 0; m < NMETRICS; m++) {
        const struct summary *s = &sum[m];
        char a[32], b[32], c[32], d[32], e[32], g[32], ratio[32];
        double r = s->med[1] != 0 ? s->med[0] / s->med[1] : 0;

        if (m == M_STATUS)
            snprintf(ratio, sizeof ratio, "%s", status_same ? "same" : "**DIFFERS**");
        else if (s->med[1] != 0)
            snprintf(ratio, sizeof ratio, "%.*fx", r >= 100 ? 0 : r >= 10 ? 1 : 2, r);
        else
            snprintf(ratio, sizeof ratio, "n/a");
        fprintf(f, "| %s | %s (%s–%s) | %s (%s–%s) | %s |\n", metrics[m].label,
                fmt_num(a, sizeof a, s->med[0]), fmt_num(b, sizeof b, s->lo[0]),
                fmt_num(c, sizeof c, s->hi[0]), fmt_num(d, sizeof d, s->med[1]),
                fmt_num(e, sizeof e, s->lo[1]), fmt_num(g, sizeof g, s->hi[1]), ratio);
    }
}

/* describe_statuses prints how the n runs ended: "0 in 4 runs, killed by SIGSEGV in 1 run". */
static void describe_statuses(FILE *f, const struct run_result *rr, int n)
{
    for (int k = 0; k < n; k++) {
        int count = 0, st = rr[k].wstatus;
        bool seen = false;
        char sig[32];

        for (int j = 0; j < k; j++)
            seen = seen || rr[j].wstatus == st;
        if (seen)
            continue;
        for (int j = k; j < n; j++)
            count += rr[j].wstatus == st;
        if (WIFEXITED(st))
            fprintf(f, "%sexit %d", k ? ", " : "", WEXITSTATUS(st));
        else
            fprintf(f, "%skilled by %s", k ? ", " : "", sig_name(sig, sizeof sig, WTERMSIG(st)));
        fprintf(f, " in %d run%s", count, count == 1 ? "" : "s");
    }
}

/* compare.dat: the command, then per metric: median, min, max natively, then under goshim. */
static void write_dat(FILE *f, const struct summary *sum, int runs, char **argv)
{
    fprintf(f, "# goshim compare: %d runs in each mode of:", runs);
    for (char **a = argv; *a; a++)
        fprintf(f, " %s", *a);
    fputs("\n# metric native_median native_min native_max goshim_median goshim_min "
          "goshim_max\n",
          f);
    for (int m = 0; m < NMETRICS; m++)
        fprintf(f, "\"%s\" %.6g %.6g %.6g %.6g %.6g %.6g\n", metrics[m].label, sum[m].med[0],
                sum[m].lo[0], sum[m].hi[0], sum[m].med[1], sum[m].lo[1], sum[m].hi[1]);
}

/* compare.gp's panel of metric m: a bar per mode at its median, min-max whiskers, the max above. */
static void write_gp_panel(FILE *f, const struct summary *sum, int m)
{
    static const char *const colour[2] = {"#4e79a7", "#f28e2b"};
    double top = sum[m].hi[0] > sum[m].hi[1] ? sum[m].hi[0] : sum[m].hi[1];

    fprintf(f, "set title '%s'\nset yrange [0:%.6g]\n", metrics[m].label, top > 0 ? top * 1.15 : 1);
    fputs("plot ", f);
    for (int mode = 0; mode < 2; mode++) {
        int c = 2 + 3 * mode; /* the median's column; min and max follow */

        fprintf(f, "%s'compare.dat' every ::%d::%d using (%d):%d with boxes lc rgb '%s'",
                mode ? ", \\\n     " : "", m, m, mode + 1, c, colour[mode]);
        fprintf(f,
                ", \\\n     '' every ::%d::%d using (%d):%d:%d:%d with yerrorbars "
                "lc rgb 'black' pt 7 ps 0.4",
                m, m, mode + 1, c, c + 1, c + 2);
        fprintf(f,
                ", \\\n     '' every ::%d::%d using (%d):%d:(label($%d)) with labels "
                "offset 0,0.8",
                m, m, mode + 1, c + 2, c);
    }
    fputc('\n', f);
}

/* compare.gp: the gnuplot script that draws compare.png from compare.dat, run in DIR. */
static void write_gp(FILE *f, const struct summary *sum, int runs, char **argv)
{
    const char *base = strrchr(argv[0], '/');

    fputs("# goshim compare: compare.png from compare.dat; run 'gnuplot compare.gp' here.\n"
          "set terminal pngcairo size 1200,720 noenhanced font 'sans,10'\n"
          "set output 'compare.png'\n",
          f);
    fprintf(f, "set multiplot layout 2,3 title ");
    gp_quote(f, base ? base + 1 : argv[0]);
    fprintf(f, ".' natively and under goshim: median of %d runs, bar: min to max'\n", runs);
    fputs("set style fill solid 0.75 border -1\n"
          "set boxwidth 0.6\n"
          "set xrange [0.4:2.6]\n"
          "set xtics ('native' 1, 'goshim' 2) nomirror scale 0\n"
          "set grid ytics\n"
          "unset key\n"
          "label(v) = v >= 100 ? sprintf('%.0f', v) : sprintf('%.3g', v)\n",
          f);
    for (int m = 0; m < M_STATUS; m++)
        write_gp_panel(f, sum, m);
    fputs("unset multiplot\n", f);
}

/*
 * write_compare_files writes DIR/compare.md (the table), compare.dat (the
 * figures) and compare.gp (the gnuplot script for compare.png, run in
 * DIR). 0, or -1 after saying which file could not be written.
 */
static int write_compare_files(const char *dir, const struct summary *sum, bool status_same,
                               int runs, char **argv)
{
    static const char *const names[] = {"compare.md", "compare.dat", "compare.gp"};

    for (int k = 0; k < 3; k++) {
        char path[PATH_MAX];
        FILE *f;

        snprintf(path, sizeof path, "%s/%s", dir, names[k]);
        f = fopen(path, "we");
        if (f == NULL) {
            fprintf(stderr, "goshim compare: cannot write %s: %s\n", path, strerror(errno));
            return -1;
        }
        if (k == 0)
            write_table(f, sum, status_same);
        else if (k == 1)
            write_dat(f, sum, runs, argv);
        else
            write_gp(f, sum, runs, argv);
        if (ferror(f) | (fclose(f) != 0)) {
            fprintf(stderr, "goshim compare: cannot write %s: %s\n", path, strerror(errno));
            return -1;
        }
    }
    return 0;
}

struct compare_opts {
    const char *procs, *outdir;
    bool show;
    int runs;
    char **cmdv;
};

/* goshim compare's options; exits on a usage error, returns 1 after --help. */
static int compare_parse(const struct command *cmd, int argc, char **argv, struct compare_opts *o)
{
    static const struct option_spec opts[] = {
        {"runs", 'n', true},       {"procs", 'p', true}, {"out", 0, true},
        {"show-output", 0, false}, {"help", 'h', false}, {NULL, 0, false},
    };
    enum { O_RUNS, O_PROCS, O_OUT, O_SHOW, O_HELP };
    const char *val;
    int i = 1, k;

    *o = (struct compare_opts){.runs = 5};
    while ((k = next_option(cmd, opts, argc, argv, &i, &val)) >= 0) {
        switch (k) {
        case O_RUNS:
            if (!parse_uint(val, 1, MAX_RUNS))
                usage_error(cmd, "-n wants a whole number from 1 to %d, not '%s'", MAX_RUNS, val);
            o->runs = atoi(val);
            break;
        case O_PROCS:
            if (!parse_uint(val, 1, MAX_PROCS))
                usage_error(cmd, "-p wants a whole number from 1 to %d, not '%s'", MAX_PROCS, val);
            o->procs = val;
            break;
        case O_OUT:
            if (*val == '\0')
                usage_error(cmd, "--out wants a directory");
            o->outdir = val;
            break;
        case O_SHOW:
            o->show = true;
            break;
        case O_HELP:
            printf("%s%s", cmd->usage, cmd->help);
            return 1;
        }
    }
    if (i >= argc)
        usage_error(cmd, "missing command to compare");
    o->cmdv = argv + i;
    return 0;
}

/* Run the command o->runs times in each mode, alternating, so that a
 * drift of the machine weighs on both. 0, or the exit status to return. */
static int compare_run(const struct compare_opts *o, struct run_result *rr[2])
{
    char *lib = find_library("goshim compare");
    char *preload = preload_value(lib);
    int rc = 0;

    free(lib);
    for (int r = 0; r < o->runs && rc == 0; r++) {
        for (int mode = 0; mode < 2 && rc == 0; mode++) {
            int exec_errno;

            if (run_measured(o->cmdv, mode ? preload : NULL, o->procs, o->show, &rr[mode][r],
                             &exec_errno) == 0)
                continue;
            if (exec_errno != 0) {
                rc = exec_failed("goshim compare", o->cmdv[0], exec_errno);
            } else {
                fprintf(stderr, "goshim compare: fork: %s\n", strerror(errno));
                rc = 1;
            }
        }
    }
    free(preload);
    return rc;
}

/* Say on stderr how the exit statuses went when they differ between the
 * modes or are not all 0 (then 1, else 0). */
static int compare_statuses(struct run_result *rr[2], int runs, bool status_same)
{
    bool all_zero = true, sets_differ = false;

    for (int mode = 0; mode < 2; mode++)
        for (int r = 0; r < runs; r++)
            all_zero = all_zero && rr[mode][r].wstatus == 0;
    if (status_same && all_zero)
        return 0;
    for (int r = 0; r < runs; r++) {
        bool in_other = false;

        for (int q = 0; q < runs; q++)
            in_other = in_other || rr[1][q].wstatus == rr[0][r].wstatus;
        sets_differ = sets_differ || !in_other;
    }
    fputs(!status_same && sets_differ ? "goshim compare: EXIT STATUS DIFFERS: "
                                      : "goshim compare: the command failed: ",
          stderr);
    fputs("native: ", stderr);
    describe_statuses(stderr, rr[0], runs);
    fputs("; goshim: ", stderr);
    describe_statuses(stderr, rr[1], runs);
    fputs("\n", stderr);
    return 1;
}

/* --out: the table, the data and the gnuplot script, and the plot if gnuplot is there. */
static int compare_write(const struct compare_opts *o, const struct summary *sum, bool status_same)
{
    if (write_compare_files(o->outdir, sum, status_same, o->runs, o->cmdv) != 0)
        return 1;
    switch (run_gnuplot("goshim compare", o->outdir, "compare.gp", NULL, 0)) {
    case PLOT_OK:
        fprintf(stderr,
                "goshim compare: wrote %s/compare.md, compare.dat, compare.gp, compare.png\n",
                o->outdir);
        return 0;
    case PLOT_MISSING:
        fprintf(stderr, "goshim compare: wrote %s/compare.md, compare.dat, compare.gp\n",
                o->outdir);
        return 0;
    default:
        return 1;
    }
}

int cmd_compare(const struct command *cmd, int argc, char **argv)
{
    struct compare_opts o;
    struct run_result *rr[2];
    struct summary sum[NMETRICS];
    bool status_same = true;

    if (compare_parse(cmd, argc, argv, &o) != 0)
        return 0;
    if (o.outdir != NULL && mkdir_p(o.outdir) != 0)
        fail(EXIT_USAGE, "goshim compare: --out %s: %s", o.outdir, strerror(errno));
    rr[0] = calloc((size_t)o.runs, sizeof *rr[0]);
    rr[1] = calloc((size_t)o.runs, sizeof *rr[1]);
    if (rr[0] == NULL || rr[1] == NULL)
        fail(EXIT_USAGE, "goshim compare: out of memory");
    int rc = compare_run(&o, rr);
    if (rc != 0) {
        free(rr[0]);
        free(rr[1]);
        return rc;
    }
    for (int m = 0; m < NMETRICS; m++)
        for (int mode = 0; mode < 2; mode++)
            if (summarize(rr[mode], o.runs, m, &sum[m].med[mode], &sum[m].lo[mode],
                          &sum[m].hi[mode]) != 0)
                fail(EXIT_USAGE, "goshim compare: out of memory");
    for (int mode = 0; mode < 2; mode++)
        for (int r = 0; r < o.runs; r++)
            status_same = status_same && rr[mode][r].wstatus == rr[0][0].wstatus;
    write_table(stdout, sum, status_same);
    fflush(stdout);
    rc = compare_statuses(rr, o.runs, status_same);
    free(rr[0]);
    free(rr[1]);
    if (o.outdir != NULL && compare_write(&o, sum, status_same) != 0)
        rc = 1;
    return rc;
}
