/*
 * goshim stress --merge FILE...: the one report of a stress run in parts.
 *
 * Each FILE is what goshim stress --json wrote (tools/stress_json.c) for
 * one part, usually one --shard K/N on one machine. The merge prints what
 * one run over all their seeds would have printed (tools/cmd_stress.c's
 * stress_report): the first line, the failures sorted by seed, their
 * replay lines (with this goshim's path, since the replay happens here),
 * and exits as stress does: 0 when every seed passed, 1 when one failed.
 *
 * Parts that do not belong together are refused, exit 2, with a message
 * naming both files: another command, check or -p (the replay lines would
 * be false for some seeds), another split (seed range or N), the same part
 * twice, or one seed in two files. A file that is not whole, or not one
 * of ours, is refused the same way, with the line and column where
 * reading stopped. What is missing (parts of the split not given, parts
 * stopped at --stop-after or interrupted) is listed under the first line
 * and makes the exit status 1 even when nothing failed: a merge says 0
 * only when every seed of the split ran and passed.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tools/json.h"
#include "tools/stress.h"

/* One file: what was run, and where its runs are. */
struct part {
    const char *path;
    struct json *root;
    const struct json *command;
    struct json *runs; /* its records, freed once collected */
    const char *check, *state;
    unsigned procs, k, n;
    uint64_t first, last, shard_first, shard_last;
    uint64_t done; /* the records in runs */
    double timeout_ms;
};

/* A seed and the file that ran it, to find seeds in two files. */
struct seen {
    uint64_t seed;
    unsigned part;
};

__attribute__((noreturn, format(printf, 2, 3))) static void bad_file(const char *path,
                                                                     const char *fmt, ...);

#define MERGE_FAIL(...) fail(EXIT_USAGE, "goshim stress --merge: " __VA_ARGS__)

/* ---- reading a file ---------------------------------------------------------------------- */

__attribute__((noreturn, format(printf, 2, 3))) static void bad_file(const char *path,
                                                                     const char *fmt, ...)
{
    char what[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    MERGE_FAIL("%s: %s", path, what);
}

/* The whole of path (malloc'd, NUL-terminated), or exit 2 saying why not. */
static char *read_text(const char *path)
{
    FILE *f = fopen(path, "r");
    size_t cap = 1 << 16, n = 0, got;
    char *buf, partial[PATH_MAX];
    struct stat st;

    if (f == NULL) {
        int err = errno;

        snprintf(partial, sizeof partial, "%s.partial", path);
        if (err == ENOENT && stat(partial, &st) == 0)
            bad_file(path,
                     "missing, but %s is there: the goshim stress writing it did not "
                     "finish (killed before it could write its summary); run that part "
                     "again",
                     partial);
        bad_file(path, "%s", strerror(err));
    }
    if ((buf = malloc(cap)) == NULL)
        MERGE_FAIL("out of memory");
    while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap && (buf = realloc(buf, cap *= 2)) == NULL)
            MERGE_FAIL("out of memory");
    }
    if (ferror(f))
        bad_file(path, "%s", strerror(errno));
    fclose(f);
    buf[n] = '\0';
    if (strlen(buf) != n)
        bad_file(path, "not a goshim stress --json file (it holds a NUL byte)");
    return buf;
}

static uint64_t need_u64(const struct part *p, const struct json *obj, const char *key)
{
    uint64_t v;

    if (!json_u64(json_get(obj, key), &v))
        bad_file(p->path, "\"%s\" is missing or not a whole number", key);
    return v;
}

/* The member key, a [first, last] pair with first <= last. */
static void need_pair(const struct part *p, const char *key, uint64_t *a, uint64_t *b)
{
    const struct json *j = json_get(p->root, key);

    if (j == NULL || j->type != JSON_ARRAY || !json_u64(j->child, a) ||
        !json_u64(j->child->next, b) || j->child->next->next != NULL || *a > *b)
        bad_file(p->path, "\"%s\" is missing or not a pair [A, B] of whole numbers, A <= B", key);
}

static const char *need_string(const struct part *p, const char *key, bool or_null)
{
    const struct json *j = json_get(p->root, key);

    if (j != NULL && j->type == JSON_STRING)
        return j->text;
    if (j == NULL || !or_null || j->type != JSON_NULL)
        bad_file(p->path, "\"%s\" is missing or not a string", key);
    return NULL;
}

