/*
 * Start-up check for programs goshim cannot run (detect.c): a Go runtime,
 * or an object that imports clone/clone3.
 */
#ifndef GOSHIM_PRELOAD_DETECT_H
#define GOSHIM_PRELOAD_DETECT_H

#include <stdbool.h>
#include <stddef.h>

/* True, with the reason in why (a phrase naming the object), if goshim must stay off. */
bool goshim_unsupported(char *why, size_t len);

#endif
