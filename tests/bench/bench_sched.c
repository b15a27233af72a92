/*
 * bench_sched: the scheduler's figures side by side, from one run.
 *
 *   native pthread_create+pthread_join   (batches created, then all joined)
 *   G spawn+complete, P = usable CPUs and P = 1
 *   Gosched and goyield between two Gs on P = 1
 *   park/ready ping-pong between two Gs on P = 1
 *   the switch floors: callee-saved registers + SP, and the same with the
 *   FS-base write (wrfsbase, ldt or arch_prctl, whichever tls_fs_method says;
 *   GOSHIM_FS forces one, and scripts/bench_fs.sh runs every method)
 *
 * sched_init runs once per process, so the work is split over processes:
 * this one measures native threads and never starts the scheduler; two
 * forked workers start it with P = usable CPUs and P = 1 and wait for
 * commands on a pipe. Each repetition asks every figure once, in turn, so
 * the VM's noise falls on native and goshim figures alike. Each figure is
 * the median (min, max) of GOSHIM_BENCH_RUNS repetitions (default 9);
 * GOSHIM_TEST_SCALE scales the sizes.
 *
 * Output: one line per figure, "bench_<name>: N ops, X ns/op (...)", then a
 * Markdown table with the ratios issue 2 asks for. The targets are
 * informational: the exit status is non-zero only if something failed.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sched/context.h"
#include "sched/lock.h"
#include "sched/sched.h"
#include "sched/tls.h"
#include "tests/wg.h"

/* ---- sizes ------------------------------------------------------------- */

static long scale(long n)
{
    const char *s = getenv("GOSHIM_TEST_SCALE");
    char *end;
    if (s == NULL || *s == '\0')
        return n;
    errno = 0;
    double f = strtod(s, &end);
    if (errno != 0 || *end != '\0' || !(f > 0))
        return n;
    long r = (long)((double)n * f);
    return r < 1 ? 1 : r;
}

static int env_runs(void)
{
    const char *s = getenv("GOSHIM_BENCH_RUNS");
    if (s == NULL || *s == '\0')
        return 9;
    char *end;
    long v = strtol(s, &end, 10);
    if (*end != '\0' || v < 1 || v > 1000) {
        fprintf(stderr, "bench_sched: GOSHIM_BENCH_RUNS must be 1..1000, not '%s'; using 9\n", s);
        return 9;
    }
    return (int)v;
}

static long n_native;   /* threads per native batch */
static long n_batches;  /* native batches per repetition */
static long n_spawn;    /* Gs per spawn+complete round */
static long n_rounds;   /* spawn+complete rounds per repetition */
static long n_sched;    /* Gosched/goyield calls per G */
static long n_pingpong; /* ping-pong rounds (two handoffs each) */
static long n_bare;     /* bare switches per side */
static long n_fs;       /* FS switches per side */

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* ---- native threads (this process) -------------------------------------- */

static void *native_fn(void *arg)
{
    return arg;
}

/* ns per thread, or -1 on failure. A batch of 500 default (8 MiB) stacks
 * is more than glibc's 40 MiB stack cache holds, so most threads mmap and
 * munmap their stack, as in a program that starts many threads at once. */
static double native_create_join(void)
{
    pthread_t *t = malloc((size_t)n_native * sizeof *t);
    if (t == NULL)
        return -1;
    double t0 = now_ns();
    for (long b = 0; b < n_batches; b++) {
        for (long i = 0; i < n_native; i++) {
            if (pthread_create(&t[i], NULL, native_fn, NULL) != 0) {
                fprintf(stderr, "bench_sched: pthread_create failed at thread %ld\n", i);
                for (long j = 0; j < i; j++)
                    pthread_join(t[j], NULL);
                free(t);
                return -1;
            }
        }
        for (long i = 0; i < n_native; i++)
            pthread_join(t[i], NULL);
    }
    double ns = (now_ns() - t0) / (double)(n_native * n_batches);
    free(t);
    return ns;
}

/* ---- worker: G measurements ---------------------------------------------- */

/* Every G figure is timed inside a driver G, spawned by the worker's main
 * thread, which then blocks on main_wg. */
