/*
 * Reading GOSHIM_SCHEDTRACE output (tools/schedtrace.c, the reader of
 * goshim trace-plot), one line at a time: schedtrace_line is a pure
 * function, called here directly on the lines goshim and Go print and on
 * lines it must refuse, with the reason trace-plot then reports. The
 * launcher's trace-plot runs are in tests/test_launcher_tools.c.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "tools/schedtrace.h"

static char why[SCHEDTRACE_WHY_MAX];

/* schedtrace_line on line, which must be a SCHED line that reads; the point in *tp. */
static void read_sched(const char *line, struct trace_point *tp)
{
    long rq = -1;

    why[0] = '\0';
    cr_assert_eq(schedtrace_line(line, tp, &rq, why, sizeof why), TRACE_SCHED,
                 "not read as a SCHED line (%s): %s", why, line);
    cr_assert_eq(rq, -1, "a SCHED line set the P line's run queue");
    cr_assert_eq(tp->line, 0, "the line number is the reader's to set");
}

/* schedtrace_line on line, which must be refused with a reason starting with want. */
static void refuse(const char *line, const char *want)
{
    struct trace_point tp;
    long rq = -1;

    why[0] = '\0';
    cr_assert_eq(schedtrace_line(line, &tp, &rq, why, sizeof why), TRACE_MALFORMED, "accepted: %s",
                 line);
    cr_assert(strncmp(why, want, strlen(want)) == 0, "%s: the reason is '%s', want '%s...'", line,
              why, want);
}

/* What goshim prints without SCHEDDETAIL (sched/trace.c): every key, and the local queues. */
Test(schedtrace, goshim_line_with_local_queues)
{
    struct trace_point tp;

    read_sched("SCHED 50ms: gomaxprocs=4 idleprocs=1 threads=6 spinningthreads=2 idlethreads=3 "
               "runqueue=7 [3 0 12 1]\n",
               &tp);
    cr_assert_float_eq(tp.t_ms, 50.0, 1e-9);
    cr_assert_eq(tp.gomaxprocs, 4);
    cr_assert_eq(tp.idleprocs, 1);
    cr_assert_eq(tp.threads, 6);
    cr_assert_eq(tp.spinning, 2);
    cr_assert_eq(tp.idlethreads, 3);
    cr_assert_eq(tp.runqueue, 7);
    cr_assert(tp.has_spinning && tp.has_idlethreads);
    cr_assert(tp.has_local && tp.local_from_bracket, "the bracket gives the local queues");
    cr_assert_eq(tp.local, 3 + 0 + 12 + 1, "the local queues are summed over the Ps");
}

/* Go's own line has keys goshim does not print: skipped, whatever their values. */
Test(schedtrace, go_line_with_unknown_keys)
{
    struct trace_point tp;

    read_sched("SCHED 1003ms: gomaxprocs=8 idleprocs=8 threads=14 spinningthreads=0 "
               "needspinning=0 idlethreads=9 runqueue=0 gcwaiting=false nmidlelocked=1 "
               "stopwait=0 sysmonwait=false\n",
               &tp);
    cr_assert_float_eq(tp.t_ms, 1003.0, 1e-9);
    cr_assert_eq(tp.gomaxprocs, 8);
    cr_assert_eq(tp.idleprocs, 8);
    cr_assert_eq(tp.threads, 14);
    cr_assert_eq(tp.idlethreads, 9);
    cr_assert_eq(tp.runqueue, 0);
    cr_assert(!tp.has_local, "no bracket: the local queues come from P lines, if any");
}

/* Only four keys are required; blanks, tabs, a CR and bracket spacing are tolerated. */
Test(schedtrace, optional_keys_and_blanks)
{
    struct trace_point tp;

    read_sched("\t SCHED   2.5ms:\tgomaxprocs=1  idleprocs=0 threads=2 runqueue=0 [ 4  5 ]\r\n",
               &tp);
    cr_assert_float_eq(tp.t_ms, 2.5, 1e-9);
    cr_assert(!tp.has_spinning && !tp.has_idlethreads, "absent keys are marked absent");
    cr_assert(tp.has_local && tp.local == 9, "local %ld", tp.local);

    read_sched("SCHED 7ms: gomaxprocs=2 idleprocs=1 threads=3 runqueue=0 [1 2] [40 50]", &tp);
    cr_assert_eq(tp.local, 3, "the first bracket counts, not the second");
}

