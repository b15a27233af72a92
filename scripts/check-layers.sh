#!/usr/bin/env bash
# The layering and size rules of the tree (README "Layout"), checked on the
# sources and, when built, on the runtime's objects:
#   * sched/ includes nothing of shim/ or preload/; shim/ nothing of
#     preload/; shim/ and preload/ reach sched/ only through its public
#     header, sched/api.h;
#   * no object of sched/ calls a name that libgoshim.so exports (inside the
#     library such a call would bind to goshim's own wrapper);
#   * no function over 80 lines and no file over 800 lines in sched/, shim/,
#     preload/, tests/ and tools/.
# Prints every breach with its place; exits 1 if there is one.
#   usage: scripts/check-layers.sh [ROOT [BUILD]]
# ROOT defaults to the tree holding this script, BUILD to ROOT/build; the
# symbol check is skipped when BUILD has no libgoshim.so.
set -euo pipefail

root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
build=${2:-$root/build}
max_fn=80
max_file=800
status=0
breach() {
    echo "check-layers: $*" >&2
    status=1
}

cd "$root"
# The C files under the folders given that exist.
sources() {
    local d dirs=()
    for d in "$@"; do [ -d "$d" ] && dirs+=("$d"); done
    [ ${#dirs[@]} -eq 0 ] || find "${dirs[@]}" -name '*.[ch]' | sort
}

# Includes across layers.
while IFS= read -r hit; do
    breach "$hit: sched/ must not include the layers above it"
done < <(grep -Hn '#include "\(shim\|preload\)/' $(sources sched) /dev/null || true)
while IFS= read -r hit; do
    breach "$hit: shim/ must not include preload/"
done < <(grep -Hn '#include "preload/' $(sources shim) /dev/null || true)
while IFS= read -r hit; do
    breach "$hit: only sched/api.h is sched/'s public header"
done < <(grep -Hn '#include "sched/' $(sources shim preload) /dev/null | grep -v '"sched/api\.h"' || true)

# Calls from sched/ into names the library interposes.
lib=$build/libgoshim.so
if [ -f "$lib" ] && compgen -G "$build/sched/*.o" >/dev/null; then
    mapfile -t calls < <(
        comm -12 <(nm -D --defined-only "$lib" | awk 'NF >= 3 { sub(/@.*/, "", $3); print $3 }' | sort -u) \
            <(for o in "$build"/sched/*.o; do nm -u "$o" | awk '{ print $2 }'; done | sort -u)
    )
    for sym in "${calls[@]}"; do
        [ -n "$sym" ] || continue
        users=$(for o in "$build"/sched/*.o; do
            if nm -u "$o" | awk '{ print $2 }' | grep -qx "$sym"; then basename "$o"; fi
        done | tr '\n' ' ')
        breach "${users% }: sched/ calls '$sym', which libgoshim.so interposes: call glibc's through libc.c or a raw system call"
    done
fi

# Sizes.
files=$(sources sched shim preload tests tools)
for f in $files; do
    n=$(wc -l <"$f")
    [ "$n" -le $max_file ] || breach "$f: $n lines (at most $max_file: split it by concern)"
done
if ! command -v ctags >/dev/null || ! ctags --version 2>/dev/null | grep -q 'Universal Ctags'; then
    breach "universal-ctags is needed to measure functions (scripts/setup.sh installs it)"
else
    while read -r n file line name; do
        breach "$file:$line: $name is $n lines (at most $max_fn: split it into steps)"
    done < <(
        # shellcheck disable=SC2086 # one word per file on purpose
        ctags --fields=+ne --c-kinds=f --language-force=C -o - $files |
            awk -F'\t' -v max=$max_fn '{
                l = ""; e = ""
                for (i = 4; i <= NF; i++) {
                    if ($i ~ /^line:/) l = substr($i, 6)
                    if ($i ~ /^end:/) e = substr($i, 5)
                }
                if (l != "" && e != "" && e - l + 1 > max) print e - l + 1, $2, l, $1
            }'
    )
fi
exit $status
