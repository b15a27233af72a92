/*
 * The state shim.h's goshim_on reads: whether the runtime has started.
 * preload/init.c sets it once the main thread is the main G (in its
 * constructor, or at the program's first pthread_create); until then
 * every interposer passes through to glibc.
 */
#include "shim/shim.h"

bool goshim_started;
bool (*goshim_start_deferred)(void);

bool shim_start_deferred(void)
{
    bool (*start)(void) = __atomic_load_n(&goshim_start_deferred, __ATOMIC_ACQUIRE);
    return start && !goshim_vforked && start() && goshim_active();
}