static struct sched_wg main_wg;
static struct sched_wg inner_wg;
static double result_ns;

static void tiny(void *arg)
{
    (void)arg;
    sched_wg_done(&inner_wg);
}

/* rounds rounds of: spawn n_spawn Gs, wait for all of them. */
static void spawn_driver(void *arg)
{
    long rounds = (long)arg;
    double t0 = now_ns();
    for (long r = 0; r < rounds; r++) {
        sched_wg_add(&inner_wg, n_spawn);
        for (long i = 0; i < n_spawn; i++) {
            int err;
            if (sched_spawn(tiny, NULL, NULL, &err) == NULL) {
                fprintf(stderr, "bench_sched: sched_spawn: %s\n", strerror(err));
                exit(3);
            }
        }
        sched_wg_wait(&inner_wg);
    }
    result_ns = (now_ns() - t0) / (double)(rounds * n_spawn);
    sched_wg_done(&main_wg);
}

static void gosched_loop(void *arg)
{
    (void)arg;
    for (long i = 0; i < n_sched; i++)
        sched_gosched();
    sched_wg_done(&inner_wg);
}

static void goyield_loop(void *arg)
{
    (void)arg;
    for (long i = 0; i < n_sched; i++)
        sched_goyield();
    sched_wg_done(&inner_wg);
}

/* Ping-pong as in tests/test_sched.c park_ready_ping_pong_alternates. */
static struct {
    struct runtime_lock lock;
    struct g *waiting;
    long turn, rounds;
} pp;

static bool pp_unlock(struct g *gp, void *arg)
{
    (void)gp;
    runtime_unlock(arg);
    return true;
}

static void player(void *arg)
{
    long me = (long)arg;
    for (long i = 0; i < pp.rounds; i++) {
        runtime_lock(&pp.lock);
        while (pp.turn % 2 != me) {
            pp.waiting = sched_self();
            gopark(pp_unlock, &pp.lock, waitReasonTest);
            runtime_lock(&pp.lock);
        }
        pp.turn++;
        struct g *other = pp.waiting;
        pp.waiting = NULL;
        runtime_unlock(&pp.lock);
        if (other)
            goready(other);
    }
    sched_wg_done(&inner_wg);
}

/* Spawn two Gs running fn(0) and fn(1), wait for both; ns per switch,
 * given that the pair makes `switches` switches in all. */
struct pair_arg {
    void (*fn)(void *);
    long switches;
};

static void pair_driver(void *arg)
{
    struct pair_arg *pa = arg;
    double t0 = now_ns();
    sched_wg_add(&inner_wg, 2);
    for (long i = 0; i < 2; i++) {
        int err;
        if (sched_spawn(pa->fn, (void *)i, NULL, &err) == NULL) {
            fprintf(stderr, "bench_sched: sched_spawn: %s\n", strerror(err));
            exit(3);
        }
    }
    sched_wg_wait(&inner_wg);
    result_ns = (now_ns() - t0) / (double)pa->switches;
    sched_wg_done(&main_wg);
}

static double run_in_g(void (*fn)(void *), void *arg)
{
    int err;
    sched_wg_add(&main_wg, 1);
    if (sched_spawn(fn, arg, NULL, &err) == NULL) {
        fprintf(stderr, "bench_sched: sched_spawn: %s\n", strerror(err));
        exit(3);
    }
    sched_wg_wait(&main_wg);
    return result_ns;
}

/* ---- worker: the switch floors ------------------------------------------- */

/* Two bare contexts A and B switch to each other n times each, then A
 * returns to the caller. Between switches they touch no TLS, errno or
 * libc: only their stacks and this struct. */
static struct floor {
    struct gobuf main, a, b;
    void *tcb_main, *tcb_a, *tcb_b;
    long n;
    bool fs;
} fl;

