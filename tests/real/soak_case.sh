#!/usr/bin/env bash
# One checked run of a real-program case under goshim, as one command: what
# `goshim stress` runs once per chaos seed for scripts/soak.sh.
#
#   usage: tests/real/soak_case.sh [--native] CASE DIR
#   CASE      a case of scripts/real_cases.sh (scripts/test_real.sh --list)
#   DIR       the soak's work directory: DIR/shared holds the inputs (and
#             mariadb's data directory), DIR/CASE.ref the native run's
#             outputs, DIR/runs/soak_case.* each run's own directory
#   --native  prepares CASE's inputs and runs it natively once (outputs
#             kept as the reference), prints the native wall seconds
#
# Run under goshim stress (or `goshim run --chaos SEED`, the replay line), it
# starts with goshim preloaded. Only the program under test may have it: the
# script starts again without LD_PRELOAD, keeps the library's path, and runs
# the case through real_run of scripts/real_cases.sh, which preloads it into
# the program alone (servers too), while timeout(1), the native clients
# (kv_client.py, redis-benchmark, sysbench, mariadb) and the checks run
# natively. GOSHIM_CHAOS and GOSHIM_PROCS, set by stress, are inherited by
# the program; without the library they mean nothing to the rest.
#
# A run whose DIR has no reference yet (a replay after the soak removed its
# directory) makes it first. Exit status: 0 passed every check; 1 a check
# failed; 3 a command hung (killed at the per-command timeout,
# GOSHIM_SOAK_TIMEOUT seconds, default 60); 4 a command crashed (killed by
# a signal, or a server's log says it crashed: redis catches SIGSEGV, reports
# and hangs); 2 bad usage or setup. The first line of stderr says why; a
# failing run's directory is kept (its path is on stderr).
set -euo pipefail

if [ -n "${LD_PRELOAD:-}" ]; then
    exec env -u LD_PRELOAD SOAK_CASE_LIB="$LD_PRELOAD" /bin/bash "$0" "$@"
fi

export PATH=/usr/sbin:/usr/bin:/sbin:/bin
root=$(cd "$(dirname "$0")/../.." && pwd)
me=soak_case

native=0
if [ "${1:-}" = --native ]; then
    native=1
    shift
fi
if [ $# -ne 2 ]; then
    echo "usage: tests/real/soak_case.sh [--native] CASE DIR" >&2
    exit 2
fi
case_name=$1
dir=$2
lib=${SOAK_CASE_LIB:-$root/build/libgoshim.so}

. "$root/scripts/bench_lib.sh"
. "$root/scripts/real_cases.sh"

if ! declare -F "c_${case_name%_p1}" >/dev/null; then
    echo "$me: no case named '$case_name' (scripts/test_real.sh --list shows them)" >&2
    exit 2
fi
mkdir -p "$dir/shared" "$dir/runs"
export TMPDIR=$dir/runs
real_workdir
real_inputs "$dir/shared"
tmo=${GOSHIM_SOAK_TIMEOUT:-60}
ref=$dir/$case_name.ref

# prepare: CASE's inputs made in DIR/shared (once for all the cases that use them), its
# native run in DIR/CASE.ref; prints the native wall seconds.
prepare() {
    w=$ref.new
    rm -rf "$w"
    mkdir -p "$w"
    real_prepare "$case_name"
    real_run "$case_name" native
    if [ "$run_rc" -ne 0 ]; then
        echo "$me: $case_name fails natively: $run_detail (in $w)" >&2
        exit 2
    fi
    rm -rf "$ref"
    mv "$w" "$ref"
    echo "$run_secs"
}

if [ $native -eq 1 ]; then
    prepare
    exit 0
fi
[ -d "$ref" ] || prepare >/dev/null

# A run, in its own directory $w, next to the native outputs (the goshim run compares with them).
w=$tmp
for f in "$ref"/*.native; do
    [ -e "$f" ] && ln -s "$f" "$w/"
done
trap 'exit 3' QUIT
real_run "$case_name" goshim "${GOSHIM_PROCS:-}"
[ "$run_rc" -eq 0 ] && exit 0

echo "$case_name: $run_detail" >&2
cat "$w"/stderr.goshim "$w"/server.goshim "$w"/client.goshim 2>/dev/null |
    grep -v -e '^goshim stats:' -e '^goshim: chaos mode, seed ' | grep . | tail -5 |
    sed 's/^/    /' >&2 || true
GOSHIM_REAL_KEEP=1
case $run_detail in
*"hung (killed after"* | *"did not exit within"* | *"never answered"*) exit 3 ;;
*"crashed (signal"* | *"crashed by signal"*) exit 4 ;; # killed, or a server's own report
esac
exit 1
