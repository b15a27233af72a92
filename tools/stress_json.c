/*
 * goshim stress across machines: the results of one run as JSON (--json
 * FILE), and the one report of many such files (--merge FILE...).
 *
 * A stress too big for one machine is split with --shard K/N (the parts
 * are cut in tools/cmd_stress.c, from nothing but the seed range and
 * K/N), each part run where the user's own scheduler puts it (GNU
 * parallel, a Slurm array, a Kubernetes Indexed Job), with --json FILE.
 * The files come back to one place and --merge prints the table and
 * replay lines one run over all the seeds would have printed, with the
 * same exit status: 1 when a seed failed.
 *
 * The file is one JSON object: what was run (command, check, procs,
 * timeout, the seed range and the part), one record per run in "runs"
 * (seed, procs, status, exit code or signal, hang, milliseconds, the
 * first line of a failure and the command that replays it), then the
 * summary (done, failed, state: done, stopped or interrupted). It is
 * written as the runs finish to FILE.partial, flushed after each record,
 * and renamed FILE only once the summary is written; FILE is removed at
 * the start. So FILE, when it is there, is whole and valid, also after
 * ^C, SIGTERM or SIGHUP (stress finishes the file, with state
 * "interrupted"); a stress killed outright leaves only FILE.partial, and
 * --merge says so instead of reading a stale or cut-short file.
 * Rejected: rewriting the whole file after every run (quadratic), and
 * JSON Lines (a file cut at a line boundary would look whole).
 *
 * --merge (tools/stress_merge.c) reads the files back.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tools/json.h"
#include "tools/measure.h"
#include "tools/stress.h"

/* ---- writing ----------------------------------------------------------------------------- */

static void put_range(FILE *f, const char *name, uint64_t first, uint64_t runs)
{
    fprintf(f, "  \"%s\": [%llu, %llu],\n", name, (unsigned long long)first,
            (unsigned long long)(first + runs - 1));
}

static void put_header(FILE *f, const struct stress *s)
{
    char host[HOST_NAME_MAX + 1] = "";

    gethostname(host, sizeof host - 1);
    fprintf(f, "{\n  \"goshim_stress\": %d,\n  \"command\": [", STRESS_JSON_FORMAT);
    for (char **a = s->argv; *a; a++) {
        fputs(a == s->argv ? "" : ", ", f);
        json_put_string(f, *a);
    }
    fputs("],\n  \"check\": ", f);
    if (s->check)
        json_put_string(f, s->check);
    else
        fputs("null", f);
    fprintf(f, ",\n  \"procs\": %u,\n  \"timeout_s\": %.0f,\n", s->procs, s->timeout_ms / 1e3);
    put_range(f, "seeds", s->range_first, s->range_runs);
    fprintf(f, "  \"shard\": [%u, %u],\n", s->shard_k, s->shard_n);
    put_range(f, "shard_seeds", s->first_seed, s->runs);
    fprintf(f, "  \"jobs\": %u,\n  \"host\": ", s->jobs);
    json_put_string(f, host);
    fputs(",\n  \"out\": ", f);
    if (s->temp_dir)
        fputs("null", f);
    else
        json_put_string(f, s->dir);
    fputs(",\n  \"runs\": [", f);
}

void stress_json_open(struct stress *s)
{
    if (asprintf(&s->json_partial, "%s.partial", s->json) < 0)
        fail(EXIT_USAGE, "goshim stress: out of memory");
    if (unlink(s->json) != 0 && errno != ENOENT)
        fail(EXIT_USAGE, "goshim stress: --json %s: cannot replace it: %s", s->json,
             strerror(errno));
    if ((s->json_file = fopen(s->json_partial, "w")) == NULL)
        fail(EXIT_USAGE, "goshim stress: --json %s: %s", s->json_partial, strerror(errno));
    put_header(s->json_file, s);
    fflush(s->json_file);
}

/* "exit": CODE, "signal": null (or the other way round) for wait status st. */
static void put_status(FILE *f, const char *prefix, int st)
{
    if (WIFSIGNALED(st))
        fprintf(f, ", \"%sexit\": null, \"%ssignal\": %d", prefix, prefix, WTERMSIG(st));
    else
        fprintf(f, ", \"%sexit\": %d, \"%ssignal\": null", prefix, WEXITSTATUS(st), prefix);
}

void stress_json_run(struct stress *s, const struct job *j, int kind, int wstatus,
                     const struct failure *f)
{
    static const char *const status[] = {
        [F_NONE] = "pass", [F_EXIT] = "exit",   [F_SIGNAL] = "signal",
        [F_HANG] = "hang", [F_CHECK] = "check",
    };
    FILE *o = s->json_file;
    char *replay = NULL;
    size_t len = 0;
    FILE *m;

    if (o == NULL)
        return;
    fprintf(o, "%s\n    {\"seed\": %llu, \"procs\": %u, \"status\": \"%s\"", s->done > 1 ? "," : "",
            (unsigned long long)j->seed, s->procs, status[kind]);
    put_status(o, "", j->wstatus);
    fprintf(o, ", \"hang\": %s, \"ms\": %.0f", kind == F_HANG ? "true" : "false", j->ms);
    if (kind == F_CHECK)
        put_status(o, "check_", wstatus);
    if (f != NULL) {
        fputs(", \"first_line\": ", o);
        json_put_string(o, f->first);
    }
    if ((m = open_memstream(&replay, &len)) != NULL) {
        stress_replay(m, s, j->seed);
        fclose(m);
        replay[strcspn(replay, "\n")] = '\0';
        fputs(", \"replay\": ", o);
        json_put_string(o, replay);
        free(replay);
    }
    fputc('}', o);
    fflush(o);
}

bool stress_json_close(struct stress *s)
{
    const char *state = s->stopped ? "stopped" : s->interrupted ? "interrupted" : "done";
    FILE *o = s->json_file;
    char sig[32];

    fprintf(o, "%s],\n  \"done\": %llu,\n  \"failed\": %llu,\n  \"state\": \"%s\",\n",
            s->done ? "\n  " : "", (unsigned long long)s->done, (unsigned long long)s->nfail,
            state);
    if (s->interrupted)
        fprintf(o, "  \"interrupted_by\": \"%s\",\n", sig_name(sig, sizeof sig, s->interrupted));
    fprintf(o, "  \"seconds\": %.3f\n}\n", (now_ms() - s->t0) / 1e3);
    s->json_file = NULL;
    if (ferror(o) | (fclose(o) != 0)) {
        fprintf(stderr, "goshim stress: --json %s: cannot write: %s\n", s->json_partial,
                strerror(errno));
        return false;
    }
    if (rename(s->json_partial, s->json) != 0) {
        fprintf(stderr, "goshim stress: --json: cannot rename %s to %s: %s\n", s->json_partial,
                s->json, strerror(errno));
        return false;
    }
    return true;
}
