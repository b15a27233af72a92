#!/usr/bin/env bash
# The side-by-side part of `make demo`: the same unmodified programs run
# natively and under goshim, alternately, through the launcher
# (build/goshim compare), each comparison printed as a Markdown table and
# drawn as a chart in build/demo/NAME/compare.png:
#   handoff    one thread blocked in read() beside four computing threads,
#              goshim with ONE processor (-p 1)
#   threads    100,000 threads blocked on a condition variable (natively the
#              program stops at pid_max: its exit status says so)
#   echo       a thread-per-connection echo server, 2,000 connections
# plus build/demo/trace.png, the run queues of the 100,000-thread run over
# time (GOSHIM_SCHEDTRACE, drawn by goshim trace-plot).
#
#   usage: scripts/demo_compare.sh        (GOSHIM_BENCH_RUNS: runs per mode, default 3)
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
goshim=$root/build/goshim
progs=$root/build/tests/progs
out=$root/build/demo
runs=${GOSHIM_BENCH_RUNS:-3}
for f in "$goshim" "$progs/pbench_handoff" "$progs/prog_many_threads" "$progs/pbench_echo_server"; do
    if [ ! -x "$f" ]; then
        echo "demo_compare: $f is missing (run make all)" >&2
        exit 1
    fi
done
mkdir -p "$out"

compare() {
    local name=$1 what=$2
    shift 2
    echo
    echo "=== $what ==="
    echo "\$ goshim compare -n $runs $* (chart: build/demo/$name/compare.png)"
    echo
    "$goshim" compare -n "$runs" --out "$out/$name" "$@"
}

compare handoff "a thread blocked in read() beside four computing threads (goshim: 1 processor)" \
    -p 1 -- "$progs/pbench_handoff" pipe
compare threads "100,000 threads blocked on a condition variable" \
    -- "$progs/prog_many_threads" 100000
compare echo "thread-per-connection echo server, 2,000 connections, 50 exchanges each" \
    -- "$root/scripts/echo_pair.sh" 2000 50 64

echo
echo "=== the scheduler during the 100,000-thread run (GOSHIM_SCHEDTRACE=50) ==="
if "$goshim" run --trace 50 -- "$progs/prog_many_threads" 100000 >/dev/null 2>"$out/trace.txt" &&
    "$goshim" trace-plot "$out/trace.txt" -o "$out/trace.png"; then
    echo "chart: build/demo/trace.png ($(grep -c '^SCHED' "$out/trace.txt") SCHED lines in build/demo/trace.txt)"
fi
echo
echo "(a differing exit status is the point for the 100,000-thread run: natively the"
echo " kernel refuses threads beyond pid_max, $(cat /proc/sys/kernel/pid_max 2>/dev/null || echo '?') here)"
exit 0
