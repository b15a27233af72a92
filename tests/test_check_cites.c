/*
 * scripts/check-layers.sh, its last part: what comments cite. A file name
 * a comment gives must name a file of the tree, a comment gives no path of
 * a build machine and cites no document outside the repository. Each test
 * builds a small tree under /tmp, runs the script on it (no build folder:
 * no symbol check) and reads its verdict: a tree that keeps the rules
 * passes, and a tree that breaks one rule once fails and names the place.
 * The real tree is checked by make test-unit itself.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"

/* Write text to path under dir, making its folders. */
static void put(const char *dir, const char *path, const char *text)
{
    char full[512];
    snprintf(full, sizeof full, "%s/%s", dir, path);
    for (char *s = strchr(full + strlen(dir) + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = '\0';
        mkdir(full, 0700);
        *s = '/';
    }
    FILE *f = fopen(full, "w");
    cr_assert_not_null(f, "%s", full);
    fputs(text, f);
    fclose(f);
}

/*
 * A tree that keeps every rule: names of files that are there, bare and as
 * paths, and the words the rules must let through (system headers,
 * placeholders, another project's files named with the project, paths and
 * documents in strings, not comments).
 */
static void good_tree(const char *dir)
{
    put(dir, "sched/api.h", "/* The contract; see proc.c and sched/proc.c. */\nint f(void);\n");
    put(dir, "sched/proc.c",
        "#include <pthread.h> /* <bits/struct_mutex.h>, glibc's allocatestack.c */\n"
        "/*\n"
        " * As glibc (nptl/pthreadP.h) and the kernel's kernel/sys.c; NAME.c,\n"
        " * DIR/out.md and x.h are placeholders; tests/*.c a glob.\n"
        " */\n"
        "static const char *p = \"/work/x /* DESIGN.md */\"; // api.h\n"
        "static const char c = '\"';                        // proc.c again\n");
    put(dir, "shim/run.S", "/* proc.c's twin: see ../sched/proc.c */\n");
    put(dir, "scripts/t.sh",
        "#!/bin/sh\n"
        "# Runs run.S; see scripts/t.sh and ${BUILD}/gone.c.\n"
        "echo \"# /tmp/a DESIGN.md\" '# STYLE.md' ${#x} $# # LTP's posixtest.h\n");
    put(dir, "tools/t.py", "# t.sh and api.h\nprint('# /home/me/gone.c')\n");
    put(dir, "Makefile", "# sched/api.h; CPython's fd_status.py\nall:\n\techo '#x'\n");
}

/* Run the check on dir; its output in out, its wait status returned. */
static int check(const char *dir, char *out, size_t len)
{
    char build[512];
    snprintf(build, sizeof build, "%s/build", dir);
    char *const argv[] = {TEST_SCRIPTS_DIR "/check-layers.sh", (char *)dir, build, NULL};
    return run_exec(argv[0], argv, NULL, NULL, out, len);
}

static void remove_tree(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

Test(check_cites, a_tree_that_keeps_the_rules_passes, .timeout = 60)
{
    char dir[] = "/tmp/goshim-cites-XXXXXX", out[8192];
    cr_assert_not_null(mkdtemp(dir));
    good_tree(dir);
    int st = check(dir, out, sizeof out);
    remove_tree(dir);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %#x, output:\n%s", st, out);
}

/* One breach: the file it is put in, its text, and what the report must say. */
struct breach {
    const char *path, *text, *want;
};

static const struct breach breaches[] = {
    /* a file name that is nowhere in the tree */
    {"sched/gone.c", "int x;\n/* see sigaction.c */\n", "sched/gone.c:2: cites sigaction.c,"},
    {"shim/w.h", "/*\n * X\n * moved: tests/proc.c\n */\n", "shim/w.h:3: cites tests/proc.c,"},
    {"preload/p.c", "int y; // glibc's sched/nowhere.c\n", "preload/p.c:1: cites sched/nowhere.c,"},
    {"tests/t.c", "/* docs/design-notes.md */\n", "tests/t.c:1: cites docs/design-notes.md,"},
    {"scripts/s.sh", "x=1 # then old.sh\n", "scripts/s.sh:1: cites old.sh,"},
    {"tools/g.py", "# gone_helper.py\n", "tools/g.py:1: cites gone_helper.py,"},
    {"Makefile", "all:\n# rules.mk\n", "Makefile:2: cites rules.mk,"},
    /* a path of a build machine */
    {"sched/b.c", "/* built in /work/goshim */\n",
     "sched/b.c:1: a path of a build machine (/work/"},
    {"tools/m.mk", "# out: /home/me/x\n", "tools/m.mk:1: a path of a build machine (/home/"},
    {"tests/b.S", "/*\n\n   /tmp/x.log */\n", "tests/b.S:3: a path of a build machine (/tmp/"},
    /* a document outside the repository */
    {"shim/d.c", "/* (DESIGN rule 5) */\n", "shim/d.c:1: cites DESIGN,"},
    {"sched/f.h", "/* TCB_FACTS pitfall 5 */\n", "sched/f.h:1: cites TCB_FACTS,"},
    {"scripts/st.sh", "# see STYLE.md\n", "scripts/st.sh:1: cites STYLE.md,"},
    {"tools/pa.c", "// PRIOR_ART.md\n", "tools/pa.c:1: cites PRIOR_ART,"},
};

/* Each breach alone, in an otherwise good tree: the check fails and names it. */
Test(check_cites, every_breach_fails_the_check_and_is_named, .timeout = 120)
{
    for (size_t i = 0; i < sizeof breaches / sizeof *breaches; i++) {
        const struct breach *b = &breaches[i];
        char dir[] = "/tmp/goshim-cites-XXXXXX", out[8192];
        cr_assert_not_null(mkdtemp(dir));
        good_tree(dir);
        put(dir, b->path, b->text);
        int st = check(dir, out, sizeof out);
        remove_tree(dir);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1, "%s: status %#x, output:\n%s", b->path, st,
                  out);
        cr_assert(strstr(out, b->want) != NULL, "missing \"%s\" in:\n%s", b->want, out);
    }
}
