/*
 * libgoshim.so as a whole: it loads under LD_PRELOAD without changing a
 * threaded program's behaviour, and it exports exactly what
 * preload/exports.map lists.
 */
#include <criterion/criterion.h>

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
