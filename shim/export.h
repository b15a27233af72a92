/*
 * GOSHIM_EXPORT marks a definition the library exports: an interposed
 * libc or pthread name, or a goshim_* helper (everything else is built
 * -fvisibility=hidden). Each must also be listed in preload/exports.map,
 * whose `local: *` keeps anything unlisted out of the dynamic symbol
 * table (scripts/check-exports.sh catches the omission).
 */
#ifndef GOSHIM_EXPORT_H
#define GOSHIM_EXPORT_H

#ifndef GOSHIM_EXPORT
#define GOSHIM_EXPORT __attribute__((visibility("default")))
#endif

#endif
