#!/usr/bin/env bash
# Compare the dynamic symbols libgoshim.so defines with the global: names of
# preload/exports.map, and the names the objects define with GOSHIM_EXPORT
# (default visibility; everything else is built -fvisibility=hidden) with the
# map. Prints every difference; exits 1 if the library exports a name the map
# does not list, misses a name the map lists, or an object exports a name the
# map does not list (the link's `local: *` would silently keep such a wrapper
# from interposing anything).
#   usage: scripts/check-exports.sh [build/libgoshim.so] [preload/exports.map] [OBJECT...]
# The objects default to the library's own: build/{preload,shim,sched}/*.o.
# Map entries may be glob patterns (goshim_*); a pattern must match at least one export.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
lib=${1:-$root/build/libgoshim.so}
map=${2:-$root/preload/exports.map}
shift $(($# < 2 ? $# : 2))
if [ $# -gt 0 ]; then
    objs=("$@")
else
    objs=()
    for d in preload shim sched; do
        for o in "$(dirname "$lib")/$d"/*.o; do [ -f "$o" ] && objs+=("$o"); done
    done
fi

[ -f "$lib" ] || { echo "check-exports: $lib not found (run make)" >&2; exit 1; }
[ -f "$map" ] || { echo "check-exports: $map not found" >&2; exit 1; }

# Names in global: sections of the version script (comments stripped).
mapfile -t wanted < <(
    awk '{ text = text $0 "\n" }
         END {
             gsub(/\/\*([^*]|\*+[^*\/])*\*+\//, " ", text)  # /* comments */
             gsub(/[{};:]/, " & ", text)
             n = split(text, t, /[ \t\n]+/)
             g = 0
             for (i = 1; i <= n; i++) {
                 if (t[i] == "" || t[i] == ";" || t[i] == ":") continue
                 if (t[i] == "{") { g = 1; continue }        # names before a label are global
                 if (t[i] == "}") { g = 0; continue }        # node name / parent after }
                 if (t[i + 1] == ":") { g = (t[i] == "global"); continue }
                 if (g) print t[i]
             }
         }' "$map" | sort -u
)

# Defined dynamic symbols (code, data, bss, weak, unique, indirect); version
# node names (type A) are not symbols.
mapfile -t have < <(
    nm -D --defined-only "$lib" |
        awk 'NF >= 3 && $2 ~ /^[TtWwDdBbVvRrGgSsiu]$/ { sub(/@.*/, "", $3); print $3 }' |
        sort -u
)

# Global and weak definitions of default visibility in the objects, with the file.
mapfile -t exported < <(
    for o in "${objs[@]}"; do
        readelf -sW "$o" |
            awk -v f="$(basename "$o")" '$5 ~ /^(GLOBAL|WEAK)$/ && $6 == "DEFAULT" && $7 != "UND" {
                sub(/@.*/, "", $8); print $8 " " f }'
    done | sort -u
)
if [ ${#objs[@]} -eq 0 ]; then
    echo "check-exports: no objects beside $lib (run make)" >&2
    exit 1
fi

status=0
for entry in "${exported[@]}"; do
    sym=${entry%% *}
    ok=0
    for pat in "${wanted[@]}"; do
        # shellcheck disable=SC2053 # pattern match on purpose
        if [[ $sym == $pat ]]; then ok=1; break; fi
    done
    if [ $ok -eq 0 ]; then
        echo "check-exports: ${entry#* } exports '$sym' (GOSHIM_EXPORT), which $map does not list:" \
            "the library keeps it local, so it interposes nothing" >&2
        status=1
    fi
done
for sym in "${have[@]}"; do
    ok=0
    for pat in "${wanted[@]}"; do
        # shellcheck disable=SC2053 # pattern match on purpose
        if [[ $sym == $pat ]]; then ok=1; break; fi
    done
    if [ $ok -eq 0 ]; then
        echo "check-exports: $lib exports '$sym', which $map does not list" >&2
        status=1
    fi
done
for pat in "${wanted[@]}"; do
    found=0
    for sym in "${have[@]}"; do
        # shellcheck disable=SC2053
        if [[ $sym == $pat ]]; then found=1; break; fi
    done
    if [ $found -eq 0 ]; then
        echo "check-exports: $map lists '$pat', which $lib does not export" >&2
        status=1
    fi
done
exit $status
