/*
 * dlopen and dlclose: preemption's table of application text is rebuilt
 * after each (sched/preempt.c).
 */
#include <dlfcn.h>

#include "shim/shim.h"

GOSHIM_EXPORT void *dlopen(const char *file, int mode)
{
    void *h = REAL(dlopen)(file, mode);
    if (h && goshim_on)
        preempt_refresh();
    return h;
}

GOSHIM_EXPORT int dlclose(void *h)
{
    int r = REAL(dlclose)(h);
    if (r == 0 && goshim_on)
        preempt_refresh();
    return r;
}
