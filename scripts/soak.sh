#!/usr/bin/env bash
# The soak of real programs (make soak SEEDS=N): every case of the
# real-program suite (scripts/real_cases.sh, each with its correctness
# check) run many times under `goshim stress`, one chaos seed a run, at one
# P and at two. One run of the suite shows a program works on the schedule it
# happened to get; a soak tries a thousand schedules and shows none of them
# loses output, hangs or crashes.
#
#   usage: scripts/soak.sh [--seeds N | --per-case N] [--procs LIST]
#                          [--first-seed S] [-j JOBS] [--prog PROG [ARGS...]]
#                          [CASE...]
#   --seeds N       N runs in all (default 1000), spread evenly over the
#                   cases and the Ps, at least one each
#   --per-case N    N runs for each case at each P instead
#   --procs LIST    the Ps, comma-separated (default 1,2)
#   --first-seed S  the first chaos seed of each case and P (default 1): a new
#                   soak over new schedules starts where the last ended
#   -j JOBS         runs at a time (default: the CPUs; mariadb: one at a time,
#                   its runs share one data directory)
#   --prog PROG     soak PROG [ARGS...] (a plain program: exit status 0 is its
#                   check) instead of the real cases; the rest of the line is
#                   its command
#   --self-test     checks the report of a failure (make test): a soak of
#                   tests/progs/prog_chaos_race, which fails on some seeds,
#                   must list them with replay lines that fail again, exit 1
#   CASE            a case name, or the part before "_" (sysbench, stressng);
#                   none = every case (the NAME_p1 variants are left out: every
#                   case runs at P=1 already)
#   GOSHIM_TEST_SCALE    scales the cases' sizes (scripts/test_real.sh; default
#                        0.25 here)
#   GOSHIM_SOAK_TIMEOUT  per-command timeout inside a run, seconds (default 60)
#   GOSHIM_SOAK_KEEP     1: keeps the work directory (inputs, references, the
#                        failing runs' directories and output); 0: removes it;
#                        unset: keeps it when a run failed
#
# For each case: one native run (its outputs are the reference the goshim
# runs are compared with, its wall time the "native" column), then `goshim
# stress --json` per P running tests/real/soak_case.sh, which does one
# checked run of the case under goshim with the seed stress gives it (only
# the program under test is preloaded: the servers' native clients and the
# checks are not). The summary comes from stress's JSON files: one line per
# case and P (runs, failed runs, of which hangs and crashes, the native time,
# the slowest run's wall time, including the wrapper, and its ratio to
# native), then the replay line of every failing seed. A hang is a command
# still running at the per-command timeout (or at stress's own, a bound on
# the whole run); a crash is a command killed by a signal, or a server whose log
# says it crashed (redis reports a SIGSEGV and lives on).
#
# At P=1 a seed is one schedule and its replay line gives it again; at P=2 the
# Ms run in parallel and the schedule also depends on timing: those seeds are
# counted the same, but their replay lines may not reproduce the failure.
#
# Every case goes through the one wrapper, which reuses real_run: a case is
# several commands (compress then decompress; server, clients, shutdown) and
# its check compares files with the native run's. Rejected: the cases'
# commands straight under stress with --check (a server needs its client
# beside it; the checks would be written twice), and a wrapper per server.
#
# Time: under chaos a run takes a few times its native time (the programs
# that take a contended lock in a loop, the most), plus the wrapper's
# fraction of a second; docs/usage.md gives measured figures. Exit status:
# 0 when every run passed, 1 when one failed, 2 for bad usage or a case
# failing natively.
set -euo pipefail

export PATH=/usr/sbin:/usr/bin:/sbin:/bin
root=$(cd "$(dirname "$0")/.." && pwd)
lib=$root/build/libgoshim.so
goshim=$root/build/goshim
wrapper=$root/tests/real/soak_case.sh
me=soak
# A quarter of the suite's sizes by default, so that a thousand runs take well under an
# hour on 2 CPUs.
export GOSHIM_TEST_SCALE=${GOSHIM_TEST_SCALE:-0.25}

. "$root/scripts/bench_lib.sh"
. "$root/scripts/real_cases.sh"

usage() {
    echo "usage: scripts/soak.sh [--seeds N | --per-case N] [--procs LIST] [--first-seed S]" \
        "[-j JOBS] [--prog PROG [ARGS...]] [CASE...]"
}

bad() {
    echo "$me: $*; $(usage)" >&2
    exit 2
}

