#!/usr/bin/env bash
# The conformance runner (make test-posix): the Open POSIX Test Suite of an
# LTP checkout, built from where it is (nothing is copied into the project;
# binaries go to build/posix/), run natively, under goshim at the default P
# and under goshim with GOSHIM_PROCS=1. Prints every test whose result under
# goshim differs from native, then the counts.
#
#   usage: scripts/test_posix.sh LTP_DIR [INTERFACE...]
#   LTP_DIR     a checkout of https://github.com/linux-test-project/ltp
#               (git clone --depth 1 https://github.com/linux-test-project/ltp)
#   INTERFACE   conformance/interfaces/ directories to run (default: the
#               pthread_*, sem_*, sched_yield, nanosleep, clock_nanosleep,
#               sigwait*, sigsuspend and fork ones)
#   POSIX_TIMEOUT   seconds per test run (default 20): a hung test costs this
#   POSIX_JOBS      tests run at once (default 4: most of them sleep)
#   GOSHIM_POSIX_LIB  the library to preload (default build/libgoshim.so)
#
# A test's result is its exit status, as the suite defines it (LTP's posixtest.h):
# 0 PASS, 1 FAIL, 2 UNRESOLVED, 4 UNSUPPORTED, 5 UNTESTED; the runner adds
# HUNG (killed at the timeout), SIGNAL (killed by a signal) and NOBUILD.
# Exit status: 0 when every test that passes natively passes in both goshim
# runs, 1 otherwise, 2 for a bad argument.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
lib=${GOSHIM_POSIX_LIB:-$root/build/libgoshim.so}
timeout_s=${POSIX_TIMEOUT:-20}
jobs=${POSIX_JOBS:-4}
out=$root/build/posix

if [ $# -lt 1 ] || [ -z "$1" ]; then
    echo "usage: scripts/test_posix.sh LTP_DIR [INTERFACE...]" >&2
    exit 2
fi
ltp=$1
shift
pts=$ltp/testcases/open_posix_testsuite
if [ ! -d "$pts/conformance/interfaces" ]; then
    echo "test_posix: $pts/conformance/interfaces not found: LTP_DIR must be a checkout of" \
        "https://github.com/linux-test-project/ltp" >&2
    exit 2
fi
if [ ! -f "$lib" ]; then
    echo "test_posix: $lib not found: run make first" >&2
    exit 2
fi

cd "$pts/conformance/interfaces" || exit 2
if [ $# -gt 0 ]; then
    ifaces=("$@")
else
    mapfile -t ifaces < <(ls -d pthread_* sem_* sched_yield nanosleep clock_nanosleep sigwait* \
        sigsuspend fork 2>/dev/null)
fi

mkdir -p "$out/bin" "$out/run"
list=$out/tests.txt
: >"$list"
for d in "${ifaces[@]}"; do
    [ -d "$d" ] || { echo "test_posix: no interface $d" >&2; exit 2; }
    for f in "$d"/*.c; do
        case $f in *-buildonly.c) continue ;; esac
        [ -f "$f" ] && echo "${f%.c}" >>"$list"
    done
done
n=$(wc -l <"$list")
echo "test_posix: $n tests from ${#ifaces[@]} interfaces of $pts"

# Build each test alone, as the suite's own makefiles do (-I include, the directory's
# LDLIBS), into build/posix/bin/<interface>/<test>.
# The suite's flags (LTP's include/mk/config.mk.in); lib/common.c holds the main() that calls
# each test's test_main().
cflags="-std=c99 -D_POSIX_C_SOURCE=200809L -D_XOPEN_SOURCE=700 -w -O1 -I$pts/include"
cc $cflags -c -o "$out/bin/common.o" "$pts/lib/common.c" || exit 1
build_one() {
    local t=$1 dir=${1%/*} libs=""
    [ -f "$dir/LDLIBS" ] && libs=$(cat "$dir/LDLIBS")
    mkdir -p "$out/bin/$dir"
    [ "$out/bin/$t" -nt "$t.c" ] && return # built already
    cc $cflags -o "$out/bin/$t" "$t.c" "$out/bin/common.o" -pthread $libs -lrt -lm \
        >"$out/bin/$t.log" 2>&1 || rm -f "$out/bin/$t"
}
export -f build_one
export out pts cflags
echo "test_posix: building into $out/bin"
xargs -P "$jobs" -I{} bash -c 'build_one "$@"' _ {} <"$list"

# Run one test in one mode; prints "test mode RESULT".
run_one() {
    local t=$1 mode=$2 rc res t0=$SECONDS
    local bin=$out/bin/$t
    if [ ! -x "$bin" ]; then
        echo "$t $mode NOBUILD"
        return
    fi
    local wd=$out/run/$mode/${t//\//_}
    rm -rf "$wd"
    mkdir -p "$wd"
    case $mode in
    native) (cd "$wd" && timeout -k 5 "$timeout_s" "$bin") >"$wd.log" 2>&1 ;;
    default) (cd "$wd" && LD_PRELOAD=$lib timeout -k 5 "$timeout_s" "$bin") >"$wd.log" 2>&1 ;;
    p1) (cd "$wd" && GOSHIM_PROCS=1 LD_PRELOAD=$lib timeout -k 5 "$timeout_s" "$bin") \
        >"$wd.log" 2>&1 ;;
    esac
    rc=$?
    case $rc in
    0) res=PASS ;;
    1) res=FAIL ;;
    2) res=UNRESOLVED ;;
    4) res=UNSUPPORTED ;;
    5) res=UNTESTED ;;
    124 | 137) res=HUNG ;;
    *) if [ "$rc" -gt 128 ]; then res=SIGNAL$((rc - 128)); else res=EXIT$rc; fi ;;
    esac
    rm -rf "$wd"
    echo "$t $mode $res $((SECONDS - t0))"
}
export -f run_one
export lib timeout_s

results=$out/results.txt
: >"$results"
start=$(date +%s)
for mode in native default p1; do
    echo "test_posix: running $n tests, $mode"
    xargs -P "$jobs" -I{} bash -c 'run_one "$@"' _ {} "$mode" <"$list" >>"$results"
done
elapsed=$(($(date +%s) - start))

# One line per test: test native default p1.
table=$out/table.txt
awk '{ r[$1, $2] = $3; t[$1] = 1 }
     END { for (k in t) print k, r[k, "native"], r[k, "default"], r[k, "p1"] }' "$results" |
    sort >"$table"

echo
echo "tests whose result under goshim differs from native (test: native default P=1):"
awk '$2 != $3 || $2 != $4 { printf "  %s: %s %s %s\n", $1, $2, $3, $4 }' "$table"
echo
awk -v secs="$elapsed" '
    { total++; if ($2 == "PASS") np++
      if ($3 == "PASS") dp++; if ($4 == "PASS") pp++
      if ($2 == "PASS" && $3 != "PASS") dd++; if ($2 == "PASS" && $4 != "PASS") pd++
      if ($2 != $3) dany++; if ($2 != $4) pany++
      if ($2 == "HUNG") nh++; if ($3 == "HUNG") dh++; if ($4 == "HUNG") ph++ }
    END {
      printf "test_posix: %d tests in %d s\n", total, secs
      printf "  native:       %d passed, %d hung\n", np, nh
      printf "  default P:    %d passed, %d differ from native (%d passing natively), %d hung\n", dp, dany, dd, dh
      printf "  GOSHIM_PROCS=1: %d passed, %d differ from native (%d passing natively), %d hung\n", pp, pany, pd, ph
      exit (dd + pd > 0) }' "$table"
