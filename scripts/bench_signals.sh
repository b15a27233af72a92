#!/usr/bin/env bash
# Signal, timer and process benchmarks (issue 28 item 4): what a process pays for goshim outside its
# threads' scheduling - fork, spawning programs, signals and timers - natively
# and under LD_PRELOAD=build/libgoshim.so, alternately, in the same run;
# figures are medians.
#
#   usage: scripts/bench_signals.sh
#   GOSHIM_BENCH_RUNS   repetitions per case and mode (default 5; the stress-ng
#                       cases take at most 3, they last 2 s each)
#   GOSHIM_TEST_SCALE   scales the fork counts
#   GOSHIM_BENCH_CONFIRM  more interleaved runs for a case below speed 0.95 after the
#                       first ones (default 6), as bench_real does above 1.05x
#
# Cases:
#   timer_threaded       tests/progs/pbench_signals timer: a POSIX timer's signal
#                        every 50 us to a process with 4 parked threads: signals
#                        handled per second (the kernel's 20,000 natively), and
#                        the expirations counted with overruns
#   sigpending_threaded  pbench_signals sigpending: ns per call, 4 parked threads
#   fork_*, spawn_exec   tests/progs/pbench_fork: fork+_exit+waitpid from a
#                        process of one thread, and from one with 4 parked
#                        threads; fork+exec of /bin/true (us per child)
#   stress_<name>        stress-ng --<name> 1 for 2 s: bogo ops per second of
#                        real time (one process of one thread per stressor, as
#                        most of what a program spawns)
# Output: one line per case,
#   "bench_signals_<name>: native X, goshim Y, goshim/native speed Z"
# (speed > 1: goshim is faster), then a Markdown table marking each case
# against issue 28's target, no slower than natively (speed >= 0.95). The
# exit status is non-zero only if a program crashed, hung or failed under
# goshim.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
progs=$root/build/tests/progs
lib=$root/build/libgoshim.so
me=bench_signals
. "$(dirname "$0")/bench_lib.sh"

for f in "$lib" "$progs/pbench_fork" "$progs/pbench_signals"; do
    if [ ! -e "$f" ]; then
        echo "$me: $f is missing (run make all)" >&2
        exit 1
    fi
done
have_stress=1
if ! command -v stress-ng >/dev/null; then
    have_stress=0
    echo "$me: stress-ng is not installed (scripts/setup.sh installs it): its cases are left out" >&2
fi
stress_runs=$((runs < 3 ? runs : 3))

# name | command | unit (us, ns: lower is better; ops, sig: higher is better)
nf=$(sc 300)
cases=(
    "timer_threaded|pbench_signals timer $(sc 1000) 4|sig"
    "sigpending_threaded|pbench_signals sigpending $(sc 200000) 4|ns"
    "fork_one_thread|pbench_fork $nf|us"
    "fork_4_threads|pbench_fork $nf threads 4|us"
    "spawn_exec|pbench_fork $(sc 200) exec|us"
)
if [ $have_stress -eq 1 ]; then
    for s in timer sigpending session zombie sigabrt hrtimers pipeherd fork sigsegv sock; do
        cases+=("stress_$s|stress-ng --$s 1 -t 2 --metrics-brief|ops")
    done
fi

declare -A vals fail expir

run_case() {
    local spec=$1 mode=$2 name cmd unit out rc v
    IFS='|' read -r name cmd unit <<<"$spec"
    [ -n "${fail[$name,$mode]:-}" ] && return
    read -r -a argv <<<"$cmd"
    [[ ${argv[0]} == pbench_* ]] && argv[0]=$progs/${argv[0]}
    if [ "$mode" = goshim ]; then
        out=$(cd "$tmp" && LD_PRELOAD=$lib timeout -k 5 120 "${argv[@]}" 2>&1)
    else
        out=$(cd "$tmp" && timeout -k 5 120 "${argv[@]}" 2>&1)
    fi
    rc=$?
    if [ "$unit" = us ]; then
        v=$(field "${out##*$'\n'}" us_per_child)
    elif [ "$unit" = ns ]; then
        v=$(field "${out##*$'\n'}" ns_per_op)
    elif [ "$unit" = sig ]; then
        v=$(field "${out##*$'\n'}" signals_per_s)
        local x
        x=$(field "${out##*$'\n'}" expirations_per_s)
        [ -n "$x" ] && expir[$name,$mode]+="$x "
    else # the stressor's first line: bogo ops/s of real time is the 9th field
        v=$(awk -v s="${name#stress_}" '$2 == "metrc:" && $4 == s && NF == 10 { print $9; exit }' \
            <<<"$out")
    fi
    if [ $rc -eq 0 ] && [ -n "$v" ]; then
        vals[$name,$mode]+="$v "
        return
    fi
    fail[$name,$mode]=$(why $rc 120 "${out##*$'\n'}")
    [ "$mode" = goshim ] && goshim_failed "$name" "${fail[$name,$mode]}" "$out"
}

