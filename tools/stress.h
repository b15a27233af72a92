/*
 * goshim stress's state, shared by its runs and report (tools/cmd_stress.c),
 * its JSON results (tools/stress_json.c) and their merge (tools/stress_merge.c).
 */
#ifndef GOSHIM_TOOLS_STRESS_H
#define GOSHIM_TOOLS_STRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "tools/cli.h"

#define MAX_JOBS       256
#define FIRST_LINE_MAX 160

#define STRESS_JSON_FORMAT 1 /* --json's "goshim_stress": the version of the file's layout */

/* How a run failed. */
enum { F_NONE, F_EXIT, F_SIGNAL, F_HANG, F_CHECK };

/* A run in flight: the program, then (with --check) the check. */
struct job {
    pid_t pid; /* 0: free slot */
    int pidfd;
    uint64_t seed;
    bool checking; /* pid is the check */
    bool quit;     /* SIGQUIT sent: a hang */
    double start, deadline;
    int wstatus; /* the program's */
    double ms;   /* its duration */
};

struct failure {
    uint64_t seed;
    int kind;
    int wstatus; /* the program's, or the check's for F_CHECK */
    double ms;
    double timeout_ms; /* the --timeout of its run (a hang's description) */
    char first[FIRST_LINE_MAX];
};

struct stress {
    uint64_t first_seed, runs;        /* the seeds this process runs: the shard's */
    uint64_t range_first, range_runs; /* the whole range, before --shard */
    unsigned shard_k, shard_n;        /* --shard K/N, or 1/1 */
    unsigned jobs, procs, stop_after;
    double timeout_ms;
    const char *check, *out, *json;
    char **argv;
    char *preload, *dir, *self;
    bool temp_dir, tty;
    uint64_t next, done, nfail;
    struct job job[MAX_JOBS];
    struct failure *fail;
    double t0, last_progress;
    bool stopped;
    int interrupted;    /* the signal that ended the runs, or 0 */
    FILE *json_file;    /* --json's FILE.partial while the runs go on */
    char *json_partial; /* its name */
    unsigned merged;    /* --merge: the number of files; else 0 */
    const char *note;   /* --merge: what is missing, printed under the first line */
};

/* The table of failures and their replay lines on stdout (tools/cmd_stress.c). */
void stress_report(struct stress *s);
/* goshim run -p P --chaos SEED -- CMD ARGS... [| sh -c CHECK] and a newline. */
void stress_replay(FILE *f, const struct stress *s, uint64_t seed);

/* --json FILE: remove FILE, start FILE.partial; exit 2 when it cannot be made. */
void stress_json_open(struct stress *s);
/* One finished run (j, with the failure's kind and status and f, NULL for a pass). */
void stress_json_run(struct stress *s, const struct job *j, int kind, int wstatus,
                     const struct failure *f);
/* The summary; FILE.partial renamed FILE. false (and a message) when it cannot be written. */
bool stress_json_close(struct stress *s);
/* goshim stress --merge FILE... (argv[first] is the first file; tools/stress_merge.c). */
int stress_merge(const struct command *cmd, int argc, char **argv, int first);

#endif
