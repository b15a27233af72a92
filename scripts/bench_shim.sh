#!/usr/bin/env bash
# Shim benchmarks (issue 3): plain pthread programs (tests/progs/pbench_*.c),
# each run natively and under LD_PRELOAD=build/libgoshim.so, alternately,
# in the same run; figures are medians.
#
#   usage: scripts/bench_shim.sh
#   GOSHIM_BENCH_RUNS   repetitions per case and mode (default 5); the blocked-
#                       thread cases take at most 3, they cost seconds each
#   GOSHIM_TEST_SCALE   scales the sizes (loop counts and thread counts)
#
# Output: one line per case,
#   "bench_shim_<name>: N ops, native X, goshim Y, ratio Z"
# (ratio = native / goshim: how many times faster goshim is), then a Markdown
# table of the issue's targets marked met/missed. The targets are
# informational: the exit status is non-zero only if a program crashed,
# hung or computed a wrong result under goshim. A case that fails stops
# being repeated in that mode; natively the 100k (perhaps also the 30k)
# blocked-thread case stops at pid_max, which is reported as information.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
progs=$root/build/tests/progs
lib=$root/build/libgoshim.so

for f in "$lib" "$progs"/pbench_{create_join,cond_pingpong,pipeline,chase,mutex_uncontended,mutex_contended,blocked_threads,malloc}; do
    if [ ! -e "$f" ]; then
        echo "bench_shim: $f is missing (run make all)" >&2
        exit 1
    fi
done

me=bench_shim
. "$(dirname "$0")/bench_lib.sh"
blocked_runs=$((runs < 3 ? runs : 3))

# ---- the cases ---------------------------------------------------------------
# name | program and arguments | ops per run | kind (ns or blocked) | timeout (s)
batches=$(sc 2)
pp_rounds=$(sc 10000)
cases=(
    "create_join_seq|pbench_create_join seq $(sc 2000)|$(sc 2000)|ns|60"
    "create_join_batch1000|pbench_create_join batch $batches 1000|$((batches * 1000))|ns|60"
    "cond_pingpong|pbench_cond_pingpong $pp_rounds|$((2 * pp_rounds))|ns|60"
    "mutex_uncontended|pbench_mutex_uncontended $(sc 5000000)|$(sc 5000000)|ns|60"
    "rdlock_uncontended|pbench_mutex_uncontended $(sc 5000000) rdlock|$(sc 5000000)|ns|60"
    # The same in a process that never makes a thread: goshim's runtime off, its
    # wrappers hand the calls to glibc (node's start makes 700,000 such rwlock pairs).
    "mutex_lone|pbench_mutex_uncontended $(sc 5000000) mutex lone|$(sc 5000000)|ns|60"
    "rdlock_lone|pbench_mutex_uncontended $(sc 5000000) rdlock lone|$(sc 5000000)|ns|60"
    # Reader -> worker -> writer, one 32 KiB block per link: ns per block (a thief that
    # slept 50 us for a runnext G made it 1.4x native's; pigz -d is such a chain).
    "pipeline_32k|pbench_pipeline $(sc 5000) 32768|$(sc 5000)|ns|60"
    # Four threads that only compute, each chasing pointers through a 4 MiB table of its
    # own: rotated at the tick, each must resume on the CPU it left (sent to the global
    # queue at every preemption, they ran 1.6x slower than natively).
    "chase_4x4m|pbench_chase 4 $(sc 4000000) 4096|$((4 * $(sc 4000000)))|ns|60"
)
for t in 2 8 64; do
    k=$(sc $((1000000 / t)))
    cases+=("mutex_contended_$t|pbench_mutex_contended $t $k|$((t * k))|ns|60")
done
# Threads allocating at once: each keeps a malloc arena of its own (a regression that shared
# one per P made it 10x slower, and only a throwaway program saw it).
cases+=("malloc_4_threads|pbench_malloc 4 $(sc 500000)|$((4 * $(sc 500000)))|ns|60")
for n in 10000 30000 100000; do
    cases+=("blocked_$((n / 1000))k|pbench_blocked_threads $(sc $n)|$(sc $n)|blocked|120")
done

