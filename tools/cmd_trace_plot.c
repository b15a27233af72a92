/*
 * goshim trace-plot FILE [-o OUT.png]: GOSHIM_SCHEDTRACE output as a chart.
 *
 * The SCHED lines of FILE (tools/schedtrace.c reads them) become three
 * panels over time: the run queues (global, and the sum of the local ones
 * when the trace has them), the processors (idle, and gomaxprocs) and the
 * OS threads (all, idle, spinning). The data travel inside the gnuplot
 * script, fed through a pipe (tools/gnuplot.c): no temporary files. Lines
 * out of time order (traces of several processes in one file) are sorted,
 * with a warning. Exit status 0, or 1 for unreadable or malformed input
 * or when no chart was drawn (gnuplot missing or failing).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/gnuplot.h"
#include "tools/launcher.h"
#include "tools/schedtrace.h"

const char usage_trace_plot[] = "usage: goshim trace-plot FILE [-o OUT.png]\n";
const char help_trace_plot[] =
    "  chart GOSHIM_SCHEDTRACE output (FILE, or - for stdin) as a PNG: run queues,\n"
    "  idle processors and OS threads over time\n"
    "  -o, --output OUT  the PNG to write (default: FILE with its extension replaced by .png)\n";

static int cmp_point(const void *a, const void *b)
{
    const struct trace_point *x = a, *y = b;

    if (x->t_ms != y->t_ms)
        return x->t_ms < y->t_ms ? -1 : 1;
    return (x->line > y->line) - (x->line < y->line);
}

/* The default output of trace-plot: FILE with its extension replaced by .png (malloc'd). */
static char *default_png(const char *file)
{
    const char *base = strrchr(file, '/'), *dot;
    size_t keep;
    char *out;

    if (strcmp(file, "-") == 0)
        return strdup("schedtrace.png");
    base = base != NULL ? base + 1 : file;
    dot = strrchr(base, '.');
    keep = dot != NULL && dot != base ? (size_t)(dot - file) : strlen(file);
    if (asprintf(&out, "%.*s.png", (int)keep, file) < 0)
        return NULL;
    if (strcmp(out, file) == 0) {
        free(out);
        if (asprintf(&out, "%s.png", file) < 0)
            return NULL;
    }
    return out;
}

/* The tops of the three panels, and which optional series the trace has. */
struct trace_extent {
    long max_rq, max_p, max_th;
    bool any_local, any_spin, any_idle;
};

static struct trace_extent trace_extent(const struct trace_point *pts, size_t n)
{
    struct trace_extent e = {0};

    for (size_t k = 0; k < n; k++) {
        const struct trace_point *p = &pts[k];

        e.max_rq = p->runqueue > e.max_rq ? p->runqueue : e.max_rq;
        e.max_rq = p->has_local && p->local > e.max_rq ? p->local : e.max_rq;
        e.max_p = p->gomaxprocs > e.max_p ? p->gomaxprocs : e.max_p;
        e.max_p = p->idleprocs > e.max_p ? p->idleprocs : e.max_p;
        e.max_th = p->threads > e.max_th ? p->threads : e.max_th;
        e.any_local = e.any_local || p->has_local;
        e.any_spin = e.any_spin || p->has_spinning;
        e.any_idle = e.any_idle || p->has_idlethreads;
    }
    return e;
}

/* The $trace datablock: a row per point, time in ms / scale, '?' for what a line lacks. */
static void write_datablock(FILE *f, const struct trace_point *pts, size_t n, double scale)
{
    fputs("\n$trace << EOD\n", f);
    for (size_t k = 0; k < n; k++) {
        const struct trace_point *p = &pts[k];

        fprintf(f, "%.6g %ld ", p->t_ms / scale, p->runqueue);
        p->has_local ? fprintf(f, "%ld ", p->local) : fputs("? ", f);
        fprintf(f, "%ld %ld %ld ", p->idleprocs, p->gomaxprocs, p->threads);
        p->has_idlethreads ? fprintf(f, "%ld ", p->idlethreads) : fputs("? ", f);
        p->has_spinning ? fprintf(f, "%ld\n", p->spinning) : fputs("?\n", f);
    }
    fputs("EOD\n", f);
}