# self_test: see --self-test at the top; exits 1 with the soak's output when it fails.
self_test() {
    local out rc=0 n line seed
    local race=$root/build/tests/progs/prog_chaos_race
    [ -x "$race" ] || bad "$race is missing (run make)"
    out=$(GOSHIM_SOAK_KEEP=0 "$0" --per-case 8 --procs 1 --prog "$race" 2>&1) || rc=$?
    n=$(grep -c -- "--chaos [0-9]* -- $race  # prog_chaos_race P=1" <<<"$out" || true)
    line=$(grep '^prog_chaos_race ' <<<"$out" || true)
    if [ $rc -ne 1 ] || [ "$n" -eq 0 ] || [ "$(awk '{ print $4 }' <<<"$line")" != "$n" ]; then
        echo "$me: self-test: a soak of $race (fails on some seeds) gave exit $rc," \
            "$n replay line(s), want exit 1 and one replay line per failed run:" >&2
        echo "$out" >&2
        exit 1
    fi
    # The replay lines of P=1 give the failure again.
    while read -r seed; do
        if "$goshim" run -p 1 --chaos "$seed" -- "$race" >/dev/null 2>&1 </dev/null; then
            echo "$me: self-test: seed $seed failed in the soak but passes on replay" >&2
            exit 1
        fi
    done < <(sed -n 's/.* --chaos \([0-9]*\) -- .*/\1/p' <<<"$out")
    echo "$me: self-test passed: $n of 8 seeds of prog_chaos_race reported with replay lines that fail again"
}

# ---- arguments ---------------------------------------------------------------------
total=1000
per_case=
procs_list=1,2
first_seed=1
jobs=$(nproc)
prog=()
names=()
number() { [[ $2 =~ ^[1-9][0-9]*$ ]] || bad "$1 wants a positive number, not '$2'"; }
while [ $# -gt 0 ]; do
    case $1 in
    --seeds) number "$1" "${2:-}" && total=$2 && shift ;;
    --per-case) number "$1" "${2:-}" && per_case=$2 && shift ;;
    --procs)
        [[ ${2:-} =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || bad "--procs wants Ps like 1,2, not '${2:-}'"
        procs_list=$2
        shift
        ;;
    --first-seed) [[ ${2:-} =~ ^[0-9]+$ ]] || bad "--first-seed wants a seed, not '${2:-}'"
        first_seed=$2
        shift
        ;;
    -j) number "$1" "${2:-}" && jobs=$2 && shift ;;
    --prog)
        shift
        [ $# -gt 0 ] || bad "--prog wants a program"
        prog=("$@")
        break
        ;;
    --self-test)
        self_test
        exit 0
        ;;
    -h | --help)
        usage
        exit 0
        ;;
    -*) bad "unknown option '$1'" ;;
    *) names+=("$1") ;;
    esac
    shift
done
IFS=, read -r -a procs <<<"$procs_list"