# ---- running -------------------------------------------------------------------
declare -A vals   # "<case>,<mode>" -> space-separated figures (ns/op or seconds)
declare -A rss    # "<case>,<mode>" -> space-separated peak RSS figures (KiB)
declare -A fail   # "<case>,<mode>" -> why it stopped
crashed=0

# run_case CASE MODE: one run; appends its figure or records the failure.
run_case() {
    local spec=$1 mode=$2 name cmd ops kind tmo out rc
    IFS='|' read -r name cmd ops kind tmo <<<"$spec"
    [ -n "${fail[$name,$mode]:-}" ] && return
    read -r -a argv <<<"$cmd"
    argv[0]=$progs/${argv[0]}
    if [ "$mode" = goshim ]; then
        out=$(LD_PRELOAD=$lib timeout -k 5 "$tmo" "${argv[@]}" 2>&1)
    else
        out=$(timeout -k 5 "$tmo" "${argv[@]}" 2>&1)
    fi
    rc=$?
    local line=${out##*$'\n'}
    if [ $rc -eq 0 ]; then
        local key=ns_per_op
        [ "$kind" = blocked ] && key=seconds
        local v
        v=$(sed -n "s/.*\\b$key=\\([0-9.]*\\).*/\\1/p" <<<"$line")
        if [ -n "$v" ]; then
            vals[$name,$mode]+="$v "
            [ "$kind" = blocked ] &&
                rss[$name,$mode]+="$(sed -n 's/.*peak_rss_kb=\([0-9]*\).*/\1/p' <<<"$line") "
            return
        fi
        fail[$name,$mode]="no result line: $line"
    elif [ $rc -eq 2 ] && [[ $line == failed_after=* ]]; then
        fail[$name,$mode]="failed after $(sed -n 's/failed_after=\([0-9]*\).*/\1/p' <<<"$line") threads"
    elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        fail[$name,$mode]="hung (killed after ${tmo}s)"
    elif [ $rc -gt 128 ]; then
        fail[$name,$mode]="crashed (signal $((rc - 128)))"
    else
        fail[$name,$mode]="exit status $rc: $line"
    fi
    if [ "$mode" = goshim ] && [[ ${fail[$name,$mode]} != failed\ after* ]]; then
        crashed=1
        echo "bench_shim: $name under goshim: ${fail[$name,$mode]}" >&2
        [ -n "$out" ] && sed 's/^/    /' <<<"$out" | tail -5 >&2
    fi
}

# The blocked-thread cases take fewer repetitions.
skip_case() {
    [[ $1 == *"|blocked|"* ]] && [ "$2" -ge $blocked_runs ]
}
interleave

# ---- results -------------------------------------------------------------------

declare -A med medrss
# Bit 1 of AT_HWCAP2: the kernel lets user space run wrfsbase.
hwcap2=$(LD_SHOW_AUXV=1 /bin/true | awk '/AT_HWCAP2/ { print $2 }')
if (( ${hwcap2:-0} & 2 )); then
    fsbase="wrfsbase"
else
    fsbase="arch_prctl syscall (kernel did not enable FSGSBASE)"
fi
echo "bench_shim: $runs repetitions ($blocked_runs for blocked threads), medians;" \
    "$(nproc) CPUs; scale $scale; FS base written with $fsbase"
for spec in "${cases[@]}"; do
    IFS='|' read -r name cmd ops kind tmo <<<"$spec"
    for mode in native goshim; do
        if [ -z "${fail[$name,$mode]:-}" ]; then
            med[$name,$mode]=$(median "${vals[$name,$mode]}")
            [ "$kind" = blocked ] && medrss[$name,$mode]=$(median "${rss[$name,$mode]}")
        elif [ -n "${vals[$name,$mode]:-}" ]; then
            fail[$name,$mode]+=" (after $(wc -w <<<"${vals[$name,$mode]}") good runs)"
        fi
    done
done

# fig CASE MODE: the median with its unit, or why there is none.
fig() {
    local name=$1 mode=$2 kind=$3
    if [ -n "${fail[$name,$mode]:-}" ]; then
        echo "${fail[$name,$mode]}"
    elif [ "$kind" = blocked ]; then
        awk -v s="${med[$name,$mode]}" -v k="${medrss[$name,$mode]}" \
            'BEGIN { printf "%.3f s, peak RSS %.1f MiB", s, k / 1024 }'
    else
        echo "${med[$name,$mode]} ns/op"
    fi
}

# ratio CASE: native / goshim medians, or empty.
ratio() {
    local a=${med[$1,native]:-} b=${med[$1,goshim]:-}
    [ -n "$a" ] && [ -n "$b" ] && awk -v a="$a" -v b="$b" 'BEGIN { if (b > 0) printf "%.2f", a / b }'
}

# ratio_text CASE: "Zx" or "n/a".
ratio_text() {
    local r
    r=$(ratio "$1")
    echo "${r:-n/a}${r:+x}"
}

for spec in "${cases[@]}"; do
    IFS='|' read -r name cmd ops kind tmo <<<"$spec"
    echo "bench_shim_$name: $ops ops, native $(fig "$name" native "$kind")," \
        "goshim $(fig "$name" goshim "$kind"), ratio $(ratio_text "$name")"
    unit=ns/op
    [ "$kind" = blocked ] && unit=s
    bench_record "$name" "${med[$name,native]:-}" "${med[$name,goshim]:-}" "" $unit lower
done

# ---- summary table -------------------------------------------------------------
# row CASE TARGET-TEXT CHECK: CHECK is an awk condition on r (native/goshim),
# or "-" for an informational row.
row() {
    local name=$1 target=$2 check=$3 kind=ns spec r result
    for spec in "${cases[@]}"; do
        [[ $spec == "$name|"* ]] && [[ $spec == *"|blocked|"* ]] && kind=blocked
    done
    r=$(ratio "$name")
    if [ "$check" = - ]; then
        result=-
    elif [ -z "$r" ]; then
        result=missed
    elif awk -v r="$r" "BEGIN { exit !($check) }"; then
        result=met
    else
        result=missed
    fi
    printf '| %-22s | %-34s | %-34s | %8s | %-26s | %-6s |\n' "$name" \
        "$(fig "$name" native $kind)" "$(fig "$name" goshim $kind)" "$(ratio_text "$name")" \
        "$target" "$result"
}

echo
printf '| %-22s | %-34s | %-34s | %8s | %-26s | %-6s |\n' case "native (median)" \
    "goshim (median)" "speed-up" target result
echo "|------------------------|------------------------------------|------------------------------------|---------:|----------------------------|--------|"
row create_join_seq ">= 100x" "r >= 100"
row create_join_batch1000 ">= 100x" "r >= 100"
row cond_pingpong ">= 20x (one-way hand-off)" "r >= 20"
row pipeline_32k ">= 1x (as fast as native)" "r >= 1"
row chase_4x4m ">= 1x (as fast as native)" "r >= 1"
row mutex_uncontended "goshim <= 1.3x glibc ns" "r >= 1 / 1.3"
row rdlock_uncontended "goshim <= 1.3x glibc ns" "r >= 1 / 1.3"
row mutex_lone "goshim <= 1.2x glibc ns" "r >= 1 / 1.2"
row rdlock_lone "goshim <= 1.2x glibc ns" "r >= 1 / 1.2"
row mutex_contended_2 ">= 2x throughput" "r >= 2"
row mutex_contended_8 ">= 2x throughput" "r >= 2"
row mutex_contended_64 ">= 2x throughput" "r >= 2"
row malloc_4_threads "goshim <= 1.1x glibc ns" "r >= 1 / 1.1"
row blocked_10k "(info)" -
row blocked_30k "(info)" -
# 100k blocked threads: goshim must succeed within 1 GiB; native may fail.
n100=blocked_100k
if [ -z "${fail[$n100,goshim]:-}" ] &&
    awk -v k="${medrss[$n100,goshim]}" 'BEGIN { exit !(k <= 1048576) }'; then
    res=met
else
    res=missed
fi
printf '| %-22s | %-34s | %-34s | %8s | %-26s | %-6s |\n' "$n100" \
    "$(fig $n100 native blocked)" "$(fig $n100 goshim blocked)" \
    "$(ratio_text $n100)" "succeeds, RSS <= 1 GiB" "$res"
echo "(targets from issue 3, informational; speed-up = native / goshim median time;" \
    "ping-pong's other target, <= 10x the FS-base switch floor, is in bench_sched's figures)"
exit $crashed
