/*
 * libgoshim.so as a whole: it loads under LD_PRELOAD without changing a
 * threaded program's behaviour, and it exports exactly what
 * preload/exports.map lists.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
