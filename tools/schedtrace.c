/*
 * Reading GOSHIM_SCHEDTRACE output, a line at a time.
 *
 * trace-plot reads Go's schedtrace format, which the runtime prints
 * (sched/trace.c), and so does a Go program under GODEBUG=schedtrace=N:
 *
 *   SCHED 50ms: gomaxprocs=2 idleprocs=0 threads=3 spinningthreads=0 idlethreads=0 runqueue=0 [3 0]
 *
 * With SCHEDDETAIL the bracket is missing and "  P0: ... runqsize=N" lines
 * follow instead; those give the local run queues. Unknown keys are
 * skipped, other lines (the program's output, "goshim stats:") ignored.
 */
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/schedtrace.h"

/* The keys of a SCHED line that are read; the first NREQUIRED must be there. */
static const char *const keys[] = {"gomaxprocs", "idleprocs",       "threads",
                                   "runqueue",   "spinningthreads", "idlethreads"};
#define NKEYS     (sizeof keys / sizeof keys[0])
#define NREQUIRED 4

/* The field of tp that keys[k] fills. */
static long *key_field(struct trace_point *tp, size_t k)
{
    long *const dst[NKEYS] = {&tp->gomaxprocs, &tp->idleprocs, &tp->threads,
                              &tp->runqueue,   &tp->spinning,  &tp->idlethreads};

    return dst[k];
}

static enum trace_line malformed(char *why, size_t whylen, const char *reason)
{
    snprintf(why, whylen, "%s", reason);
    return TRACE_MALFORMED;
}

/* The per-P run queue lengths "[N N ...]" at s, summed into *total: past the ']', or NULL. */
static const char *parse_bracket(const char *s, long *total)
{
    char *end;

    *total = 0;
    for (s++;;) {
        while (*s == ' ')
            s++;
        if (*s == ']')
            return s + 1;
        if (!isdigit((unsigned char)*s))
            return NULL;
        *total += strtol(s, &end, 10);
        s = end;
    }
}

/*
 * parse_pair reads the token tok[0..len): a key of keys[] and its value
 * into tp (seen[k] set); any other token is skipped. false, with the
 * reason in why, when a known key's value is not a whole number.
 */
static bool parse_pair(const char *tok, size_t len, struct trace_point *tp, bool seen[NKEYS],
                       char *why, size_t whylen)
{
    const char *eq = memchr(tok, '=', len), *s = tok + len;

    if (eq == NULL)
        return true;
    for (size_t k = 0; k < NKEYS; k++) {
        size_t klen = strlen(keys[k]);
        long *dst = key_field(tp, k);
        char *vend;

        if ((size_t)(eq - tok) != klen || memcmp(tok, keys[k], klen) != 0)
            continue;
        if (!isdigit((unsigned char)eq[1]) || (*dst = strtol(eq + 1, &vend, 10), vend != s)) {
            snprintf(why, whylen, "%s= wants a whole number, not '%.*s'", keys[k],
                     (int)(s - eq - 1), eq + 1);
            return false;
        }
        seen[k] = true;
    }
    return true;
}

/*
 * parse_sched_line parses what follows "SCHED" in a schedtrace line into
 * tp. gomaxprocs, idleprocs, threads and runqueue are required;
 * spinningthreads, idlethreads and the bracketed per-P run queue lengths
 * are optional; other key=value pairs are skipped (Go prints more of them
 * than goshim does).
 */
static enum trace_line parse_sched_line(const char *s, struct trace_point *tp, char *why,
                                        size_t whylen)
{
    bool seen[NKEYS] = {false};
    char *end;

    while (*s == ' ' || *s == '\t')
        s++;
    if (!isdigit((unsigned char)*s))
        return malformed(why, whylen, "no time: want 'SCHED <N>ms: ...'");
    tp->t_ms = strtod(s, &end);
    if (strncmp(end, "ms:", 3) != 0)
        return malformed(why, whylen, "no time: want 'SCHED <N>ms: ...'");
    for (s = end + 3;;) {
        size_t len;
        long total;

        while (*s == ' ' || *s == '\t')
            s++;
        if (*s == '\0' || *s == '\n' || *s == '\r')
            break;
        if (*s == '[') {
            if ((s = parse_bracket(s, &total)) == NULL)
                return malformed(why, whylen, "malformed run queue list: want '[N N ...]'");
            if (!tp->local_from_bracket) { /* the first list only */
                tp->local = total;
                tp->has_local = tp->local_from_bracket = true;
            }
            continue;
        }
        len = strcspn(s, " \t\r\n");
        if (!parse_pair(s, len, tp, seen, why, whylen))
            return TRACE_MALFORMED;
        s += len;
    }
    for (size_t k = 0; k < NREQUIRED; k++) {
        if (!seen[k]) {
            snprintf(why, whylen, "no %s=", keys[k]);
            return TRACE_MALFORMED;
        }
    }
    tp->has_spinning = seen[4];
    tp->has_idlethreads = seen[5];
    return TRACE_SCHED;
}

/* A SCHEDDETAIL line "P<n>: ... runqsize=<k> ...", blanks skipped: k in *runqsize. */
static bool parse_p_line(const char *s, long *runqsize)
{
    const char *q;

    if (*s != 'P' || !isdigit((unsigned char)s[1]))
        return false;
    s += 1 + strspn(s + 1, "0123456789");
    if (*s != ':' || (q = strstr(s, " runqsize=")) == NULL || !isdigit((unsigned char)q[10]))
        return false;
    *runqsize = strtol(q + 10, NULL, 10);
    return true;
}

/*
 * schedtrace_line tells what line is, leading blanks skipped: a SCHED line
 * (TRACE_SCHED, read into *tp, whose line field it leaves 0), one that
 * cannot be read (TRACE_MALFORMED, the reason in why), a SCHEDDETAIL P
 * line (TRACE_P, its run queue length in *runqsize) or anything else
 * (TRACE_OTHER). It writes nothing but its outputs.
 */
enum trace_line schedtrace_line(const char *line, struct trace_point *tp, long *runqsize, char *why,
                                size_t whylen)
{
    const char *s = line;

    while (*s == ' ' || *s == '\t')
        s++;
    if (strncmp(s, "SCHED ", 6) == 0) {
        *tp = (struct trace_point){0};
        return parse_sched_line(s + 5, tp, why, whylen);
    }
    return parse_p_line(s, runqsize) ? TRACE_P : TRACE_OTHER;
}