/* Read and check path into p: every field a merge uses is there and of its type. */
static void load_part(struct part *p, const char *path)
{
    char *text = read_text(path), err[160];
    uint64_t v, k, n;

    p->path = path;
    if ((p->root = json_parse(text, err, sizeof err)) == NULL)
        bad_file(path, "not valid JSON: %s (not written by goshim stress --json, or cut short)",
                 err);
    free(text);
    if (!json_u64(json_get(p->root, "goshim_stress"), &v))
        bad_file(path, "not a goshim stress --json file (no \"goshim_stress\")");
    if (v != STRESS_JSON_FORMAT)
        bad_file(path, "written in format %llu; this goshim reads format %d", (unsigned long long)v,
                 STRESS_JSON_FORMAT);
    p->command = json_get(p->root, "command");
    if (p->command == NULL || p->command->type != JSON_ARRAY || p->command->child == NULL)
        bad_file(path, "\"command\" is missing or not a list of words");
    for (const struct json *w = p->command->child; w; w = w->next) {
        if (w->type != JSON_STRING)
            bad_file(path, "\"command\" holds something other than strings");
    }
    p->check = need_string(p, "check", true);
    p->state = need_string(p, "state", false);
    p->procs = (unsigned)need_u64(p, p->root, "procs");
    p->timeout_ms = (double)need_u64(p, p->root, "timeout_s") * 1e3;
    need_pair(p, "seeds", &p->first, &p->last);
    need_pair(p, "shard_seeds", &p->shard_first, &p->shard_last);
    need_pair(p, "shard", &k, &n);
    if (k == 0 || n > UINT32_MAX || p->procs == 0)
        bad_file(path, "\"shard\" or \"procs\" out of range");
    p->k = (unsigned)k;
    p->n = (unsigned)n;
    p->runs = (struct json *)json_get(p->root, "runs");
    if (p->runs == NULL || p->runs->type != JSON_ARRAY)
        bad_file(path, "\"runs\" is missing or not a list");
    for (const struct json *r = p->runs->child; r; r = r->next)
        p->done++;
}

/* ---- checking the parts belong together -------------------------------------------------- */

/* The words of a command, blank-separated, into buf. */
static const char *words(const struct json *command, char *buf, size_t len)
{
    size_t n = 0;

    buf[0] = '\0';
    for (const struct json *w = command->child; w && n < len; w = w->next)
        n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? " " : "", w->text);
    return buf;
}

static bool same_words(const struct json *a, const struct json *b)
{
    for (a = a->child, b = b->child; a && b; a = a->next, b = b->next) {
        if (strcmp(a->text, b->text) != 0)
            return false;
    }
    return a == NULL && b == NULL;
}

/* b was written by the same stress as a, for another part of the same split; else exit 2. */
static void same_stress(const struct part *a, const struct part *b)
{
    char wa[256], wb[256];

    if (!same_words(a->command, b->command))
        MERGE_FAIL("%s ran '%s' and %s ran '%s': the parts of one stress run one command", a->path,
                   words(a->command, wa, sizeof wa), b->path, words(b->command, wb, sizeof wb));
    if ((a->check == NULL) != (b->check == NULL) ||
        (a->check != NULL && strcmp(a->check, b->check) != 0))
        MERGE_FAIL("%s and %s have another --check ('%s' and '%s')", a->path, b->path,
                   a->check ? a->check : "", b->check ? b->check : "");
    if (a->procs != b->procs)
        MERGE_FAIL("%s ran at -p %u and %s at -p %u: the replay lines need one -p", a->path,
                   a->procs, b->path, b->procs);
    if ((a->n > 1 || b->n > 1) && (a->n != b->n || a->first != b->first || a->last != b->last))
        MERGE_FAIL("%s is part %u/%u of seeds %llu-%llu and %s part %u/%u of seeds %llu-%llu: "
                   "parts of different splits",
                   a->path, a->k, a->n, (unsigned long long)a->first, (unsigned long long)a->last,
                   b->path, b->k, b->n, (unsigned long long)b->first, (unsigned long long)b->last);
    if (a->n > 1 && a->k == b->k)
        MERGE_FAIL("%s and %s are both part %u/%u of seeds %llu-%llu: give each part once", a->path,
                   b->path, a->k, a->n, (unsigned long long)a->first, (unsigned long long)a->last);
}

static int cmp_seen(const void *x, const void *y)
{
    uint64_t a = ((const struct seen *)x)->seed, b = ((const struct seen *)y)->seed;

    return (a > b) - (a < b);
}

