/*
 * The gdb helper (tools/goshim-gdb.py), with gdb in batch mode: attached to
 * tests/progs/prog_gdb_parked under libgoshim.so (50 threads parked on a
 * mutex, a condition variable, a pipe read and a sleep), `info goshim` must
 * list every one with the deadlock report's wait description, and
 * `goshim bt` must unwind each from its saved context into the program's
 * own functions; then the same from a core file, written by
 * `goshim gcore` (and what a plain gcore keeps: the list, not the stacks);
 * and in a program started under gdb and stopped at a breakpoint, where
 * one thread is running and the others are parked.
 *
 * gdb attaches with ptrace: where Yama or the container forbids it the
 * tests skip, saying why. The suite is named preload_* so that sanitizer
 * builds leave it out, like the other suites that preload the library.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/preload_helpers.h"

#define HELPER GOSHIM_SRC_DIR "/tools/goshim-gdb.py"
#define GDB    "/usr/bin/gdb"

static char out[1 << 18];

/* The parked program: its pid, and the write end of its stdin (closing it ends the program). */
struct parked {
    pid_t pid;
    int in;
    FILE *out;
};

static void require_gdb_and_ptrace(void)
{
    cr_assert(access(GDB, X_OK) == 0,
              "gdb is missing: apt-get install gdb (scripts/setup.sh installs it)");
    FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
    int scope = 0;
    if (f) {
        if (fscanf(f, "%d", &scope) != 1)
            scope = 0;
        fclose(f);
    }
    if (scope == 3)
        cr_skip_test("kernel.yama.ptrace_scope is 3: no process may attach with ptrace");
    if (scope >= 1 && geteuid() != 0)
        cr_skip_test("kernel.yama.ptrace_scope is %d and we are not root: gdb cannot attach to "
                     "a process it did not start (sysctl kernel.yama.ptrace_scope=0 allows it)",
                     scope);
}

/* Start prog_gdb_parked under goshim (in dir, with core dumps on, if not NULL) and wait
 * for its "ready 50". */