/* The three panels, run queues, processors and OS threads, drawn from $trace with style. */
static void write_panels(FILE *f, const struct trace_extent *e, const char *style)
{
    fprintf(f, "set title 'run queues: Gs waiting to run'\nset ylabel 'Gs'\nset yrange [0:%ld]\n",
            e->max_rq + e->max_rq / 10 + 1);
    fprintf(f, "plot $trace using 1:2 with %s lw 2 title 'global run queue'", style);
    if (e->any_local)
        fprintf(f,
                ", \\\n     $trace using 1:3 with %s lw 2 title 'local run queues (sum over Ps)'",
                style);
    fprintf(f, "\nset title 'processors'\nset ylabel 'Ps'\nset yrange [0:%ld]\n", e->max_p + 1);
    fprintf(f,
            "plot $trace using 1:4 with %s lw 2 title 'idle Ps', \\\n"
            "     $trace using 1:5 with lines dt 2 lw 2 title 'gomaxprocs'\n",
            style);
    fprintf(f, "set title 'OS threads'\nset ylabel 'threads'\nset yrange [0:%ld]\n",
            e->max_th + e->max_th / 10 + 1);
    fprintf(f, "plot $trace using 1:6 with %s lw 2 title 'threads (Ms and sysmon)'", style);
    if (e->any_idle)
        fprintf(f, ", \\\n     $trace using 1:7 with %s title 'idle threads'", style);
    if (e->any_spin)
        fprintf(f, ", \\\n     $trace using 1:8 with %s title 'spinning threads'", style);
    fputs("\nunset multiplot\n", f);
}

/*
 * trace_script returns (malloc'd, length in *len) the gnuplot script that
 * draws pts[0..n-1] into out: three panels, run queues, processors and OS
 * threads, over time; the data travel inside the script as a datablock.
 */
static char *trace_script(const struct trace_point *pts, size_t n, const char *title,
                          const char *out, size_t *len)
{
    struct trace_extent e = trace_extent(pts, n);
    double scale = pts[n - 1].t_ms >= 10000 ? 1000 : 1, t0, t1;
    const char *style = n <= 60 ? "linespoints pt 7 ps 0.6" : "lines";
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);

    if (f == NULL)
        return NULL;
    t0 = pts[0].t_ms / scale;
    t1 = pts[n - 1].t_ms / scale;
    if (t1 <= t0) {
        t0 -= 1;
        t1 += 1;
    }
    fputs("set terminal pngcairo size 1000,900 noenhanced font 'sans,10'\nset output ", f);
    gp_quote(f, out);
    write_datablock(f, pts, n, scale);
    fputs("set datafile missing '?'\nset multiplot layout 3,1 title ", f);
    gp_quote(f, title);
    fprintf(f,
            "\nset grid\nset key outside top center horizontal\nset xlabel 'time (%s)'\nset xrange "
            "[%.6g:%.6g]\n",
            scale == 1 ? "ms" : "s", t0, t1);
    write_panels(f, &e, style);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    *len = size;
    return text;
}

/* trace-plot's operand and -o; exits on a usage error, returns 1 after --help. */
static int plot_parse(const struct command *cmd, int argc, char **argv, const char **file,
                      const char **out)
{
    static const struct option_spec opts[] = {
        {"output", 'o', true}, {"help", 'h', false}, {NULL, 0, false}};
    enum { O_OUTPUT, O_HELP };
    bool operands_only = false;
    const char *val;
    int i = 1, k;

    *file = *out = NULL;
    while (i < argc) {
        k = operands_only ? OPT_OPERAND : next_option(cmd, opts, argc, argv, &i, &val);
        if (k == OPT_END) {
            operands_only = true;
            continue;
        }
        if (k == OPT_OPERAND) {
            if (*file != NULL)
                usage_error(cmd, "one FILE only, not '%s' as well", argv[i]);
            *file = argv[i++];
        } else if (k == O_OUTPUT) {
            if (*val == '\0')
                usage_error(cmd, "-o wants a file name");
            *out = val;
        } else {
            printf("%s%s", cmd->usage, cmd->help);
            return 1;
        }
    }
    if (*file == NULL)
        usage_error(cmd, "missing FILE (the saved output of GOSHIM_SCHEDTRACE)");
    return 0;
}