skip_case() {
    [[ $1 == stress_* ]] && [ "$2" -ge $stress_runs ]
}
workdir
interleave

hwcap2=$(LD_SHOW_AUXV=1 /bin/true | awk '/AT_HWCAP2/ { print $2 }')
fsbase="arch_prctl syscall (kernel did not enable FSGSBASE)"
(( ${hwcap2:-0} & 2 )) && fsbase=wrfsbase
echo "$me: $runs repetitions ($stress_runs for stress-ng), medians; $(nproc) CPUs;" \
    "scale $scale; FS base written with $fsbase"

# medians NAME: n and g, its medians so far natively and under goshim (empty: none).
medians() {
    n="" g=""
    [ -z "${fail[$1,native]:-}" ] && n=$(median "${vals[$1,native]:-}" 2>/dev/null)
    [ -z "${fail[$1,goshim]:-}" ] && g=$(median "${vals[$1,goshim]:-}" 2>/dev/null)
    return 0
}

# speed UNIT: goshim's speed over native's from n and g (above 1: goshim is faster), or
# nothing.
speed() {
    [ -n "$n" ] && [ -n "$g" ] || return 0
    if [ "$1" = us ] || [ "$1" = ns ]; then
        awk -v n="$n" -v g="$g" 'BEGIN { if (g > 0) printf "%.2f", n / g }'
    else
        awk -v n="$n" -v g="$g" 'BEGIN { if (n > 0) printf "%.2f", g / n }'
    fi
}

# ---- confirming: a case below speed 0.95 gets more interleaved runs ------------------
confirm=$(confirm_runs)
for spec in "${cases[@]}"; do
    IFS='|' read -r name cmd unit <<<"$spec"
    medians "$name"
    s=$(speed "$unit")
    [ -n "$s" ] && awk -v s="$s" 'BEGIN { exit !(s < 0.95) }' || continue
    have=$runs
    [[ $name == stress_* ]] && have=$stress_runs
    echo "$me: $name at speed $s after $have runs: $confirm more" >&2
    for ((i = have; i < have + confirm; i++)); do
        run_pair run_case "$spec" "$i"
    done
done

table=()
for spec in "${cases[@]}"; do
    IFS='|' read -r name cmd unit <<<"$spec"
    medians "$name"
    s=$(speed "$unit")
    u="us/child"
    [ "$unit" = ops ] && u="ops/s"
    [ "$unit" = ns ] && u="ns/call"
    [ "$unit" = sig ] && u="signals/s"
    nt=${n:+$n $u}
    gt=${g:+$g $u}
    echo "bench_signals_$name: native ${nt:-${fail[$name,native]}}," \
        "goshim ${gt:-${fail[$name,goshim]}}, goshim/native speed ${s:-n/a}" \
        ${expir[$name,native]:+"(expirations/s counted: native $(median "${expir[$name,native]}"), goshim $(median "${expir[$name,goshim]:-0}"))"}
    better=higher
    [ "$unit" = us ] || [ "$unit" = ns ] && better=lower
    bench_record "$name" "$n" "$g" "" "$u" $better
    result=missed
    [ -n "$s" ] && awk -v s="$s" 'BEGIN { exit !(s >= 0.95) }' && result=met
    table+=("$(printf '| %-20s | %-20s | %-20s | %6s | %-6s |' "$name" "${nt:-failed}" \
        "${gt:-failed}" "${s:-n/a}" "$result")")
done
echo
printf '| %-20s | %-20s | %-20s | %6s | %-6s |\n' case "native (median)" "goshim (median)" \
    speed ">=0.95"
echo "|----------------------|----------------------|----------------------|-------:|--------|"
printf '%s\n' "${table[@]}"
exit $crashed