static void start_parked_in(struct parked *p, const char *dir)
{
    int in[2], o[2];
    char path[4096], line[64];

    cr_assert(pipe(in) == 0 && pipe(o) == 0);
    test_prog_path("prog_gdb_parked", path, sizeof path);
    fflush(NULL);
    p->pid = fork();
    cr_assert_geq(p->pid, 0);
    if (p->pid == 0) {
        dup2(in[0], 0);
        dup2(o[1], 1);
        close(in[1]);
        close(o[0]);
        setenv("LD_PRELOAD", test_preload_value(), 1);
        setenv("GOSHIM_STACK", "256k", 1); /* smaller core files */
        if (dir) {
            struct rlimit rl = {RLIM_INFINITY, RLIM_INFINITY};
            if (chdir(dir) != 0 || setrlimit(RLIMIT_CORE, &rl) != 0)
                _exit(126);
        }
        execl(path, path, (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(o[1]);
    p->in = in[1];
    p->out = fdopen(o[0], "r");
    cr_assert(p->out && fgets(line, sizeof line, p->out), "prog_gdb_parked printed nothing");
    cr_assert_str_eq(line, "ready 50\n");
}

static void start_parked(struct parked *p)
{
    start_parked_in(p, NULL);
}

static void stop_parked(struct parked *p)
{
    int st;
    char line[64];
    close(p->in);
    cr_assert(fgets(line, sizeof line, p->out) && !strcmp(line, "bye\n"),
              "prog_gdb_parked did not go on after gdb detached");
    fclose(p->out);
    cr_assert_eq(waitpid(p->pid, &st, 0), p->pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "prog_gdb_parked: status %#x", st);
}

/* gdb -batch with the helper and the given commands, on pid (or on prog + core); its output. */
static void gdb_run(pid_t pid, const char *core, const char *const *cmds)
{
    char *argv[32], pidbuf[16], prog[4096];
    int n = 0;

    argv[n++] = GDB;
    argv[n++] = "-batch";
    argv[n++] = "-nx";
    if (core) {
        argv[n++] = (char *)test_prog_path("prog_gdb_parked", prog, sizeof prog);
        argv[n++] = (char *)core;
    } else {
        snprintf(pidbuf, sizeof pidbuf, "%d", (int)pid);
        argv[n++] = "-p";
        argv[n++] = pidbuf;
    }
    argv[n++] = "-x";
    argv[n++] = HELPER;
    for (; *cmds && n < 30; cmds++) {
        argv[n++] = "-ex";
        argv[n++] = (char *)*cmds;
    }
    argv[n] = NULL;
    int st = run_exec(GDB, argv, NULL, NULL, out, sizeof out);
    if (!core && (strstr(out, "ptrace: Operation not permitted") ||
                  strstr(out, "Could not attach to process")))
        cr_skip_test("gdb cannot attach here (ptrace refused, e.g. by a container's seccomp "
                     "policy):\n%s",
                     out);
    cr_assert(WIFEXITED(st), "gdb: status %#x\n%s", st, out);
    cr_assert_null(strstr(out, "Python Exception"), "the helper failed:\n%s", out);
}

/* Lines of text that contain both a and b (b may be NULL) and end with tail. */
static int count_lines_with(const char *text, const char *a, const char *b, const char *tail)
{
    int n = 0;
    for (const char *l = text; *l;) {
        const char *nl = strchr(l, '\n');
        size_t len = nl ? (size_t)(nl - l) : strlen(l), tl = strlen(tail);
        char line[512];
        snprintf(line, sizeof line, "%.*s", (int)len, l);
        n += strstr(line, a) && (!b || strstr(line, b)) && len >= tl &&
             !strcmp(line + len - tl, tail);
        l += len + (nl != NULL);
    }
    return n;
}

/* Every parked thread listed with its wait, as the deadlock report words it; named:
 * with its name (a thread's record lives in its stack block, which only the
 * goshim gcore core and a live process have). */
static bool listed_as(const char *text, bool named)
{
    return count_lines_with(text, "thread 1 (main) [I/O", NULL, "]") == 1 &&
           count_lines_with(text, named ? " \"mutex-" : " [mutex 0x", "[mutex 0x",
                            ", held by thread 1 (main)]") == 15 &&
           count_lines_with(text, named ? " \"cond-" : " [condition", "[condition variable 0x",
                            "]") == 15 &&
           count_lines_with(text, named ? " \"pipe-" : " [I/O on", "[I/O on fd ", "]") == 10 &&
           count_lines_with(text, named ? " \"sleep-" : " [sleep", "[sleep", "]") == 10;
}

static bool all_listed(const char *text)
{
    return listed_as(text, true);
}

/* `goshim bt all`: each kind's threads unwound into their own function of the program. */
static void assert_backtraces(const char *text)
{
    static const struct {
        const char *fn;
        int n;
    } want[] = {{" park_on_mutex () at ", 15},
                {" park_on_cond () at ", 15},
                {" park_on_pipe () at ", 10},
                {" park_in_sleep () at ", 10},
                {" main () at ", 1}};
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        int n = 0;
        for (const char *p = text; (p = strstr(p, want[k].fn)); p++)
            n++;
        cr_assert_eq(n, want[k].n, "%d frames of%s, want %d:\n%s", n, want[k].fn, want[k].n, text);
    }
    cr_assert_eq(count_lines_with(text, "thread ", " [", "]:"), 51, "%s", text);
}

/* The number of the first "cond-" thread in an info goshim listing. */
static int a_cond_thread(const char *text)
{
    const char *p = strstr(text, "\" [condition variable");
    cr_assert(p, "%s", text);
    while (p > text && strncmp(p, "\nthread ", 8))
        p--;
    return atoi(p + 8);
}

static const char *const list_cmds[] = {"info goshim", NULL};
static const char *const all_cmds[] = {"info goshim", "goshim bt all", NULL};

/*
 * Attached: info goshim lists 51 threads with their waits (retried while
 * a thread is still on its way to the call it parks in: "ready" comes
 * just before), and goshim bt N / bt all reach the program's functions.
 */
Test(preload_gdb, attach_lists_every_thread_and_unwinds_parked_ones, .timeout = 180)
{
    struct parked p;

    require_gdb_and_ptrace();
    start_parked(&p);
    bool listed = false;
    for (int tries = 0; tries < 20 && !listed; tries++) {
        gdb_run(p.pid, NULL, all_cmds);
        listed = all_listed(out);
    }
    cr_assert(listed, "info goshim does not list the 50 parked threads and main:\n%s", out);
    cr_assert(strstr(out, "goshim: 2 Ps, ") || strstr(out, "goshim: 1 Ps, "), "%s", out);
    cr_assert(strstr(out, "\nM0: OS thread "), "no Ms listed:\n%s", out);
    assert_backtraces(out);

    char cmd[32];
    snprintf(cmd, sizeof cmd, "goshim bt %d", a_cond_thread(out));
    const char *const one[] = {cmd, NULL};
    gdb_run(p.pid, NULL, one);
    cr_assert(strstr(out, "[condition variable 0x") && strstr(out, " park_on_cond () at "),
              "%s:\n%s", cmd, out);
    cr_assert_null(strstr(out, "park_on_mutex"), "%s shows another thread:\n%s", cmd, out);
    cr_assert(strstr(out, " pthread_cond_wait") || strstr(out, " cond_wait () at "), "%s", out);

    const char *const bad[] = {"goshim bt 99999", "goshim bt x", NULL};
    gdb_run(p.pid, NULL, bad);
    cr_assert(strstr(out, "goshim bt: no thread 99999") && strstr(out, "usage: goshim bt N"), "%s",
              out);
    stop_parked(&p);
}

/* A core file from goshim gcore: the same list and backtraces, with no process. */
/* Attach to the parked program once every thread is listed, and write a
 * core with gdb command SAVER ("goshim gcore" or "gcore") into dir/core. */
static void save_core(const char *saver, char *dir, char *core, size_t size)
{
    struct parked p;
    char cmd[160];

    require_gdb_and_ptrace();
    cr_assert(mkdtemp(dir));
    snprintf(core, size, "%s/core", dir);
    snprintf(cmd, sizeof cmd, "%s %s", saver, core);
    start_parked(&p);
    const char *const save[] = {"info goshim", cmd, NULL};
    bool listed = false;
    for (int tries = 0; tries < 20 && !listed; tries++) {
        gdb_run(p.pid, NULL, save);
        listed = all_listed(out);
    }
    cr_assert(listed, "%s", out);
    stop_parked(&p);
}

Test(preload_gdb, core_file_from_goshim_gcore, .timeout = 240)
{
    char dir[] = "/tmp/goshim-gdb-XXXXXX", core[64];

    save_core("goshim gcore", dir, core, sizeof core);
    cr_assert(strstr(out, "goshim: saved "), "%s", out);

    gdb_run(0, core, all_cmds);
    cr_assert(all_listed(out), "info goshim on the core:\n%s", out);
    assert_backtraces(out);
    unlink(core);
    rmdir(dir);
}

/* A plain gcore keeps the runtime's structures but not the stacks (nor the thread
 * records and TCBs at their tops: no names): bt says why. */
Test(preload_gdb, plain_gcore_lists_threads_and_explains_missing_stacks, .timeout = 240)
{
    char dir[] = "/tmp/goshim-gdb-XXXXXX", core[64];

    save_core("gcore", dir, core, sizeof core);

    gdb_run(0, core, list_cmds);
    cr_assert(listed_as(out, false), "info goshim on a plain gcore core:\n%s", out);
    const char *const bt[] = {"goshim bt 2", NULL};
    gdb_run(0, core, bt);
    cr_assert(strstr(out, "this core file lacks the thread stacks") ||
                  strstr(out, " park_on_mutex () at "),
              "goshim bt 2 on a plain gcore core:\n%s", out);
    unlink(core);
    rmdir(dir);
}

/* The line of prog_deadlock.c where leaks() prints "exiting" (leaks is inlined into main). */
static int exiting_line(void)
{
    FILE *f = fopen(GOSHIM_SRC_DIR "/tests/progs/prog_deadlock.c", "r");
    char line[512];
    int n = 0, in_leaks = 0;
    cr_assert(f);
    while (fgets(line, sizeof line, f)) {
        n++;
        in_leaks = in_leaks || strstr(line, "static int leaks(void)") != NULL;
        if (in_leaks && strstr(line, "printf(\"exiting\\n\");"))
            break;
    }
    fclose(f);
    cr_assert(in_leaks, "prog_deadlock.c has no leaks()");
    return n;
}

/* Started under gdb and stopped at a breakpoint in an inlined function of main(): the
 * running thread's backtrace is its OS thread's, the parked ones come from their contexts
 * (the stand-in frame is then main's, past which gdb does not unwind by default). */
Test(preload_gdb, stopped_at_a_breakpoint_under_gdb, .timeout = 120)
{
    char prog[4096], env[4200], brk[64];
    require_gdb_and_ptrace();
    test_prog_path("prog_deadlock", prog, sizeof prog);
    snprintf(env, sizeof env, "set environment LD_PRELOAD=%s", test_preload_value());
    snprintf(brk, sizeof brk, "break prog_deadlock.c:%d", exiting_line());
    char *argv[] = {GDB,
                    "-batch",
                    "-nx",
                    "-x",
                    HELPER,
                    "-ex",
                    env,
                    "-ex",
                    "set environment GOSHIM_PROCS=1",
                    "-ex",
                    brk, /* every other thread waits by then */
                    "-ex",
                    "run",
                    "-ex",
                    "info goshim",
                    "-ex",
                    "goshim bt all",
                    "-ex",
                    "show backtrace past-main",
                    "-ex",
                    "kill",
                    "--args",
                    prog,
                    "leaks",
                    NULL};
    int st = run_exec(GDB, argv, NULL, NULL, out, sizeof out);
    cr_assert(WIFEXITED(st), "gdb: status %#x\n%s", st, out);
    cr_assert_null(strstr(out, "Python Exception"), "%s", out);
    cr_assert(strstr(out, "\nthread 1 (main) [running] on M0 (OS thread "), "%s", out);
    cr_assert(strstr(out, "\nthread 2 \"left\" [mutex 0x") &&
                  strstr(out, "\nthread 3 \"right\" [mutex 0x") &&
                  strstr(out, "\nthread 4 \"joiner\" [join of thread 2]\n") &&
                  strstr(out, "\nthread 5 \"stuck\" [condition variable 0x"),
              "%s", out);
    static const char *const fns[] = {" left () at ", " right () at ", " joiner () at ",
                                      " stuck () at ", " leaks () at "};
    for (size_t k = 0; k < sizeof fns / sizeof fns[0]; k++)
        cr_assert(strstr(out, fns[k]), "no frame%s\n%s", fns[k], out);
    /* goshim bt unwinds past main() for a while: gdb's own setting is left as it was */
    cr_assert(strstr(out, "Whether backtraces should continue past \"main\" is off."), "%s", out);
}

/* A core the kernel dumps (SIGABRT) keeps the stacks: only the guard pages are left out. */
Test(preload_gdb, core_file_from_the_kernel, .timeout = 240)
{
    struct parked p;
    char dir[] = "/tmp/goshim-gdb-XXXXXX", core[128], pattern[256] = "";
    FILE *f = fopen("/proc/sys/kernel/core_pattern", "r");
    if (f) {
        if (!fgets(pattern, sizeof pattern, f))
            pattern[0] = 0;
        fclose(f);
    }
    if (strcmp(pattern, "core\n") != 0)
        cr_skip_test("kernel.core_pattern is '%.*s', not 'core': the core file would not land "
                     "in the program's directory",
                     (int)strcspn(pattern, "\n"), pattern);
    require_gdb_and_ptrace();
    cr_assert(mkdtemp(dir));
    start_parked_in(&p, dir);
    bool listed = false; /* every thread in its wait before the dump */
    for (int tries = 0; tries < 20 && !listed; tries++) {
        gdb_run(p.pid, NULL, list_cmds);
        listed = all_listed(out);
    }
    cr_assert(listed, "%s", out);
    int st;
    cr_assert_eq(kill(p.pid, SIGABRT), 0);
    cr_assert_eq(waitpid(p.pid, &st, 0), p.pid);
    close(p.in);
    fclose(p.out);
    cr_assert(WIFSIGNALED(st) && WCOREDUMP(st), "no core dumped: status %#x", st);
    snprintf(core, sizeof core, "%s/core", dir);
    if (access(core, R_OK) != 0)
        snprintf(core, sizeof core, "%s/core.%d", dir, (int)p.pid); /* kernel.core_uses_pid */
    gdb_run(0, core, all_cmds);
    cr_assert(all_listed(out), "info goshim on the kernel's core:\n%s", out);
    assert_backtraces(out);
    unlink(core);
    rmdir(dir);
}
