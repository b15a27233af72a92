# Shared by the benchmark drivers (bench_*.sh), test_real.sh and demo_io.sh:
# source it after setting `me` (the driver's name, for messages). It sets
# `runs` (GOSHIM_BENCH_RUNS, 1..1000, default 5) and `scale`
# (GOSHIM_TEST_SCALE, a positive number, default 1) and defines:
#   sc N                       N scaled, at least 1
#   goshim_failed WHAT TEXT [OUTPUT]
#                              report a failure under goshim; sets crashed=1
#   why RC TIMEOUT LASTLINE    a failure in words
#   interleave                 run the driver's cases, alternating native and goshim
#   median "V V V..."          the median of the values
#   field LINE KEY             the number after "KEY=" in LINE
#   reap_bg TENTHS             end the background process $bg_pid (below)
#   workdir                    a temporary directory $tmp, removed (with $bg_pid) at exit
#   bench_record NAME NATIVE GOSHIM GO UNIT BETTER
#                              a row for make bench's closing summary (below)

runs=${GOSHIM_BENCH_RUNS:-5}
if ! [[ $runs =~ ^[0-9]+$ ]] || [ "$runs" -lt 1 ] || [ "$runs" -gt 1000 ]; then
    echo "$me: GOSHIM_BENCH_RUNS must be 1..1000, not '$runs'; using 5" >&2
    runs=5
fi
scale=${GOSHIM_TEST_SCALE:-1}
if ! awk -v s="$scale" 'BEGIN { exit !(s + 0 > 0) }'; then
    echo "$me: GOSHIM_TEST_SCALE must be a positive number, not '$scale'; using 1" >&2
    scale=1
fi

sc() {
    awk -v n="$1" -v s="$scale" 'BEGIN { r = int(n * s); print (r < 1 ? 1 : r) }'
}

crashed=0
goshim_failed() {
    crashed=1
    echo "$me: $1 under goshim: $2" >&2
    [ -n "${3:-}" ] && sed 's/^/    /' <<<"$3" | tail -5 >&2
}

why() {
    if [ "$1" -eq 124 ] || [ "$1" -eq 137 ]; then
        echo "hung (killed after ${2}s)"
    elif [ "$1" -gt 128 ]; then
        echo "crashed (signal $(($1 - 128)))"
    else
        echo "exit status $1: $3"
    fi
}

# interleave: $runs repetitions; each takes every spec of the driver's array `cases` once,
# natively and under goshim back to back (the driver's run_case SPEC MODE), the first of the
# two swapped every other repetition. A driver may define skip_case SPEC R, true to leave
# SPEC out of repetition R.
interleave() {
    local r spec
    for ((r = 0; r < runs; r++)); do
        for spec in "${cases[@]}"; do
            declare -F skip_case >/dev/null && skip_case "$spec" "$r" && continue
            run_pair run_case "$spec" "$r"
        done
    done
}

# run_pair FN SPEC R: FN SPEC native and FN SPEC goshim, native first when R is even.
run_pair() {
    if (($3 % 2 == 0)); then
        "$1" "$2" native
        "$1" "$2" goshim
    else
        "$1" "$2" goshim
        "$1" "$2" native
    fi
}

# confirm_runs: GOSHIM_BENCH_CONFIRM (default 6), the interleaved runs more that a case
# slower than its target after the first ones gets (bench_real, bench_signals): one noisy
# batch of a few seconds is not a verdict.
confirm_runs() {
    local c=${GOSHIM_BENCH_CONFIRM:-6}
    if ! [[ $c =~ ^[0-9]+$ ]] || [ "$c" -gt 1000 ]; then
        echo "$me: GOSHIM_BENCH_CONFIRM must be 0..1000, not '$c'; using 6" >&2
        c=6
    fi
    echo "$c"
}

median() {
    tr ' ' '\n' <<<"$1" | grep . | sort -g |
        awk '{ v[NR] = $1 } END { if (NR == 0) exit 1; print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'
}

field() {
    sed -n "s/.*\\b$2=\\([0-9.]*\\).*/\\1/p" <<<"$1"
}

# reap_bg TENTHS: wait up to TENTHS tenths of a second for the background
# process $bg_pid to exit, then kill it if it has not; sets killed (0 or 1)
# and bg_rc (its exit status), and clears bg_pid.
reap_bg() {
    local i
    killed=0
    for ((i = 0; i < $1; i++)); do
        kill -0 "$bg_pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$bg_pid" 2>/dev/null; then
        killed=1
        kill "$bg_pid" 2>/dev/null
    fi
    wait "$bg_pid"
    bg_rc=$?
    bg_pid=
}

# workdir: make the temporary directory $tmp; at exit, end the background
# process $bg_pid (if any) and remove $tmp; INT or TERM end the script (130).
workdir() {
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/$me.XXXXXX") || exit 1
    bg_pid=
    trap '[ -n "$bg_pid" ] && kill "$bg_pid" 2>/dev/null; rm -rf "$tmp"' EXIT
    trap 'exit 130' INT TERM
}

# bench_record NAME NATIVE GOSHIM GO UNIT BETTER: when GOSHIM_BENCH_SUMMARY names a file
# (make bench sets it), appends one tab-separated row to it for scripts/bench_summary.sh:
# the driver ($me), the case NAME, its medians natively, under goshim and in Go (empty or
# "-": none, as when a run failed or there is no Go twin), their UNIT, and BETTER: "lower"
# for a time, "higher" for a rate.
bench_record() {
    [ -n "${GOSHIM_BENCH_SUMMARY:-}" ] || return 0
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$me" "$1" "${2:--}" "${3:--}" "${4:--}" "$5" "$6" \
        >>"$GOSHIM_BENCH_SUMMARY"
}
