#!/usr/bin/env bash
# The real-program suite (make test-real): unmodified Debian programs that use
# threads, each run natively and then under LD_PRELOAD=build/libgoshim.so
# (GOSHIM_STATS=1), with a correctness check per case and a timeout per
# command. One line per case: result, native and goshim wall time, ratio.
#
#   usage: scripts/test_real.sh [--list] [CASE...]
#   CASE      a case name, or the part of names before "_" (sysbench,
#             stressng); none = every case
#   --list    lists the cases and exits
#   GOSHIM_TEST_SCALE   scales the sizes (default 1: the whole suite, both
#                       modes, takes about a minute on a 2-vCPU VM)
#   GOSHIM_REAL_KEEP=1  keeps the work directory (inputs, outputs, logs)
#   GOSHIM_REAL_LIB     the library to preload (default build/libgoshim.so)
#   GOSHIM_REAL_PROCS=N runs every case with GOSHIM_PROCS=N under goshim and
#                       natively pinned to N CPUs (taskset -c 0-(N-1)); a
#                       case named NAME_p1 is NAME so run with N=1 always
#
# A case passes when the native run and the goshim run both succeed, the
# goshim output equals the input (round trips) or the native output, and the
# goshim run printed its `goshim stats:` lines with at least `want_gs` tasks
# created (so goshim really ran the threads). stress-ng forks its stressors
# and its children leave with _exit (no stats): there the number of PIDs
# the run used, counted in a new PID namespace (root only), shows the
# threads did not become OS threads (lbzip2, which leaves with _exit too,
# shows its scheduler trace instead). Servers (memcached, redis-server,
# mariadbd) run under goshim and are served by a native client
# (tests/real/kv_client.py, redis-benchmark, sysbench oltp_read_write); they
# are stopped with SIGTERM or SHUTDOWN and must exit 0. Exit status: 0 if
# every case passed, 1 if one failed, 2 for a bad argument.
#
# The cases (commands, inputs, checks) are in scripts/real_cases.sh, which
# scripts/bench_real.sh shares. Installs its Debian packages when missing
# (as root; otherwise prints the apt-get command and exits 1). Programs come
# from /usr/bin only: a PATH with pyenv or cargo shims in front would run
# something else.
set -euo pipefail

export PATH=/usr/sbin:/usr/bin:/sbin:/bin
root=$(cd "$(dirname "$0")/.." && pwd)
lib=${GOSHIM_REAL_LIB:-$root/build/libgoshim.so}
me=test_real

. "$root/scripts/bench_lib.sh"
. "$root/scripts/real_cases.sh"

usage() {
    echo "usage: scripts/test_real.sh [--list] [CASE...]   (--list shows the cases)"
}

# ---- arguments ---------------------------------------------------------------------
declare -A wanted=()
selected=()
for arg in "$@"; do
    case $arg in
    --list)
        for c in "${case_list[@]}"; do
            printf '%-18s %s\n' "${c%%|*}" "${c#*|}"
        done
        exit 0
        ;;
    -h | --help)
        usage
        exit 0
        ;;
    -*)
        echo "$me: unknown option '$arg'; $(usage)" >&2
        exit 2
        ;;
    esac
    found=0
    for c in "${case_list[@]}"; do
        n=${c%%|*}
        if [ "$n" = "$arg" ] || [[ $n == "${arg}_"* ]]; then
            found=1
            wanted[$n]=1
        fi
    done
    if [ $found -eq 0 ]; then
        echo "$me: no case named '$arg' (scripts/test_real.sh --list shows them)" >&2
        exit 2
    fi
done
for c in "${case_list[@]}"; do
    n=${c%%|*}
    if [ ${#wanted[@]} -eq 0 ] || [ -n "${wanted[$n]:-}" ]; then
        # Under GOSHIM_REAL_PROCS every case runs so already: NAME_p1 only when named.
        [ ${#wanted[@]} -eq 0 ] && [ -n "${GOSHIM_REAL_PROCS:-}" ] && [ "${n%_p1}" != "$n" ] &&
            continue
        selected+=("$n")
    fi
done

if [ -n "${GOSHIM_REAL_PROCS:-}" ] && ! [[ $GOSHIM_REAL_PROCS =~ ^[1-9][0-9]*$ &&
    $GOSHIM_REAL_PROCS -le $(nproc) ]]; then
    echo "$me: GOSHIM_REAL_PROCS=$GOSHIM_REAL_PROCS: want a number of CPUs from 1 to $(nproc)" >&2
    exit 2
fi

real_setup

# ---- driver ------------------------------------------------------------------------
passed=0
failed=0
echo "$me: ${#selected[@]} case(s), scale $scale, $(nproc) CPUs${GOSHIM_REAL_PROCS:+, GOSHIM_PROCS=$GOSHIM_REAL_PROCS}," \
    "per-command timeout ${tmo}s; goshim: $lib"
printf '%-18s %-6s %10s %10s %8s  %s\n' case result native_s goshim_s ratio "note (ratio = goshim/native)"
suite_t0=$EPOCHREALTIME
for name in "${selected[@]}"; do
    w=$tmp/$name
    mkdir -p "$w"
    real_prepare "$name"
    declare -A ok=()
    declare -A secs=()
    declare -A dets=()
    procs=${GOSHIM_REAL_PROCS:-}
    [ "${name%_p1}" != "$name" ] && procs=1
    for mode in native goshim; do
        real_run "$name" $mode "$procs"
        secs[$mode]=$run_secs
        ok[$mode]=$run_rc
        dets[$mode]=$run_detail
    done
    ratio=$(awk -v a="${secs[native]}" -v b="${secs[goshim]}" 'BEGIN { if (a > 0) printf "%.2fx", b / a; else print "-" }')
    if [ "${ok[native]}" -eq 0 ] && [ "${ok[goshim]}" -eq 0 ]; then
        result=PASS
        passed=$((passed + 1))
    else
        result=FAIL
        failed=$((failed + 1))
        msg=
        [ "${ok[native]}" -ne 0 ] && msg="native: ${dets[native]}"
        [ "${ok[goshim]}" -ne 0 ] && msg+="${msg:+; }goshim: ${dets[goshim]}"
        note[$name]=$msg
    fi
    printf '%-18s %-6s %10s %10s %8s  %s\n' "$name" "$result" "${secs[native]}" "${secs[goshim]}" \
        "$ratio" "${note[$name]:-}"
    if [ $result = FAIL ]; then
        for mode in native goshim; do
            [ "${ok[$mode]}" -ne 0 ] || continue
            echo "    $mode log tail (of $w/*.$mode; GOSHIM_REAL_KEEP=1 keeps them):"
            cat "$w"/stderr."$mode" "$w"/server."$mode" "$w"/client."$mode" 2>/dev/null |
                grep -v '^goshim stats:' | grep . | tail -5 | sed 's/^/      /' || true
        done
    fi
done
suite_t1=$EPOCHREALTIME
echo "$passed passed, $failed failed ($(awk -v a="$suite_t0" -v b="$suite_t1" 'BEGIN { printf "%.0f", b - a }') s)"
[ $failed -eq 0 ]
