/*
 * Start-up of libgoshim.so.
 *
 * The constructor will adopt the main thread as M0 and the main G, read the
 * GOSHIM_* configuration and start the runtime. Until that lands it does
 * nothing, so the library loads under LD_PRELOAD without changing the
 * behaviour of the program.
 */
#include "preload/goshim.h"

#ifndef GOSHIM_VERSION
#define GOSHIM_VERSION "0.0.0-dev"
#endif

__attribute__((constructor)) static void goshim_init(void)
{
}

GOSHIM_EXPORT const char *goshim_version(void)
{
    return GOSHIM_VERSION;
}
