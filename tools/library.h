/*
 * Finding what the launcher runs (tools/library.c): libgoshim.so, and
 * commands on $PATH.
 */
#ifndef GOSHIM_TOOLS_LIBRARY_H
#define GOSHIM_TOOLS_LIBRARY_H

#include <stdbool.h>

/* The absolute path of libgoshim.so (malloc'd), or exit 2 saying where it looked. */
char *find_library(const char *who);
/* The LD_PRELOAD for CMD (malloc'd): the library first, then the caller's. */
char *preload_value(const char *lib);
/* Whether an executable file called name is in $PATH. */
bool find_in_path(const char *name);
/* Whether CMD can be executed (a path, or a name in $PATH); else false with errno set. */
bool find_command(const char *cmd);

#endif