selected=()
if [ ${#prog[@]} -gt 0 ]; then
    [ ${#names[@]} -eq 0 ] || bad "--prog and case names do not mix"
    command -v "${prog[0]}" >/dev/null || bad "--prog: no program '${prog[0]}'"
    selected=("$(basename "${prog[0]}")")
else
    for c in "${case_list[@]}"; do
        n=${c%%|*}
        [ "${n%_p1}" = "$n" ] || continue
        if [ ${#names[@]} -eq 0 ]; then
            selected+=("$n")
            continue
        fi
        for a in "${names[@]}"; do
            if [ "$n" = "$a" ] || [[ $n == "${a}_"* ]]; then
                selected+=("$n")
                break
            fi
        done
    done
    [ ${#selected[@]} -gt 0 ] || bad "no case named '${names[*]}' (scripts/test_real.sh --list shows them)"
    real_packages
fi
for f in "$lib" "$goshim"; do
    [ -e "$f" ] || {
        echo "$me: $f is missing (run make)" >&2
        exit 1
    }
done

# runs_for K: the runs of the K-th (case, P) pair: --per-case N, or --seeds
# spread evenly (the first pairs take the remainder), at least 1.
ngroups=$((${#selected[@]} * ${#procs[@]}))
runs_for() {
    local r
    if [ -n "$per_case" ]; then
        echo "$per_case"
        return
    fi
    r=$((total / ngroups + ($1 < total % ngroups ? 1 : 0)))
    echo $((r < 1 ? 1 : r))
}

dir=$(mktemp -d "${TMPDIR:-/tmp}/soak.XXXXXX")
keep=${GOSHIM_SOAK_KEEP:-}
soak_cleanup() {
    if [ "$keep" = 1 ]; then
        echo "$me: work directory kept: $dir"
    else
        rm -rf "$dir"
    fi
}
trap soak_cleanup EXIT
trap 'exit 130' INT TERM

# ---- one case ----------------------------------------------------------------------
# native_time NAME: NAME's native run (reference outputs, inputs), its wall seconds.
native_time() {
    if [ ${#prog[@]} -gt 0 ]; then
        local t0 rc=0
        t0=$EPOCHREALTIME
        timeout -k 5 "${GOSHIM_SOAK_TIMEOUT:-60}" "${prog[@]}" >/dev/null 2>&1 </dev/null || rc=$?
        [ $rc -eq 0 ] || echo "$me: note: ${prog[0]} exits $rc natively" >&2
        awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }'
    else
        "$wrapper" --native "$1" "$dir"
    fi
}

# summarize JSON NAME P NATIVE: the case's line; the failing runs' replay lines go
# to $dir/replay; adds to the totals.
summarize() {
    local line
    line=$(python3 - "$@" "$dir/replay" <<'EOF'
import json, sys
path, name, procs, native, replay = sys.argv[1:6]
d = json.load(open(path))
runs = d["runs"]
fail = [r for r in runs if r["status"] != "pass"]
hang = [r for r in fail if r["status"] == "hang" or (r["status"] == "exit" and r["exit"] == 3)]
crash = [r for r in fail if r["status"] == "signal" or (r["status"] == "exit" and r["exit"] == 4)]
slow = max((r["ms"] for r in runs), default=0) / 1e3
ratio = "%.2fx" % (slow / float(native)) if float(native) > 0 else "-"
print("%d %d %d %d %.2f %s" % (len(runs), len(fail), len(hang), len(crash), slow, ratio))
with open(replay, "a") as f:
    for r in sorted(fail, key=lambda r: r["seed"]):
        why = r.get("first_line") or ("hang" if r["hang"] else
              "killed by signal %s" % r["signal"] if r["signal"] else "exit %s" % r["exit"])
        f.write("%s  # %s P=%s%s: %s\n" % (r["replay"], name, procs,
                " (P>1: may not reproduce)" if int(procs) > 1 else "", why[:120]))
EOF
    )
    read -r n nf nh nc slow ratio <<<"$line"
    printf '%-18s %2s %6s %6s %6s %6s %9s %10s %8s\n' "$2" "$3" "$n" "$nf" "$nh" "$nc" "$4" "$slow" "$ratio"
    all_runs=$((all_runs + n))
    all_fail=$((all_fail + nf))
    all_hang=$((all_hang + nh))
    all_crash=$((all_crash + nc))
}

# soak_case NAME K: NAME natively, then under stress at each P (K: its first pair's index).
soak_case() {
    local name=$1 k=$2 p native n j=$jobs cmd rc
    if ! native=$(native_time "$name"); then
        echo "$me: $name: no native reference: nothing to compare with" >&2
        exit 2
    fi
    [ "$name" = mariadb ] && j=1
    cmd=("$wrapper" "$name" "$dir")
    [ ${#prog[@]} -gt 0 ] && cmd=("${prog[@]}")
    for p in "${procs[@]}"; do
        n=$(runs_for "$k")
        k=$((k + 1))
        rc=0
        "$goshim" stress --seeds "$first_seed-$((first_seed + n - 1))" -j "$j" -p "$p" \
            --timeout "$stress_timeout" --out "$dir/stress/$name.p$p" \
            --json "$dir/stress/$name.p$p.json" -- "${cmd[@]}" \
            >"$dir/stress/$name.p$p.log" 2>&1 || rc=$?
        if [ $rc -gt 128 ]; then
            echo "$me: interrupted (goshim stress exit $rc)" >&2
            exit $rc
        fi
        if [ $rc -gt 1 ] || [ ! -s "$dir/stress/$name.p$p.json" ]; then
            echo "$me: goshim stress failed (exit $rc):" >&2
            tail -5 "$dir/stress/$name.p$p.log" >&2
            keep=1
            exit 2
        fi
        summarize "$dir/stress/$name.p$p.json" "$name" "$p" "$native"
    done
}

# ---- driver ------------------------------------------------------------------------
mkdir -p "$dir/stress"
: >"$dir/replay"
# stress's own timeout bounds a whole run: a server case is several commands, each
# bounded by the per-command timeout. A --prog run is one command.
stress_timeout=$((4 * ${GOSHIM_SOAK_TIMEOUT:-60} + 60))
[ ${#prog[@]} -gt 0 ] && stress_timeout=${GOSHIM_SOAK_TIMEOUT:-60}
all_runs=0 all_fail=0 all_hang=0 all_crash=0
if [ -n "$per_case" ]; then
    spread="$per_case per case and P"
else
    lo=$((total / ngroups))
    spread="$total in all, $((lo < 1 ? 1 : lo))-$(((total + ngroups - 1) / ngroups)) per case and P"
fi
echo "$me: ${#selected[@]} program(s) at P=${procs_list}, runs: $spread, seeds from $first_seed," \
    "$jobs at a time, scale $scale, per-command timeout ${GOSHIM_SOAK_TIMEOUT:-60}s; goshim: $lib"
for p in "${procs[@]}"; do
    if [ "$p" -gt 1 ]; then
        echo "$me: at P=$p the Ms run in parallel and a schedule also depends on timing:" \
            "its failing seeds count the same, but their replay lines may not reproduce"
        break
    fi
done
printf '%-18s %2s %6s %6s %6s %6s %9s %10s %8s\n' program P runs failed hangs crashes native_s \
    slowest_s ratio
t0=$EPOCHREALTIME
k=0
for name in "${selected[@]}"; do
    soak_case "$name" $k
    k=$((k + ${#procs[@]}))
done
secs=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }')
echo "total: $all_runs runs, $all_fail failed ($all_hang hangs, $all_crash crashes), $secs s"
if [ "$all_fail" -gt 0 ]; then
    echo "replay (failing seeds; each run's output in $dir/stress/CASE.pP/seed-N.*):"
    sed 's/^/  /' "$dir/replay"
    keep=${keep:-1}
    exit 1
fi