static void floor_a(void *arg)
{
    struct floor *f = arg;
    if (f->fs) {
        for (long i = 0; i < f->n; i++)
            ctx_switch_bare_fs(&f->a, &f->b, f->tcb_b);
        ctx_switch_bare_fs(&f->a, &f->main, f->tcb_main);
    } else {
        for (long i = 0; i < f->n; i++)
            ctx_switch_bare(&f->a, &f->b);
        ctx_switch_bare(&f->a, &f->main);
    }
    __builtin_trap(); /* never resumed */
}

static void floor_b(void *arg)
{
    struct floor *f = arg;
    if (f->fs) {
        for (;;)
            ctx_switch_bare_fs(&f->b, &f->a, f->tcb_a);
    } else {
        for (;;)
            ctx_switch_bare(&f->b, &f->a);
    }
}

enum { FLOOR_STACK = 64 * 1024 };
static char *floor_stack_a, *floor_stack_b;

/* ns per one-way switch. */
static double floor_run(bool fs, long n)
{
    fl.n = n;
    fl.fs = fs;
    ctx_init_bare(&fl.a, floor_stack_a + FLOOR_STACK, floor_a, &fl);
    ctx_init_bare(&fl.b, floor_stack_b + FLOOR_STACK, floor_b, &fl);
    double t0 = now_ns();
    if (fs)
        ctx_switch_bare_fs(&fl.main, &fl.a, fl.tcb_a);
    else
        ctx_switch_bare(&fl.main, &fl.a);
    return (now_ns() - t0) / (double)(2 * n);
}

/* ---- worker loop ---------------------------------------------------------- */

enum cmd {
    CMD_SPAWN = 'S',
    CMD_GOSCHED = 'G',
    CMD_GOYIELD = 'Y',
    CMD_PINGPONG = 'P',
    CMD_BARE = 'B',
    CMD_BARE_FS = 'F',
    CMD_QUIT = 'q',
};

/* What a worker reports once it is up. */
struct hello {
    int nprocs;
    int tls_mode;
    int fs_method;
};

