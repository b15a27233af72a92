/*
 * Which text is whose: the address ranges of the executable code of every
 * loaded object, and of the application's own (every object but the C
 * and C++ runtimes, the loader, the unwinders, the sanitizers and goshim).
 * Async preemption (preempt.c) stops a G only at a PC, and above frames,
 * that lie in application text: code there makes no assumption that a
 * signal-time switch could break, unlike libc's locks and stdio buffers.
 *
 * The tables are built from dl_iterate_phdr at start-up and after every
 * dlopen/dlclose (apptext_refresh), never in a signal handler, and are
 * published whole with one atomic store: a handler reads either the old
 * or the new table, each immutable (old ones are never freed, since a
 * handler may still read one; a program that dlopens in a loop leaks
 * 16 KiB per call). Text loaded since the last refresh is in neither
 * table, so it is refused, which is safe.
 */
#ifndef GOSHIM_APPTEXT_H
#define GOSHIM_APPTEXT_H

#include <stdbool.h>
#include <stdint.h>

struct ranges;

/* Rebuild both tables (on allocation failure the old ones stay). */
void apptext_refresh(void);

/* The current tables: the application's text, every loaded object's. */
const struct ranges *apptext_app(void);
const struct ranges *apptext_loaded(void);
/* Whether pc lies in one of t's ranges (t may be NULL: none). */
bool ranges_has(const struct ranges *t, uintptr_t pc);
/* Whether pc lies in libc's text (the main G's outermost frames). */
bool apptext_in_libc(uintptr_t pc);

#endif