/* No seed is in two files (seen: n seeds, sorted here); else exit 2. */
static void no_overlap(const struct part *parts, struct seen *seen, uint64_t n)
{
    qsort(seen, n, sizeof *seen, cmp_seen);
    for (uint64_t k = 1; k < n; k++) {
        if (seen[k].seed != seen[k - 1].seed)
            continue;
        if (seen[k].part == seen[k - 1].part)
            bad_file(parts[seen[k].part].path, "seed %llu is there twice",
                     (unsigned long long)seen[k].seed);
        MERGE_FAIL("seed %llu is in both %s and %s: the parts overlap (the same part twice, or "
                   "--seeds ranges that overlap)",
                   (unsigned long long)seen[k].seed, parts[seen[k - 1].part].path,
                   parts[seen[k].part].path);
    }
}

/* ---- the runs ---------------------------------------------------------------------------- */

/* The wait status of "exit"/"signal" (prefix "check_" for the check's). */
static int wait_status(const struct part *p, const struct json *run, const char *prefix)
{
    char key[32];
    uint64_t v;

    snprintf(key, sizeof key, "%ssignal", prefix);
    if (json_u64(json_get(run, key), &v) && v > 0 && v < 128)
        return (int)v;
    snprintf(key, sizeof key, "%sexit", prefix);
    if (json_u64(json_get(run, key), &v) && v < 256)
        return (int)v << 8;
    bad_file(p->path, "a run has neither a \"%sexit\" from 0 to 255 nor a \"%ssignal\"", prefix,
             prefix);
}

/* One record of "runs" into f: its kind (F_NONE for a pass). */
static int read_run(const struct part *p, const struct json *run, struct failure *f)
{
    static const char *const status[] = {
        [F_NONE] = "pass", [F_EXIT] = "exit",   [F_SIGNAL] = "signal",
        [F_HANG] = "hang", [F_CHECK] = "check",
    };
    const struct json *st = json_get(run, "status"), *ms = json_get(run, "ms");
    const struct json *first = json_get(run, "first_line");
    int kind = -1;

    memset(f, 0, sizeof *f);
    f->seed = need_u64(p, run, "seed");
    for (int k = 0; k < (int)(sizeof status / sizeof status[0]) && st; k++)
        kind = st->type == JSON_STRING && strcmp(st->text, status[k]) == 0 ? k : kind;
    if (kind < 0 || ms == NULL || ms->type != JSON_NUMBER)
        bad_file(p->path,
                 "the run of seed %llu has no \"status\" (pass, exit, signal, hang or "
                 "check) or no \"ms\"",
                 (unsigned long long)f->seed);
    if (f->seed < p->shard_first || f->seed > p->shard_last)
        bad_file(p->path, "seed %llu is outside the file's seeds %llu-%llu",
                 (unsigned long long)f->seed, (unsigned long long)p->shard_first,
                 (unsigned long long)p->shard_last);
    f->kind = kind;
    f->wstatus = wait_status(p, run, kind == F_CHECK ? "check_" : "");
    f->ms = strtod(ms->text, NULL);
    f->timeout_ms = p->timeout_ms;
    if (first != NULL && first->type == JSON_STRING)
        snprintf(f->first, sizeof f->first, "%s", first->text);
    return kind;
}

/* The runs of part p (index k): its failures appended to m, its seeds to *seen (*n of them),
 * then its records freed (a merge holds one file's runs at a time). */
static void collect_runs(struct stress *m, struct part *p, unsigned k, struct seen **seen,
                         uint64_t *n)
{
    static uint64_t fail_cap, seen_cap; /* one merge per process */
    struct failure f;

    for (const struct json *r = p->runs->child; r; r = r->next) {
        if (*n == seen_cap &&
            !(*seen = realloc(*seen, (seen_cap = 2 * seen_cap + 64) * sizeof **seen)))
            MERGE_FAIL("out of memory");
        if (read_run(p, r, &f) != F_NONE) {
            if (m->nfail == fail_cap &&
                !(m->fail = realloc(m->fail, (fail_cap = 2 * fail_cap + 16) * sizeof *m->fail)))
                MERGE_FAIL("out of memory");
            m->fail[m->nfail++] = f;
        }
        (*seen)[(*n)++] = (struct seen){.seed = f.seed, .part = k};
    }
    m->done += p->done;
    json_free(p->runs->child);
    p->runs->child = NULL;
}

/* ---- what is missing --------------------------------------------------------------------- */

static int cmp_unsigned(const void *x, const void *y)
{
    unsigned a = *(const unsigned *)x, b = *(const unsigned *)y;

    return (a > b) - (a < b);
}

