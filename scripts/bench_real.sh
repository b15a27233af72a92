#!/usr/bin/env bash
# The real programs timed (issue 28): every case of the real-program suite
# (scripts/real_cases.sh, shared with scripts/test_real.sh: the same
# commands, inputs and checks) run natively and under
# LD_PRELOAD=build/libgoshim.so, interleaved (native, goshim, goshim, native,
# ...), GOSHIM_BENCH_RUNS times each; first at the default P against native
# on every CPU, then at GOSHIM_PROCS=1 against native pinned to one CPU
# (taskset -c 0). The suite's NAME_p1 cases are left out: every case runs
# at both.
#
#   usage: scripts/bench_real.sh [CASE...]   (CASE as for test_real.sh; none = all)
#   GOSHIM_BENCH_RUNS   runs per case, mode and P (default 5)
#   GOSHIM_BENCH_CONFIRM  more interleaved runs for a case above 1.05x native after
#                       those (default 6): on this noisy machine a single window's
#                       drift put cases there that alone ran at native's time
#   GOSHIM_TEST_SCALE   scales the sizes (default here 0.5: half the suite's
#                       inputs, so that the whole run, 5 runs at two P, stays
#                       within about 10 minutes on 2 CPUs)
#   GOSHIM_REAL_LIB     the library to preload (default build/libgoshim.so)
#   GOSHIM_REAL_KEEP=1  keeps the work directory
#
# A run's time is the wall time of the case: for a server, its start, the
# native client's workload and its exit. Each run is checked as in the suite
# (outputs equal to the native run's, the goshim stats line, the servers'
# clean exit): a run that fails its check is reported and gives no time, and
# its mode of that case is not run again. Output: one line per case and P,
#   "bench_real_<case>[_p1]: native M s (min-max), goshim M s (min-max), goshim/native R"
# (medians; R > 1: goshim is slower), a Markdown table of the same, and the
# list of every case above 1.05x native at either P. A case above 1.05x after
# the first runs is run GOSHIM_BENCH_CONFIRM times more, interleaved, and its
# medians are of all its runs (its line says how many). Exit status non-zero
# only if a case failed under goshim (a native failure is reported too).
set -uo pipefail

export PATH=/usr/sbin:/usr/bin:/sbin:/bin
root=$(cd "$(dirname "$0")/.." && pwd)
lib=${GOSHIM_REAL_LIB:-$root/build/libgoshim.so}
me=bench_real
export GOSHIM_TEST_SCALE=${GOSHIM_TEST_SCALE:-0.5}

. "$root/scripts/bench_lib.sh"
. "$root/scripts/real_cases.sh"

