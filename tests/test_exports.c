/*
 * libgoshim.so as a whole: it loads under LD_PRELOAD without changing a
 * threaded program's behaviour, and it exports exactly what
 * preload/exports.map lists. And the two checks of the tree that make test-unit
 * runs, check-exports.sh and check-layers.sh, catch what they are for.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"

Test(exports, prog_hello_same_under_preload, .timeout = 60)
{
    char native[4096], preloaded[4096];
    int st;

    st = run_native("prog_hello", NULL, NULL, native, sizeof native);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "native prog_hello: status %#x, output:\n%s",
              st, native);
    st = run_preloaded("prog_hello", NULL, NULL, preloaded, sizeof preloaded);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "preloaded prog_hello: status %#x, output:\n%s", st, preloaded);

    cr_assert_eq(sort_lines(native), 5, "native output:\n%s", native);
    sort_lines(preloaded);
    cr_assert_str_eq(preloaded, native);
}

Test(exports, check_exports_script_passes, .timeout = 60)
{
    char out[4096];
    char *const argv[] = {TEST_SCRIPTS_DIR "/check-exports.sh", TEST_LIBGOSHIM, NULL};
    int st;

    st = run_exec(argv[0], argv, NULL, NULL, out, sizeof out);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "check-exports.sh: status %#x, output:\n%s",
              st, out);
}

/* The check must catch the mistake it is for: a wrapper defined with
 * GOSHIM_EXPORT but left out of the map is linked local and interposes
 * nothing, while the library and the map still agree. An object with
 * such a definition, compiled here, must make the script fail and name it. */
Test(exports, check_exports_script_catches_an_export_missing_from_the_map, .timeout = 60)
{
    char dir[] = "/tmp/goshim-exports-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char src[64], obj[64], out[4096];
    snprintf(src, sizeof src, "%s/probe.c", dir);
    snprintf(obj, sizeof obj, "%s/probe.o", dir);
    FILE *f = fopen(src, "w");
    cr_assert_not_null(f);
    fputs(
        "__attribute__((visibility(\"default\"))) int unlisted_export_probe(void) { return 1; }\n",
        f);
    fclose(f);
    char *const cc[] = {"cc", "-c", "-fvisibility=hidden", src, "-o", obj, NULL};
    int st = run_exec("/usr/bin/cc", cc, NULL, NULL, out, sizeof out);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "cc: status %#x, output:\n%s", st, out);
    char *const argv[] = {TEST_SCRIPTS_DIR "/check-exports.sh", TEST_LIBGOSHIM,
                          GOSHIM_SRC_DIR "/preload/exports.map", obj, NULL};
    st = run_exec(argv[0], argv, NULL, NULL, out, sizeof out);
    unlink(obj);
    unlink(src);
    rmdir(dir);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1,
              "check-exports.sh must fail on an unlisted export: status %#x, output:\n%s", st, out);
    cr_assert(strstr(out, "unlisted_export_probe") != NULL, "it names the symbol:\n%s", out);
}

/* ---- scripts/check-layers.sh: the layering and size rules ---------------- */

/* Write path (under dir, its folder made) with text, then n filler lines. */
static void fixture_file(const char *dir, const char *path, const char *text, int n)
{
    char full[256], sub[256];
    snprintf(full, sizeof full, "%s/%s", dir, path);
    snprintf(sub, sizeof sub, "%s/%.*s", dir, (int)(strchr(path, '/') - path), path);
    mkdir(sub, 0700);
    FILE *f = fopen(full, "w");
    cr_assert_not_null(f, "%s", full);
    fputs(text, f);
    for (int i = 0; i < n; i++)
        fputs("    x++;\n", f);
    if (n)
        fputs("}\n", f);
    fclose(f);
}

static int run_check_layers(const char *dir, char *out, size_t len)
{
    char build[256];
    snprintf(build, sizeof build, "%s/build", dir); /* none: no symbol check */
    char *const argv[] = {TEST_SCRIPTS_DIR "/check-layers.sh", (char *)dir, build, NULL};
    return run_exec(argv[0], argv, NULL, NULL, out, len);
}

static void remove_tree(const char *dir)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

/* A tree that keeps every rule passes: an include of the public header, a
 * function of 80 lines, a file of 800. */
Test(exports, check_layers_passes_a_tree_that_keeps_the_rules, .timeout = 60)
{
    char dir[] = "/tmp/goshim-layers-XXXXXX", out[8192];
    cr_assert_not_null(mkdtemp(dir));
    fixture_file(dir, "sched/api.h", "int f(void);\n", 0);
    fixture_file(dir, "shim/ok.c", "#include \"sched/api.h\"\nint g(int x)\n{\n", 77);
    fixture_file(dir, "tests/long.c", "int h;\n", 798);
    int st = run_check_layers(dir, out, sizeof out);
    remove_tree(dir);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %#x, output:\n%s", st, out);
}

/* Each kind of breach fails the check and is named with its place. */
Test(exports, check_layers_names_every_breach, .timeout = 60)
{
    char dir[] = "/tmp/goshim-layers-XXXXXX", out[8192];
    cr_assert_not_null(mkdtemp(dir));
    fixture_file(dir, "sched/up.c", "#include \"shim/shim.h\"\n", 0);
    fixture_file(dir, "shim/deep.c", "#include \"sched/runtime.h\"\n#include \"preload/x.h\"\n", 0);
    fixture_file(dir, "sched/fn.c", "int g(int x)\n{\n", 78);
    fixture_file(dir, "tests/big.c", "int h;\n", 800);
    int st = run_check_layers(dir, out, sizeof out);
    remove_tree(dir);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %#x, output:\n%s", st, out);
    const char *want[] = {"sched/up.c:1:",
                          "must not include the layers above",
                          "shim/deep.c:1:",
                          "only sched/api.h",
                          "shim/deep.c:2:",
                          "shim/ must not include preload/",
                          "sched/fn.c:1: g is 81 lines",
                          "tests/big.c: 802 lines"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        cr_assert(strstr(out, want[i]) != NULL, "missing \"%s\" in:\n%s", want[i], out);
}

#ifdef __SANITIZE_THREAD__
/*
 * Not a test: makes Criterion start under TSan (SAN=thread builds only).
 * Criterion's sandbox library, BoxFort, maps its shared arena at
 * 0x2000_0000_0000 + (rand_r() & 0x3fffff) * 16 MiB, and TSan reserves almost
 * all of that range, so the runner aborts with "Could not initialize
 * inheritable arena" (Snaipe/Criterion#274). Nothing else in the unit binary
 * calls rand_r, so this definition steers BoxFort into TSan's application
 * range for PIE binaries, 0x5500_0000_0000-0x5680_0000_0000.
 */
__attribute__((visibility("default"))) int rand_r(unsigned int *seed)
{
    *seed = *seed * 1103515245u + 12345u;
    return (int)(0x350000u + (*seed >> 8) % 0x17000u);
}
#endif
