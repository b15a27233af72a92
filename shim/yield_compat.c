/*
 * pthread_yield for binaries linked before glibc 2.34 made it a header
 * redirect to sched_yield: they still call the pthread_yield symbol. This
 * file does not include <pthread.h>, whose redirect would rename the
 * definition to sched_yield.
 */
#include <sched.h>

#include "shim/export.h"

GOSHIM_EXPORT int pthread_yield(void);

int pthread_yield(void)
{
    return sched_yield(); /* the shim's sched_yield: a G yields its P */
}