# ---- the cases: every base case, or the ones named ------------------------------------
cases=()
for c in "${case_list[@]}"; do
    n=${c%%|*}
    [ "${n%_p1}" != "$n" ] && continue
    if [ $# -gt 0 ]; then
        keep=0
        for arg in "$@"; do
            { [ "$n" = "${arg%_p1}" ] || [[ $n == "${arg}_"* ]]; } && keep=1
        done
        [ $keep -eq 1 ] || continue
    fi
    cases+=("$n")
done
if [ ${#cases[@]} -eq 0 ]; then
    echo "$me: no case named '$*' (scripts/test_real.sh --list shows them)" >&2
    exit 2
fi

real_setup

# ---- running -----------------------------------------------------------------------
# One pass per P: pass "" (the default P, native unpinned) and pass 1.
passes=("" 1)
declare -A vals fail

# run_case NAME MODE: one run in the current pass ($pass); appends its time or records the
# failure. A goshim run needs a native run of the pass before it (its reference outputs).
run_case() {
    local n=$1 mode=$2 key="$1,$2,$pass"
    [ -n "${fail[$key]:-}" ] && return
    w=$tmp/p${pass:-default}/$n
    mkdir -p "$w"
    if [ "$mode" = goshim ] && [ -z "${vals[$n,native,$pass]:-}" ]; then
        fail[$key]="not run: no good native run to compare with"
        return
    fi
    real_prepare "$n"
    real_run "$n" "$mode" "$pass"
    if [ "$run_rc" -eq 0 ]; then
        vals[$key]+="$run_secs "
        return
    fi
    fail[$key]=$run_detail
    if [ "$mode" = goshim ]; then
        goshim_failed "$n${pass:+ at GOSHIM_PROCS=$pass}" "$run_detail" \
            "$(cat "$w/stderr.goshim" "$w/server.goshim" "$w/client.goshim" 2>/dev/null |
                grep -v -e '^goshim stats:' -e '^SCHED [0-9]*ms:' | grep .)"
    else
        echo "$me: $n natively${pass:+ (taskset -c 0)}: $run_detail" >&2
    fi
}

echo "$me: $runs runs per case, mode and P, interleaved, medians; $(nproc) CPUs; scale $scale;" \
    "goshim: $lib"
bench_t0=$EPOCHREALTIME
for pass in "${passes[@]}"; do
    interleave
done

# ratio NAME PASS: goshim/native of the medians so far, or nothing.
ratio() {
    local nm gm
    nm=$(median "${vals[$1,native,$2]:-}" 2>/dev/null) || return 0
    gm=$(median "${vals[$1,goshim,$2]:-}" 2>/dev/null) || return 0
    awk -v a="$nm" -v b="$gm" 'BEGIN { if (a > 0) printf "%.2f", b / a }'
}

# ---- confirming: a case above 1.05x gets more interleaved runs -----------------------
confirm=$(confirm_runs)
declare -A nruns
for pass in "${passes[@]}"; do
    for n in "${cases[@]}"; do
        r=$(ratio "$n" "$pass")
        [ -n "$r" ] && awk -v r="$r" 'BEGIN { exit !(r > 1.05) }' || continue
        echo "$me: $n${pass:+ at P=1} at ${r}x after $runs runs: $confirm more" >&2
        for ((i = runs; i < runs + confirm; i++)); do
            run_pair run_case "$n" "$i"
        done
        nruns[$n,$pass]=$((runs + confirm))
    done
done

# ---- results -----------------------------------------------------------------------
# stats NAME MODE PASS: "median min max" of the times, or nothing.
stats() {
    local v=${vals[$1,$2,$3]:-}
    [ -n "$v" ] || return 0
    echo "$(median "$v") $(tr ' ' '\n' <<<"$v" | grep . | sort -g | sed -n '1p;$p' | tr '\n' ' ')"
}

# fig NAME MODE PASS: "M s (min-max)" or why there is none.
fig() {
    local s
    s=$(stats "$1" "$2" "$3")
    if [ -n "$s" ]; then
        read -r m lo hi <<<"$s"
        printf '%.4f s (%.4f-%.4f)' "$m" "$lo" "$hi"
        [ -n "${fail[$1,$2,$3]:-}" ] && printf ', then failed'
    else
        echo "failed: ${fail[$1,$2,$3]:-not run}"
    fi
}

above=()
table=()
for pass in "${passes[@]}"; do
    for n in "${cases[@]}"; do
        row=$n${pass:+_p1}
        nm=$(stats "$n" native "$pass" | awk '{ print $1 }')
        gm=$(stats "$n" goshim "$pass" | awk '{ print $1 }')
        r=
        [ -n "$nm" ] && [ -n "$gm" ] &&
            r=$(awk -v a="$nm" -v b="$gm" 'BEGIN { if (a > 0) printf "%.2f", b / a }')
        echo "bench_real_$row: native$([ -n "$pass" ] && echo ' (taskset -c 0)')" \
            "$(fig "$n" native "$pass"), goshim$([ -n "$pass" ] && echo ' (GOSHIM_PROCS=1)')" \
            "$(fig "$n" goshim "$pass"), goshim/native ${r:-n/a}${r:+x}" \
            "${nruns[$n,$pass]:+(${nruns[$n,$pass]} runs)}"
        table+=("$(printf '| %-18s | %-7s | %-26s | %-26s | %13s |' "$n" "${pass:-default}" \
            "$(fig "$n" native "$pass")" "$(fig "$n" goshim "$pass")" "${r:-n/a}${r:+x}")")
        # A failed goshim run counts as a failure whatever the times of the runs before it.
        gf=${fail[$n,goshim,$pass]:-}
        if [ -n "$gf" ]; then
            bench_record "$row" "$nm" "" "" s lower
            [[ $gf == not\ run* ]] && above+=("$row (goshim not run)") || above+=("$row (goshim failed)")
        else
            bench_record "$row" "$nm" "$gm" "" s lower
            [ -n "$r" ] && awk -v r="$r" 'BEGIN { exit !(r > 1.05) }' && above+=("$row ${r}x")
        fi
    done
done
echo
printf '| %-18s | %-7s | %-26s | %-26s | %13s |\n' case P "native median (min-max)" \
    "goshim median (min-max)" goshim/native
echo "|--------------------|---------|----------------------------|----------------------------|--------------:|"
printf '%s\n' "${table[@]}"
echo "(wall seconds of each case, $runs runs, $((runs + confirm)) for a case above 1.05x after" \
    "those; P=1: goshim at GOSHIM_PROCS=1 against native pinned to one CPU; $(awk -v a="$bench_t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }') s in all)"
if [ ${#above[@]} -eq 0 ]; then
    echo "$me: no case above 1.05x native"
else
    printf -v list '%s, ' "${above[@]}"
    echo "$me: above 1.05x native (goshim/native of the medians): ${list%, }"
fi
exit $crashed