/* The SCHED lines of file (- for stdin) in time order, with SCHEDDETAIL's
 * per-P queue lengths summed in; exits on unreadable or malformed input. */
static struct trace_point *plot_read(const char *file, size_t *np)
{
    struct trace_point *pts = NULL;
    size_t n = 0, cap = 0, linecap = 0;
    long lineno = 0, backwards = 0;
    char *line = NULL;
    FILE *in = strcmp(file, "-") == 0 ? stdin : fopen(file, "re");

    if (in == NULL)
        fail(1, "goshim trace-plot: %s: %s", file, strerror(errno));
    while (getline(&line, &linecap, in) >= 0) {
        char why[SCHEDTRACE_WHY_MAX];
        struct trace_point tp;
        long rq;
        enum trace_line kind = schedtrace_line(line, &tp, &rq, why, sizeof why);

        lineno++;
        if (kind == TRACE_MALFORMED)
            fail(1, "goshim trace-plot: %s:%ld: malformed SCHED line: %s", file, lineno, why);
        if (kind == TRACE_SCHED) {
            tp.line = lineno;
            if (n == cap) {
                cap = cap ? 2 * cap : 256;
                struct trace_point *grown = realloc(pts, cap * sizeof *pts);
                if (grown == NULL)
                    fail(1, "goshim trace-plot: out of memory");
                pts = grown;
            }
            if (n > 0 && tp.t_ms < pts[n - 1].t_ms && backwards == 0)
                backwards = lineno;
            pts[n++] = tp;
        } else if (kind == TRACE_P && n > 0 && !pts[n - 1].local_from_bracket) {
            pts[n - 1].local += rq; /* SCHEDDETAIL: one line per P follows the SCHED line */
            pts[n - 1].has_local = true;
        }
    }
    if (ferror(in))
        fail(1, "goshim trace-plot: %s: %s", file, strerror(errno));
    if (in != stdin)
        fclose(in);
    free(line);
    if (n == 0)
        fail(1,
             "goshim trace-plot: %s: no SCHED lines (want GOSHIM_SCHEDTRACE output like "
             "'SCHED 50ms: gomaxprocs=2 idleprocs=0 threads=3 ... runqueue=0 [3 0]')",
             file);
    if (backwards != 0) {
        fprintf(stderr,
                "goshim trace-plot: %s:%ld: time goes backwards (traces of several processes?); "
                "plotting in time order\n",
                file, backwards);
        qsort(pts, n, sizeof *pts, cmp_point);
    }
    *np = n;
    return pts;
}

int cmd_trace_plot(const struct command *cmd, int argc, char **argv)
{
    const char *file, *out, *base;
    char *outbuf = NULL, *script, *title;
    size_t n, script_len = 0;
    int fd, rc;

    if (plot_parse(cmd, argc, argv, &file, &out) != 0)
        return 0;
    struct trace_point *pts = plot_read(file, &n);
    if (out == NULL && (out = outbuf = default_png(file)) == NULL)
        fail(1, "goshim trace-plot: out of memory");
    fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0)
        fail(1, "goshim trace-plot: cannot write %s: %s", out, strerror(errno));
    close(fd);
    base = strrchr(file, '/');
    if (asprintf(&title, "goshim schedtrace: %s (%zu SCHED lines)",
                 strcmp(file, "-") == 0 ? "stdin"
                 : base                 ? base + 1
                                        : file,
                 n) < 0)
        fail(1, "goshim trace-plot: out of memory");
    script = trace_script(pts, n, title, out, &script_len);
    if (script == NULL)
        fail(1, "goshim trace-plot: out of memory");
    rc = run_gnuplot("goshim trace-plot", NULL, NULL, script, script_len) == PLOT_OK ? 0 : 1;
    if (rc == 0)
        printf("goshim trace-plot: wrote %s (%zu SCHED lines, %g to %g ms)\n", out, n, pts[0].t_ms,
               pts[n - 1].t_ms);
    else
        unlink(out);
    free(script);
    free(title);
    free(outbuf);
    free(pts);
    return rc;
}
