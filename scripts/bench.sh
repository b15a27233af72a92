#!/usr/bin/env bash
# Run benchmark binaries in turn; each prints its own lines
# ("bench_<name>: N ops, X ns/op"); then scripts/bench_shim.sh (plain pthread
# programs, native vs LD_PRELOAD). Exits non-zero if any benchmark fails.
#   usage: scripts/bench.sh [BINARY...]   (default: every build/bench/bench_*)
# `make bench` passes the binaries built from tests/bench/bench_*.c.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)

benches=("$@")
if [ $# -eq 0 ]; then
    shopt -s nullglob
    for f in "$root"/build/bench/bench_*; do
        [[ -x $f && -f $f && $f != *.[od] ]] && benches+=("$f")
    done
fi

if [ ${#benches[@]} -eq 0 ]; then
    echo "bench: no benchmarks yet (add tests/bench/bench_<name>.c)"
    exit 0
fi

status=0
for b in "${benches[@]}"; do
    if ! "$b"; then
        echo "bench: $(basename "$b") failed (status $?)" >&2
        status=1
    fi
done
echo
if ! "$root/scripts/bench_shim.sh"; then
    echo "bench: bench_shim.sh failed" >&2
    status=1
fi
exit $status