/* Move exactly n bytes through fd with read(2) or write(2), retrying on EINTR. */
static bool xfer_all(int fd, void *buf, size_t n, bool reading)
{
    char *p = buf;
    while (n > 0) {
        ssize_t r = reading ? read(fd, p, n) : write(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        p += r;
        n -= (size_t)r;
    }
    return true;
}

static bool read_all(int fd, void *buf, size_t n)
{
    return xfer_all(fd, buf, n, true);
}

static bool write_all(int fd, const void *buf, size_t n)
{
    return xfer_all(fd, (void *)buf, n, false);
}

/* run_cmd measures the figure cmd asks for into *ns (-1: failed or not
 * available); false for an unknown command. full: TLS is in full mode. */
static bool run_cmd(char cmd, bool full, double *ns)
{
    struct pair_arg pa;
    switch (cmd) {
    case CMD_SPAWN:
        *ns = run_in_g(spawn_driver, (void *)n_rounds);
        return true;
    case CMD_GOSCHED:
    case CMD_GOYIELD:
        pa = (struct pair_arg){cmd == CMD_GOSCHED ? gosched_loop : goyield_loop, 2 * n_sched};
        *ns = run_in_g(pair_driver, &pa);
        return true;
    case CMD_PINGPONG:
        pp.turn = 0;
        pp.rounds = n_pingpong;
        pp.waiting = NULL;
        pa = (struct pair_arg){player, 2 * n_pingpong};
        *ns = run_in_g(pair_driver, &pa);
        return true;
    case CMD_BARE:
        *ns = floor_run(false, n_bare);
        return true;
    case CMD_BARE_FS:
        *ns = full ? floor_run(true, n_fs) : -1;
        return true;
    default:
        return false;
    }
}

static int worker(int nprocs, int in, int out)
{
    struct sched_config c;
    sched_config_from_env(&c);
    c.nprocs = nprocs;
    int rc = sched_init(&c);
    if (rc != 0) {
        fprintf(stderr, "bench_sched: sched_init(P=%d): %s\n", nprocs, strerror(rc));
        return 2;
    }
    sched_wg_init(&main_wg);
    sched_wg_init(&inner_wg);

    bool full = tls_mode == TLS_MODE_FULL;
    floor_stack_a = malloc(FLOOR_STACK);
    floor_stack_b = malloc(FLOOR_STACK);
    fl.tcb_main = tls_self();
    fl.tcb_a = full ? tls_tcb_new() : NULL;
    fl.tcb_b = full ? tls_tcb_new() : NULL;
    if (floor_stack_a == NULL || floor_stack_b == NULL || (full && (!fl.tcb_a || !fl.tcb_b))) {
        fprintf(stderr, "bench_sched: out of memory\n");
        return 2;
    }

    /* Warm up: the first spawns allocate stacks and TCBs; the first
     * floor runs fault the stacks in. */
    run_in_g(spawn_driver, (void *)1);
    floor_run(false, 1000);
    if (full)
        floor_run(true, 10);

    struct hello h = {nprocs, tls_mode, tls_fs_method};
    if (!write_all(out, &h, sizeof h))
        return 2;

    char cmd;
    while (read_all(in, &cmd, 1)) {
        if (cmd == CMD_QUIT)
            return 0;
        double ns;
        if (!run_cmd(cmd, full, &ns))
            return 2;
        if (!write_all(out, &ns, sizeof ns))
            return 2;
    }
    return 0;
}

struct child {
    pid_t pid;
    int to, from; /* command pipe, result pipe */
    struct hello hello;
};

/* start_worker forks a worker with nprocs Ps; fs, if not NULL, is its GOSHIM_FS. */
static bool start_worker(struct child *ch, int nprocs, const char *fs)
{
    int cmd[2], res[2];
    if (pipe(cmd) != 0 || pipe(res) != 0)
        return false;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return false;
    if (pid == 0) {
        close(cmd[1]);
        close(res[0]);
        if (fs) {
            setenv("GOSHIM_FS", fs, 1);
            if (strcmp(fs, "arch_prctl") != 0)
                n_fs = scale(200000); /* no system call: many more switches in the same time */
        }
        _exit(worker(nprocs, cmd[0], res[1]));
    }
    close(cmd[0]);
    close(res[1]);
    ch->pid = pid;
    ch->to = cmd[1];
    ch->from = res[0];
    return read_all(ch->from, &ch->hello, sizeof ch->hello);
}

static double ask(struct child *ch, char cmd)
{
    double ns;
    if (!write_all(ch->to, &cmd, 1) || !read_all(ch->from, &ns, sizeof ns))
        return -1;
    return ns;
}

/* ---- statistics and output ------------------------------------------------ */

#define NFS 3 /* FS methods: wrfsbase, ldt, arch_prctl */

enum fig {
    F_NATIVE,
    F_SPAWN_PN,
    F_SPAWN_P1,
    F_GOSCHED,
    F_GOYIELD,
    F_PINGPONG,
    F_BARE,
    F_BARE_FS,
    F_COUNT
};

struct figure {
    const char *name;
    const char *what;
    long ops; /* per repetition */
    double *v;
    double med, min, max;
    bool ok;
};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void summarise(struct figure *f, int runs)
{
    f->ok = true;
    for (int i = 0; i < runs; i++)
        if (!(f->v[i] >= 0))
            f->ok = false;
    if (!f->ok)
        return;
    qsort(f->v, (size_t)runs, sizeof *f->v, cmp_double);
    f->min = f->v[0];
    f->max = f->v[runs - 1];
    f->med = runs % 2 ? f->v[runs / 2] : (f->v[runs / 2 - 1] + f->v[runs / 2]) / 2;
}

static const char *fs_method_name(int m)
{
    return m == TLS_FS_NONE ? "none (errno TLS mode)" : tls_fs_method_name(m);
}

static void ratio_row(const char *what, double r, const char *target, bool met, bool known)
{
    if (!known)
        printf("| %-44s | %10s | %-8s | %-6s |\n", what, "n/a", target, "n/a");
    else
        printf("| %-44s | %9.1fx | %-8s | %-6s |\n", what, r, target,
               strcmp(target, "-") == 0 ? "-"
               : met                    ? "met"
                                        : "missed");
}

/* ---- the run ---------------------------------------------------------------- */

static void set_sizes(void)
{
    n_native = scale(500);
    n_batches = 2;
    n_spawn = scale(5000);
    n_rounds = 4;
    n_sched = scale(10000);
    n_pingpong = scale(10000);
    n_bare = scale(2000000);
    n_fs = scale(5000);
}

/* A figure named name, described by what, with ops per repetition and room for runs values. */
static bool figure_init(struct figure *f, const char *name, const char *what, long ops, int runs)
{
    *f = (struct figure){name, what, ops, calloc((size_t)runs, sizeof(double)), 0, 0, 0, false};
    return f->v != NULL;
}

/* The figures of the P = usable CPUs and P = 1 workers and of native threads. */
static bool figures_init(struct figure fig[F_COUNT], int ncpu, int runs)
{
    static char spawn_name[32], spawn_what[48];
    snprintf(spawn_name, sizeof spawn_name, "spawn_complete_p%d", ncpu);
    snprintf(spawn_what, sizeof spawn_what, "G spawn+complete, P=%d", ncpu);
    return figure_init(&fig[F_NATIVE], "pthread_create_join",
                       "native pthread_create+join, per thread", n_native * n_batches, runs) &&
           figure_init(&fig[F_SPAWN_PN], spawn_name, spawn_what, n_rounds * n_spawn, runs) &&
           figure_init(&fig[F_SPAWN_P1], "spawn_complete_p1", "G spawn+complete, P=1",
                       n_rounds * n_spawn, runs) &&
           figure_init(&fig[F_GOSCHED], "gosched_p1", "Gosched, one G-to-G switch, P=1",
                       2 * n_sched, runs) &&
           figure_init(&fig[F_GOYIELD], "goyield_p1", "goyield, one G-to-G switch, P=1",
                       2 * n_sched, runs) &&
           figure_init(&fig[F_PINGPONG], "park_ready_p1", "park/ready ping-pong, per handoff, P=1",
                       2 * n_pingpong, runs) &&
           figure_init(&fig[F_BARE], "switch_floor", "floor: registers+SP, one-way", 2 * n_bare,
                       runs) &&
           figure_init(&fig[F_BARE_FS], "switch_fs_floor", "floor: registers+SP+FS base, one-way",
                       2 * n_fs, runs);
}

/*
 * One more P=1 worker per FS method (issue 15), forced with GOSHIM_FS:
 * wrfsbase only where the kernel allows it. Each gives Gosched and the
 * registers+FS floor. ok: the worker runs with that method.
 */
struct fs_row {
    struct child w;
    struct figure g, f; /* Gosched, floor */
    bool ok;
    char gname[40], gwhat[56], fname[40], fwhat[56];
};

static const char *const fs_names[NFS] = {"wrfsbase", "ldt", "arch_prctl"};
static const int fs_ids[NFS] = {TLS_FS_WRFSBASE, TLS_FS_LDT, TLS_FS_ARCH_PRCTL};

static bool fs_rows_start(struct fs_row rows[NFS], int runs)
{
    for (int k = 0; k < NFS; k++) {
        struct fs_row *m = &rows[k];
        m->ok = start_worker(&m->w, 1, fs_names[k]) && m->w.hello.tls_mode == TLS_MODE_FULL &&
                m->w.hello.fs_method == fs_ids[k];
        snprintf(m->gname, sizeof m->gname, "gosched_p1_%s", fs_names[k]);
        snprintf(m->gwhat, sizeof m->gwhat, "Gosched, P=1, GOSHIM_FS=%s", fs_names[k]);
        snprintf(m->fname, sizeof m->fname, "switch_fs_floor_%s", fs_names[k]);
        snprintf(m->fwhat, sizeof m->fwhat, "floor: registers+SP+FS, %s", fs_names[k]);
        if (!figure_init(&m->g, m->gname, m->gwhat, 2 * n_sched, runs) ||
            !figure_init(&m->f, m->fname, m->fwhat, 2 * (k == NFS - 1 ? n_fs : scale(200000)),
                         runs))
            return false;
    }
    return true;
}

/* Repetition r: every figure once, in turn, so noise falls on all alike. */
static void measure_once(int r, struct figure fig[F_COUNT], struct child *wn, struct child *w1,
                         bool fs_floor, struct fs_row rows[NFS])
{
    fig[F_NATIVE].v[r] = native_create_join();
    fig[F_SPAWN_PN].v[r] = ask(wn, CMD_SPAWN);
    fig[F_SPAWN_P1].v[r] = ask(w1, CMD_SPAWN);
    fig[F_GOSCHED].v[r] = ask(w1, CMD_GOSCHED);
    fig[F_GOYIELD].v[r] = ask(w1, CMD_GOYIELD);
    fig[F_PINGPONG].v[r] = ask(w1, CMD_PINGPONG);
    fig[F_BARE].v[r] = ask(w1, CMD_BARE);
    fig[F_BARE_FS].v[r] = fs_floor ? ask(w1, CMD_BARE_FS) : 0;
    for (int k = 0; k < NFS; k++)
        if (rows[k].ok) {
            rows[k].g.v[r] = ask(&rows[k].w, CMD_GOSCHED);
            rows[k].f.v[r] = ask(&rows[k].w, CMD_BARE_FS);
        }
}

/* Tells every worker to quit and reaps it; 1 if one ended badly. */
static int stop_workers(struct child *wn, struct child *w1, struct fs_row rows[NFS])
{
    char q = CMD_QUIT;
    int status = 0;
    struct child *ws[2 + NFS] = {wn, w1};
    int nw = 2;
    for (int k = 0; k < NFS; k++)
        if (rows[k].w.pid > 0)
            ws[nw++] = &rows[k].w;
    for (int i = 0; i < nw; i++) {
        int st;
        write_all(ws[i]->to, &q, 1);
        close(ws[i]->to);
        if (waitpid(ws[i]->pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "bench_sched: worker P=%d ended badly (status %#x)\n",
                    ws[i]->hello.nprocs, st);
            status = 1;
        }
    }
    return status;
}

/* The "bench_<name>:" lines and the table of medians; 1 if a figure failed. */
static int print_figures(struct figure fig[F_COUNT], int runs, bool fs_floor)
{
    int status = 0;
    for (int f = 0; f < F_COUNT; f++) {
        if (f == F_BARE_FS && !fs_floor) {
            printf("bench_%s: skipped, TLS is in errno mode (no per-G TCBs)\n", fig[f].name);
            continue;
        }
        summarise(&fig[f], runs);
        if (!fig[f].ok) {
            printf("bench_%s: FAILED\n", fig[f].name);
            status = 1;
            continue;
        }
        printf("bench_%s: %ld ops, %.1f ns/op (min %.1f, max %.1f)\n", fig[f].name, fig[f].ops,
               fig[f].med, fig[f].min, fig[f].max);
    }

    printf("\n| %-44s | %10s |\n", "figure (median)", "ns/op");
    printf("|%s|%s|\n", "----------------------------------------------", "-----------:");
    for (int f = 0; f < F_COUNT; f++)
        if (fig[f].ok && (f != F_BARE_FS || fs_floor))
            printf("| %-44s | %10.1f |\n", fig[f].what, fig[f].med);
    return status;
}

/* The ratios issue 2 asks for (figures summarised by print_figures). */
static void print_ratios(struct figure fig[F_COUNT], bool fs_floor)
{
    printf("\n| %-44s | %10s | %-8s | %-6s |\n", "ratio (same run, medians)", "value", "target",
           "result");
    printf("|%s|%s|%s|%s|\n", "----------------------------------------------",
           "-----------:", "----------", "--------");
    char what[64];
    for (int f = F_SPAWN_PN; f <= F_SPAWN_P1; f++) {
        bool known = fig[F_NATIVE].ok && fig[f].ok && fig[f].med > 0;
        double r = known ? fig[F_NATIVE].med / fig[f].med : 0;
        snprintf(what, sizeof what, "native create+join / %s", fig[f].what);
        ratio_row(what, r, ">= 100x", r >= 100, known);
    }
    bool fs_known = fs_floor && fig[F_BARE_FS].ok && fig[F_BARE_FS].med > 0;
    double rg = fs_known && fig[F_GOSCHED].ok ? fig[F_GOSCHED].med / fig[F_BARE_FS].med : 0;
    ratio_row("Gosched / (registers+FS floor)", rg, "<= 3x", rg <= 3,
              fs_known && fig[F_GOSCHED].ok);
    double ry = fs_known && fig[F_GOYIELD].ok ? fig[F_GOYIELD].med / fig[F_BARE_FS].med : 0;
    ratio_row("goyield / (registers+FS floor) (info)", ry, "-", true,
              fs_known && fig[F_GOYIELD].ok);
    double rp = fs_known && fig[F_PINGPONG].ok ? fig[F_PINGPONG].med / fig[F_BARE_FS].med : 0;
    ratio_row("park/ready / (registers+FS floor) (info)", rp, "-", true,
              fs_known && fig[F_PINGPONG].ok);
    printf("(targets from issue 2, informational; Go's Gosched is ~8x its floor)\n");
}

/* Issue 15: every FS method in the same run. Returns 1 if a figure failed. */
static int print_fs_rows(struct fs_row rows[NFS], int runs)
{
    int status = 0;
    printf("\n| %-44s | %10s |\n", "per FS method (median)", "ns/op");
    printf("|%s|%s|\n", "----------------------------------------------", "-----------:");
    for (int k = 0; k < NFS; k++) {
        struct fs_row *m = &rows[k];
        if (!m->ok) {
            printf("| %-44s | %10s |\n", m->gwhat,
                   k == 0 ? "n/a (the kernel has no FSGSBASE)" : "n/a");
            continue;
        }
        summarise(&m->g, runs);
        summarise(&m->f, runs);
        printf("| %-44s | %10.1f |\n", m->g.what, m->g.ok ? m->g.med : -1);
        printf("| %-44s | %10.1f |\n", m->f.what, m->f.ok ? m->f.med : -1);
    }
    for (int k = 0; k < NFS; k++)
        if (rows[k].ok)
            for (int i = 0; i < 2; i++) {
                struct figure *f = i ? &rows[k].f : &rows[k].g;
                if (f->ok)
                    printf("bench_%s: %ld ops, %.1f ns/op (min %.1f, max %.1f)\n", f->name, f->ops,
                           f->med, f->min, f->max);
                else
                    status = 1;
            }
    bool lk = rows[0].ok && rows[1].ok && rows[0].g.ok && rows[1].g.ok && rows[0].g.med > 0;
    double rl = lk ? rows[1].g.med / rows[0].g.med : 0;
    printf("\n");
    ratio_row("Gosched ldt / wrfsbase (same run)", rl, "<= 1.5x", rl <= 1.5, lk);
    printf("(target from issue 15, informational)\n");
    return status;
}

int main(void)
{
    int runs = env_runs();
    int ncpu = sched_usable_cpus();
    if (ncpu < 1)
        ncpu = 1;
    set_sizes();

    /* Workers first, while this process has one thread. */
    struct child wn, w1;
    if (!start_worker(&wn, ncpu, NULL) || !start_worker(&w1, 1, NULL)) {
        fprintf(stderr, "bench_sched: a worker failed to start\n");
        return 1;
    }
    static struct fs_row rows[NFS];
    struct figure fig[F_COUNT];
    if (!fs_rows_start(rows, runs) || !figures_init(fig, ncpu, runs))
        return 1;

    bool fs_floor = w1.hello.tls_mode == TLS_MODE_FULL;
    for (int r = 0; r < runs; r++)
        measure_once(r, fig, &wn, &w1, fs_floor, rows);
    int status = stop_workers(&wn, &w1, rows);

    printf("bench_sched: %d repetitions (median, min, max); %d usable CPUs; "
           "FS base written with %s (tls_fs_method=%d)\n",
           runs, ncpu, fs_method_name(w1.hello.fs_method), w1.hello.fs_method);
    status |= print_figures(fig, runs, fs_floor);
    print_ratios(fig, fs_floor);
    status |= print_fs_rows(rows, runs);
    return status;
}