/* SCHEDDETAIL's P lines give each P's run queue; M, G and preempt lines are something else. */
Test(schedtrace, detail_p_lines)
{
    static const char *const other[] = {
        "  M0: p=0 curg=1 spinning=false tid=10647\n",
        "  G1: status=2(running) m=0 (main)\n",
        "  preempt: requests=0 done=0 refused=0 stale=0 handoffs=0 cut=0 demoted=0\n",
        "  P1 runqsize=3\n",               /* no colon */
        "  P2: status=1 runqsize=x\n",     /* no number */
        "  P3: status=1 m=-1 runnext=0\n", /* no runqsize */
        "  Pq: runqsize=3\n",              /* no P number */
    };
    struct trace_point tp;
    long rq = -1;

    cr_assert_eq(
        schedtrace_line("  P0: status=1 schedtick=0 m=0 runqsize=12 runnext=0 gfreecnt=0\n", &tp,
                        &rq, why, sizeof why),
        TRACE_P);
    cr_assert_eq(rq, 12);
    cr_assert_eq(schedtrace_line("  P10: status=1 schedtick=7 syscalltick=0 m=3 runqsize=0 "
                                 "gfreecnt=0 timerslen=0\n",
                                 &tp, &rq, why, sizeof why),
                 TRACE_P, "Go's P line");
    cr_assert_eq(rq, 0);
    for (size_t k = 0; k < sizeof other / sizeof other[0]; k++)
        cr_assert_eq(schedtrace_line(other[k], &tp, &rq, why, sizeof why), TRACE_OTHER, "%s",
                     other[k]);
}

/* Program output and goshim's counters between the SCHED lines are neither read nor refused. */
Test(schedtrace, other_lines_are_skipped)
{
    static const char *const other[] = {
        "",
        "\n",
        "hello, world\n",
        "goshim stats: procs=2 threads=3 switches=10\n",
        "SCHEDULE 5ms: gomaxprocs=1\n",
        "SCHED",
        "# SCHED 5ms: gomaxprocs=1\n",
    };
    struct trace_point tp;
    long rq = -1;

    for (size_t k = 0; k < sizeof other / sizeof other[0]; k++)
        cr_assert_eq(schedtrace_line(other[k], &tp, &rq, why, sizeof why), TRACE_OTHER, "'%s'",
                     other[k]);
    cr_assert_eq(rq, -1);
}

/* A SCHED line that cannot be read is refused, saying what is wrong with it. */
Test(schedtrace, malformed_lines_say_why)
{
    refuse("SCHED x: gomaxprocs=2\n", "no time: want 'SCHED <N>ms: ...'");
    refuse("SCHED 10: gomaxprocs=2 idleprocs=1 threads=3 runqueue=0\n", "no time");
    refuse("SCHED 10s: gomaxprocs=2 idleprocs=1 threads=3 runqueue=0\n", "no time");
    refuse("SCHED 10ms: gomaxprocs=2 idleprocs=x threads=3 runqueue=0 [0 0]\n",
           "idleprocs= wants a whole number, not 'x'");
    refuse("SCHED 10ms: gomaxprocs=2 idleprocs=1 threads=3 runqueue=0 idlethreads=-1\n",
           "idlethreads= wants a whole number, not '-1'");
    refuse("SCHED 10ms: gomaxprocs=2 idleprocs=1 threads=3 runqueue=4x\n",
           "runqueue= wants a whole number, not '4x'");
    refuse("SCHED 10ms: gomaxprocs=2 idleprocs=1 threads=3 [0 0]\n", "no runqueue=");
    refuse("SCHED 10ms: idleprocs=1 threads=3 runqueue=0\n", "no gomaxprocs=");
    refuse("SCHED 10ms: gomaxprocs=2 idleprocs=1 threads=3 runqueue=0 [0 x]\n",
           "malformed run queue list: want '[N N ...]'");
    refuse("SCHED 10ms: gomaxprocs=2 idleprocs=1 threads=3 runqueue=0 [1 2\n",
           "malformed run queue list");
}

/* A reason quoting a long value is cut to the room given, not written past it. */
Test(schedtrace, long_reason_is_cut)
{
    char line[400], small[24];
    struct trace_point tp;
    long rq;

    /* 300 zeros and an x: a value longer than the reason's room */
    snprintf(line, sizeof line, "SCHED 1ms: gomaxprocs=2 idleprocs=1 threads=3 runqueue=%0300dx",
             0);
    refuse(line, "runqueue= wants a whole number, not '000");
    cr_assert_eq(strlen(why), sizeof why - 1);

    memset(small, '#', sizeof small);
    cr_assert_eq(schedtrace_line(line, &tp, &rq, small, 10), TRACE_MALFORMED);
    cr_assert_str_eq(small, "runqueue=");
    cr_assert_eq(small[10], '#', "written past the room given");
}
