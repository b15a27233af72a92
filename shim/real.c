/*
 * Filling the table of real functions (real.h). RTLD_NEXT finds the
 * definition after libgoshim.so in the lookup order: glibc's, or another
 * preloaded library's. Versioned symbols resolve to their default version,
 * which is what a program linked today references; older versions
 * (pthread_cond_*@GLIBC_2.2.5) are not interposed, so they reach glibc.
 */
#include <dlfcn.h>

#include "shim/real.h"
#include "sched/api.h"

struct real_syms goshim_real;

int goshim_real_init(void)
{
    static int done, missing;
    if (__atomic_load_n(&done, __ATOMIC_ACQUIRE))
        return missing;
#define REAL_SYM(name, ret, args)                                                                  \
    goshim_real.name = (ret(*) args)dlsym(RTLD_NEXT, #name);                                       \
    if (!goshim_real.name) {                                                                       \
        rt_print(2, "goshim: cannot find the real %s\n", #name);                                   \
        missing++;                                                                                 \
    }
#include "shim/real.def"
#undef REAL_SYM
    __atomic_store_n(&done, 1, __ATOMIC_RELEASE);
    return missing;
}

/* Before any other constructor of ours, and of most libraries loaded after us. */
__attribute__((constructor(101))) static void real_init_early(void)
{
    goshim_real_init();
}
