/*
 * Public interface of libgoshim.so: the goshim_* helpers a program may call
 * when it knows it runs under goshim. Everything else the library exports is
 * an interposed libc/pthread name.
 */
#ifndef GOSHIM_H
#define GOSHIM_H

#ifndef GOSHIM_EXPORT
#define GOSHIM_EXPORT __attribute__((visibility("default")))
#endif

/* goshim_version returns the library version, e.g. "0.0.1". */
GOSHIM_EXPORT const char *goshim_version(void);

#endif
