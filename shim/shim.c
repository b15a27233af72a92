/*
 * The state shim.h's goshim_on reads: whether the runtime has started.
 * preload/init.c's constructor sets it once the main thread is the main
 * G; until then every interposer passes through to glibc.
 */
#include "shim/shim.h"

bool goshim_started;