/* The parts of the split not among parts ("3/4, 4/4", up to ten named) into f. */
static void missing_parts(FILE *f, const struct part *parts, unsigned nparts)
{
    unsigned n = parts[0].n, missing = 0, next = 1, *ks = calloc(nparts, sizeof *ks);

    if (ks == NULL)
        MERGE_FAIL("out of memory");
    for (unsigned k = 0; k < nparts; k++)
        ks[k] = parts[k].k;
    qsort(ks, nparts, sizeof *ks, cmp_unsigned);
    for (unsigned k = 0; k <= nparts; k++) {
        unsigned upto = k < nparts ? ks[k] : n + 1;

        for (; next < upto; next++) {
            if (missing++ < 10)
                fprintf(f, "%s%u/%u", missing > 1 ? ", " : "", next, n);
        }
        next = upto + 1;
    }
    if (missing > 10)
        fprintf(f, " and %u more", missing - 10);
    free(ks);
}

/* The note under the first line: parts missing or unfinished; NULL when there is none. */
static char *missing_note(struct stress *m, struct part *parts, unsigned nparts)
{
    char *note = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&note, &len);
    bool any = false;

    if (f == NULL)
        MERGE_FAIL("out of memory");
    if (parts[0].n > 1 && nparts < parts[0].n) {
        fputs("missing: part ", f);
        missing_parts(f, parts, nparts);
        fprintf(f, " of seeds %llu-%llu (not among the files)", (unsigned long long)parts[0].first,
                (unsigned long long)parts[0].last);
        any = true;
    }
    for (unsigned k = 0; k < nparts; k++) {
        const struct part *p = &parts[k];
        const struct json *by = json_get(p->root, "interrupted_by");

        if (strcmp(p->state, "done") == 0)
            continue;
        m->stopped |= strcmp(p->state, "stopped") == 0;
        m->interrupted |= strcmp(p->state, "interrupted") == 0;
        fprintf(f, "%sunfinished: %s ran %llu of its %llu seeds (%s%s%s)", any ? "\n" : "", p->path,
                (unsigned long long)p->done,
                (unsigned long long)(p->shard_last - p->shard_first + 1), p->state,
                by && by->type == JSON_STRING ? " by " : "",
                by && by->type == JSON_STRING ? by->text : "");
        any = true;
    }
    fclose(f);
    if (!any) {
        free(note);
        return NULL;
    }
    return note;
}

/* ---- the command ------------------------------------------------------------------------- */

/* The words of the first part's command, as stress_replay wants them (argv, NULL-ended). */
static char **command_argv(const struct part *p)
{
    size_t n = 0, k = 0;
    char **argv;

    for (const struct json *w = p->command->child; w; w = w->next)
        n++;
    if ((argv = calloc(n + 1, sizeof *argv)) == NULL)
        MERGE_FAIL("out of memory");
    for (const struct json *w = p->command->child; w; w = w->next)
        argv[k++] = w->text;
    return argv;
}

int stress_merge(const struct command *cmd, int argc, char **argv, int first)
{
    static struct stress m;
    unsigned nparts = (unsigned)(argc - first);
    struct part *parts;
    struct seen *seen = NULL;
    uint64_t nseen = 0;

    if (first >= argc)
        usage_error(cmd, "--merge wants the files to merge: goshim stress --merge FILE...");
    if ((parts = calloc(nparts, sizeof *parts)) == NULL)
        MERGE_FAIL("out of memory");
    for (unsigned k = 0; k < nparts; k++) {
        load_part(&parts[k], argv[first + k]);
        for (unsigned j = 0; j < k; j++)
            same_stress(&parts[j], &parts[k]);
        collect_runs(&m, &parts[k], k, &seen, &nseen);
    }
    no_overlap(parts, seen, nseen);
    m.note = missing_note(&m, parts, nparts);
    m.argv = command_argv(&parts[0]);
    m.check = parts[0].check;
    m.procs = parts[0].procs;
    m.shard_k = m.shard_n = 1;
    m.first_seed = parts[0].n > 1 ? parts[0].first : nseen ? seen[0].seed : parts[0].shard_first;
    m.merged = nparts;
    m.temp_dir = true; /* the failing runs' files are on the machines that ran them */
    if ((m.self = realpath("/proc/self/exe", NULL)) == NULL)
        MERGE_FAIL("cannot find this goshim: %s", strerror(errno));
    stress_report(&m);
    return m.nfail || m.note ? 1 : 0;
}
