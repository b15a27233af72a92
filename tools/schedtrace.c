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

/*
 * parse_sched_line parses what follows "SCHED" in a schedtrace line into
 * tp: NULL, or what is wrong with it. gomaxprocs, idleprocs, threads and
 * runqueue are required; spinningthreads, idlethreads and the bracketed
 * per-P run queue lengths are optional; other key=value pairs are skipped
 * (Go prints more of them than goshim does).
 */
const char *parse_sched_line(char *s, struct trace_point *tp)
{
    static char why[96];
    static const char *const keys[] = {"gomaxprocs", "idleprocs",       "threads",
                                       "runqueue",   "spinningthreads", "idlethreads"};
    long *dst[] = {&tp->gomaxprocs, &tp->idleprocs, &tp->threads,
                   &tp->runqueue,   &tp->spinning,  &tp->idlethreads};
    bool seen[6] = {false};
    char *end;

    while (*s == ' ' || *s == '\t')
        s++;
    if (!isdigit((unsigned char)*s))
        return "no time: want 'SCHED <N>ms: ...'";
    tp->t_ms = strtod(s, &end);
    if (strncmp(end, "ms:", 3) != 0)
        return "no time: want 'SCHED <N>ms: ...'";
    for (s = end + 3;;) {
        size_t len;
        char *tok, *eq;

        while (*s == ' ' || *s == '\t')
            s++;
        if (*s == '\0' || *s == '\n' || *s == '\r')
            break;
        if (*s == '[') {
            long total = 0;

            for (s++;;) {
                while (*s == ' ')
                    s++;
                if (*s == ']')
                    break;
                if (!isdigit((unsigned char)*s))
                    return "malformed run queue list: want '[N N ...]'";
                total += strtol(s, &s, 10);
            }
            s++;
            if (!tp->local_from_bracket) {
                tp->local = total;
                tp->has_local = tp->local_from_bracket = true;
            }
            continue;
        }
        tok = s;
        len = strcspn(s, " \t\r\n");
        s += len;
        eq = memchr(tok, '=', len);
        if (eq == NULL)
            continue;
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
            size_t klen = strlen(keys[k]);
            char *vend;

            if ((size_t)(eq - tok) != klen || memcmp(tok, keys[k], klen) != 0)
                continue;
            if (!isdigit((unsigned char)eq[1]) ||
                (*dst[k] = strtol(eq + 1, &vend, 10), vend != s)) {
                snprintf(why, sizeof why, "%s= wants a whole number, not '%.*s'", keys[k],
                         (int)(s - eq - 1), eq + 1);
                return why;
            }
            seen[k] = true;
        }
    }
    for (int k = 0; k < 4; k++) {
        if (!seen[k]) {
            snprintf(why, sizeof why, "no %s=", keys[k]);
            return why;
        }
    }
    tp->has_spinning = seen[4];
    tp->has_idlethreads = seen[5];
    return NULL;
}

/* A SCHEDDETAIL line "  P<n>: ... runqsize=<k> ...": k in *runqsize. */
bool parse_p_line(const char *s, long *runqsize)
{
    const char *q;

    while (*s == ' ' || *s == '\t')
        s++;
    if (*s != 'P' || !isdigit((unsigned char)s[1]))
        return false;
    s += 1 + strspn(s + 1, "0123456789");
    if (*s != ':' || (q = strstr(s, " runqsize=")) == NULL || !isdigit((unsigned char)q[10]))
        return false;
    *runqsize = strtol(q + 10, NULL, 10);
    return true;
}
