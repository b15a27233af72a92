#!/usr/bin/env bash
# Blocking-call benchmarks (netpoller, system-call hand-off, timers): plain
# pthread programs (tests/progs/pbench_*.c), each run natively and under
# LD_PRELOAD=build/libgoshim.so, alternately, in the same run; figures are
# medians.
#
#   usage: scripts/bench_io.sh
#   GOSHIM_BENCH_RUNS   repetitions per case and mode (default 5); the echo
#                       cases take at most 3 (the 30k one at most 2)
#   GOSHIM_TEST_SCALE   scales the sizes (round counts, connection counts)
#
# Cases:
#   (a) pipe_pingpong   two threads, two pipes, blocking read/write: ns per
#                       round trip; ratio = native / goshim (> 1: goshim faster);
#                       and pipe_pingpong_procs: the same between two processes
#                       of one thread each (goshim's single-thread path)
#   (b) syscalls        the same ping-pong under `strace -f -c`, natively and
#                       under goshim, with 1 round and with N: the difference
#                       / (N - 1) gives the steady-state system calls per round
#                       trip (data = read/write/readv/writev/preadv2/pwritev2/
#                       recv*/send*; epoll_wait = any epoll_*wait*)
#   (c) echo_1k/10k/30k thread-per-connection echo server with blocking
#                       accept/read/write (pbench_echo_server), natively and
#                       under goshim (the server only); the load generator
#                       (pbench_echo_client: epoll, one thread) always native.
#                       Exchanges per second, server peak RSS (VmHWM), threads
#   (d) handoff         one thread blocked in read (pipe) or write+fsync, four
#                       CPU-bound threads; GOSHIM_PROCS=1 (natively that means
#                       nothing: the kernel schedules on every CPU)
# then a Markdown table of the targets marked met/missed. The targets are
# informational: the exit status is non-zero only if a program crashed, hung
# or computed a wrong result under goshim. A case that fails stops being
# repeated in that mode. Natively the 30k echo server stops at pid_max
# ("native: cannot (pid_max)"); that is information, not a failure. Neither
# is a run the machine cannot host (RLIMIT_NOFILE hard limit below the
# connection count and not raisable): it is reported as "cannot run here".
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
progs=$root/build/tests/progs
lib=$root/build/libgoshim.so

for f in "$lib" "$progs"/pbench_{pipe_pingpong,echo_server,echo_client,handoff}; do
    if [ ! -e "$f" ]; then
        echo "bench_io: $f is missing (run make all)" >&2
        exit 1
    fi
done
for t in strace timeout; do
    if ! command -v $t >/dev/null; then
        echo "bench_io: $t is missing (run scripts/setup.sh)" >&2
        exit 1
    fi
done

me=bench_io
. "$(dirname "$0")/bench_lib.sh"
echo_runs=$((runs < 3 ? runs : 3))
echo30_runs=$((runs < 2 ? runs : 2))

workdir


# nofile_why FILE: the server's "need N file descriptors" complaint, shortened.
nofile_why() {
    grep -m1 'file descriptors' "$1" |
        sed 's/^server: need \([0-9]*\) file descriptors, the hard limit is \([0-9]*\) and raising it failed: \([^(]*\) (.*/needs \1 fds, RLIMIT_NOFILE hard limit \2 cannot be raised (\3)/; s/^server: //; s/ )$/)/'
}

# in_mode MODE CMD...: run CMD natively or with the library preloaded.
in_mode() {
    local mode=$1
    shift
    case $mode in
    goshim) LD_PRELOAD=$lib "$@" ;;
    goshim1) GOSHIM_PROCS=1 LD_PRELOAD=$lib "$@" ;;
    *) "$@" ;;
    esac
}

hwcap2=$(LD_SHOW_AUXV=1 /bin/true | awk '/AT_HWCAP2/ { print $2 }')
if ((${hwcap2:-0} & 2)); then
    fsbase="wrfsbase"
else
    fsbase="arch_prctl syscall (kernel did not enable FSGSBASE)"
fi
echo "bench_io: $runs repetitions ($echo_runs for echo 1k/10k, $echo30_runs for 30k), medians;" \
    "$(nproc) CPUs; scale $scale; FS base written with $fsbase;" \
    "RLIMIT_NOFILE $(ulimit -Sn)/$(ulimit -Hn); pid_max $(cat /proc/sys/kernel/pid_max)"

declare -A vals fail

# ---- (a) pipe ping-pong --------------------------------------------------------
pp_rounds=$(sc 10000)
# pp_run KEY MODE [procs]: one run of the threads' (pp) or the processes' (pq) ping-pong.
pp_run() {
    local key=$1 mode=$2 out rc v
    [ -n "${fail[$key,$mode]:-}" ] && return
    out=$(in_mode "$mode" timeout -k 5 60 "$progs/pbench_pipe_pingpong" "$pp_rounds" "${@:3}" 2>&1)
    rc=$?
    v=$(field "${out##*$'\n'}" ns_per_roundtrip)
    if [ $rc -eq 0 ] && [ -n "$v" ]; then
        vals[$key,$mode]+="$v "
        return
    fi
    fail[$key,$mode]=$(why $rc 60 "${out##*$'\n'}")
    [ "$mode" != native ] && goshim_failed "pipe_pingpong $*" "${fail[$key,$mode]}" "$out"
}
# goshim with the default Ps and with GOSHIM_PROCS=1 (the two threads then
# hand off on one OS thread: no cross-CPU wake-ups at all).
for ((r = 0; r < runs; r++)); do
    if ((r % 2 == 0)); then
        pp_run pp native
        pp_run pp goshim
        pp_run pp goshim1
        pp_run pq native procs
        pp_run pq goshim procs
    else
        pp_run pq goshim procs
        pp_run pq native procs
        pp_run pp goshim1
        pp_run pp goshim
        pp_run pp native
    fi
done
declare -A med
for key in pp pq; do
    for mode in native goshim goshim1; do
        [ -z "${fail[$key,$mode]:-}" ] && [ -n "${vals[$key,$mode]:-}" ] &&
            med[$key,$mode]=$(median "${vals[$key,$mode]}")
    done
done
# pp_fig MODE [KEY]: the median of KEY's runs (default pp) in MODE, or why there is none.
pp_fig() {
    local key=${2:-pp}
    if [ -n "${med[$key,$1]:-}" ]; then
        awk -v v="${med[$key,$1]}" 'BEGIN { printf "%.0f ns/round trip", v }'
    else
        echo "${fail[$key,$1]}"
    fi
}
pp_ratio_of() {
    local key=${2:-pp}
    [ -n "${med[$key,native]:-}" ] && [ -n "${med[$key,$1]:-}" ] &&
        awk -v a="${med[$key,native]}" -v b="${med[$key,$1]}" 'BEGIN { if (b > 0) printf "%.2f", a / b }'
}
pp_ratio=$(pp_ratio_of goshim)
pp_ratio1=$(pp_ratio_of goshim1)
pq_ratio=$(pp_ratio_of goshim pq)
echo "bench_io_pipe_pingpong: $pp_rounds round trips, native $(pp_fig native)," \
    "goshim $(pp_fig goshim), ratio ${pp_ratio:-n/a}${pp_ratio:+x};" \
    "goshim GOSHIM_PROCS=1 $(pp_fig goshim1), ratio ${pp_ratio1:-n/a}${pp_ratio1:+x}"
echo "bench_io_pipe_pingpong_procs: $pp_rounds round trips, native $(pp_fig native pq)," \
    "goshim $(pp_fig goshim pq), ratio ${pq_ratio:-n/a}${pq_ratio:+x}"
bench_record pipe_pingpong "${med[pp,native]:-}" "${med[pp,goshim]:-}" "" ns/round_trip lower
bench_record pipe_pingpong_p1 "${med[pp,native]:-}" "${med[pp,goshim1]:-}" "" ns/round_trip lower
bench_record pipe_pingpong_procs "${med[pq,native]:-}" "${med[pq,goshim]:-}" "" ns/round_trip lower

# ---- (b) system calls per round trip (strace -c) ----------------------------------
# A 1-round run gives the cost of start-up and exit; (calls in an N-round run -
# calls in it) / (N - 1) is the steady state per round trip. It includes what
# idle threads do meanwhile (a timed sleep, a futex wait), as it should. strace
# slows every call ~10x (goshim's futex traffic much more): a small N.
st_n=$(sc 3000)
[ "$st_n" -lt 2 ] && st_n=2
# st_per BASE FILE N: "data epoll futex total others" per round trip, from two
# strace -c summaries; others = the two most frequent other calls, "name=x,...".
st_per() {
    awk -v d=$(($3 - 1)) '
        $4 ~ /^[0-9]+$/ { c[$NF] += (FILENAME == ARGV[1] ? -$4 : $4) }
        END {
            for (n in c) {
                v = c[n] / d
                if (n == "total") tot += v
                else if (n ~ /^(read|write|readv|writev|preadv2|pwritev2|recv.*|send.*)$/) data += v
                else if (n ~ /^epoll_(p?wait2?)$/) ep += v
                else if (n == "futex") fx += v
                else if (v >= 0.05) {
                    if (v > v1) { n2 = n1; v2 = v1; n1 = n; v1 = v }
                    else if (v > v2) { n2 = n; v2 = v }
                }
            }
            others = (n1 == "" ? "-" : sprintf("%s=%.2f", n1, v1)) (n2 == "" ? "" : sprintf(",%s=%.2f", n2, v2))
            printf "%.2f %.2f %.2f %.2f %s\n", z(data), z(ep), z(fx), z(tot), others
        }
        function z(v) { return v < 0.005 && v > -0.005 ? 0 : v }' "$1" "$2"
}
declare -A sc_per # mode -> "data epoll futex total others" per round trip
for mode in native goshim goshim1; do
    for rr in 1 "$st_n"; do
        sfile=$tmp/strace.$mode.$rr
        if [ "$mode" = goshim ]; then
            out=$(timeout -k 5 120 strace -f -c -o "$sfile" -E "LD_PRELOAD=$lib" \
                "$progs/pbench_pipe_pingpong" "$rr" 2>&1)
        elif [ "$mode" = goshim1 ]; then
            out=$(timeout -k 5 120 strace -f -c -o "$sfile" -E "LD_PRELOAD=$lib" \
                -E GOSHIM_PROCS=1 "$progs/pbench_pipe_pingpong" "$rr" 2>&1)
        else
            out=$(timeout -k 5 120 strace -f -c -o "$sfile" "$progs/pbench_pipe_pingpong" "$rr" 2>&1)
        fi
        rc=$?
        if [ $rc -ne 0 ] || [ -z "$(field "${out##*$'\n'}" ns_per_roundtrip)" ] || [ ! -s "$sfile" ]; then
            fail[st,$mode]="under strace: $(why $rc 120 "${out##*$'\n'}")"
            [ "$mode" != native ] && goshim_failed "pipe_pingpong (strace)" "${fail[st,$mode]}" "$out"
            break
        fi
    done
    [ -n "${fail[st,$mode]:-}" ] && continue
    sc_per[$mode]=$(st_per "$tmp/strace.$mode.1" "$tmp/strace.$mode.$st_n" "$st_n")
done
st_fig() {
    if [ -n "${sc_per[$1]:-}" ]; then
        read -r d e f t o <<<"${sc_per[$1]}"
        echo "$d data, $e epoll_wait, $f futex, $t total${o:+ (other: ${o//,/, })}" | sed 's/ (other: -)//'
    else
        echo "${fail[st,$1]}"
    fi
}
echo "bench_io_syscalls: per round trip (strace -f -c, $st_n rounds minus 1 round):" \
    "native $(st_fig native); goshim $(st_fig goshim); goshim GOSHIM_PROCS=1 $(st_fig goshim1)"

# ---- (c) echo server ------------------------------------------------------------
size=64
stall=15
# name | connections | rounds each | client timeout (s) | repetitions
echo_cases=(
    "echo_1k|$(sc 1000)|$(sc 100)|60|$echo_runs"
    "echo_10k|$(sc 10000)|$(sc 10)|90|$echo_runs"
    "echo_30k|$(sc 30000)|$(sc 5)|120|$echo30_runs"
)
declare -A thr rss pth oth info

# echo_run SPEC MODE: one server+client run; appends figures or records why not.
echo_run() {
    local name n rounds tmo reps mode=$2
    IFS='|' read -r name n rounds tmo reps <<<"$1"
    [ -n "${fail[$name,$mode]:-}" ] || [ -n "${info[$name,$mode]:-}" ] && return
    local pf=$tmp/port srv_out=$tmp/server.out srv_err=$tmp/server.err cli_out cli_rc
    rm -f "$pf" "$pf.tmp"
    # A simple command, so that $! is the timeout process itself (not a subshell).
    local pre=()
    [ "$mode" = goshim ] && pre=(env "LD_PRELOAD=$lib")
    "${pre[@]}" timeout -k 5 $((tmo + 60)) "$progs/pbench_echo_server" "$pf" "$n" \
        >"$srv_out" 2>"$srv_err" &
    bg_pid=$!
    # Wait for the port (or for the server to give up) before starting the client.
    local i
    for ((i = 0; i < 300; i++)); do
        [ -s "$pf" ] || ! kill -0 $bg_pid 2>/dev/null && break
        sleep 0.1
    done
    if [ -s "$pf" ]; then
        cli_out=$(PBENCH_STALL_S=$stall timeout -k 5 "$tmo" "$progs/pbench_echo_client" \
            "$pf" "$n" "$rounds" "$size" 2>&1)
        cli_rc=$?
    else
        cli_out="(client not started: the server wrote no port)"
        cli_rc=-1
    fi
    # The server exits once every connection reached EOF; give it 15 s (2 s
    # if the client failed: then it surely waits for connections that never come).
    local srv_rc grace=150
    [ "$cli_rc" -ne 0 ] && grace=20
    reap_bg $grace
    srv_rc=$bg_rc
    local sline serr cline cap=""
    sline=$(grep '^server:' "$srv_out" | tail -1)
    serr=$(grep -v '^goshim: thread limit' "$srv_err" | tail -1)
    cline=$(grep '^client:' <<<"$cli_out" | tail -1)
    grep -q 'thread limit reached' "$srv_err" && cap=" (goshim hit its GOSHIM_MAXTHREADS cap)"
    # The client's failure in words (its own "client: ..." line when it has one).
    local cwhy
    if [ "$cli_rc" -eq 124 ] || [ "$cli_rc" -eq 137 ]; then
        cwhy="client hung (killed after ${tmo}s)"
    elif [ "$cli_rc" -gt 128 ]; then
        cwhy="client crashed (signal $((cli_rc - 128)))"
    else
        cwhy=${cline:-"client: exit status $cli_rc: ${cli_out##*$'\n'}"}
    fi
    if [ $srv_rc -eq 3 ] && [[ $sline == *"pthread_create failed"* ]]; then
        if [ "$mode" = native ]; then
            info[$name,$mode]="cannot (pid_max): ${sline#server: }"
        else
            fail[$name,$mode]="${sline#server: }"
        fi
    elif [ $srv_rc -eq 1 ] && grep -q 'file descriptors' "$srv_err"; then
        info[$name,$mode]="cannot run here: $(nofile_why "$srv_err")"
    elif [ $killed -eq 1 ] || [ $srv_rc -eq 124 ] || [ $srv_rc -eq 137 ]; then
        if [ "$cli_rc" -ne 0 ]; then
            fail[$name,$mode]="server stuck; $cwhy$cap"
        else
            fail[$name,$mode]="server did not exit after the client finished$cap"
        fi
    elif [ $srv_rc -ne 0 ]; then
        fail[$name,$mode]="server: $(why $srv_rc $((tmo + 60)) "${sline:-$serr}")$cap"
    elif [ "$cli_rc" -ne 0 ]; then
        fail[$name,$mode]="$cwhy$cap"
    elif [ -z "$(field "$cline" msgs_per_s)" ] || [ -z "$(field "$sline" vmhwm_kb)" ]; then
        fail[$name,$mode]="no result line: client '$cline', server '$sline'"
    else
        thr[$name,$mode]+="$(field "$cline" msgs_per_s) "
        rss[$name,$mode]+="$(field "$sline" vmhwm_kb) "
        pth[$name,$mode]+="$(field "$sline" peak_threads) "
        oth[$name,$mode]+="$(field "$sline" os_threads) "
        return
    fi
    if [ "$mode" = goshim ] && [ -n "${fail[$name,$mode]:-}" ]; then
        goshim_failed "$name" "${fail[$name,$mode]}" \
            "$(cat "$srv_out" "$srv_err"; echo "$cli_out")"
    fi
}

for ((r = 0; r < echo_runs; r++)); do
    for spec in "${echo_cases[@]}"; do
        IFS='|' read -r name n rounds tmo reps <<<"$spec"
        [ $r -ge "$reps" ] && continue
        run_pair echo_run "$spec" "$r"
    done
done

declare -A mthr mrss mpth moth
for spec in "${echo_cases[@]}"; do
    IFS='|' read -r name n rounds tmo reps <<<"$spec"
    for mode in native goshim; do
        if [ -n "${thr[$name,$mode]:-}" ]; then
            mthr[$name,$mode]=$(median "${thr[$name,$mode]}")
            mrss[$name,$mode]=$(median "${rss[$name,$mode]}")
            mpth[$name,$mode]=$(median "${pth[$name,$mode]}")
            moth[$name,$mode]=$(median "${oth[$name,$mode]}")
            if [ -n "${fail[$name,$mode]:-}" ]; then
                fail[$name,$mode]+=" (after $(wc -w <<<"${thr[$name,$mode]}") good runs)"
            fi
        fi
    done
done

# echo_fig NAME MODE [short]: the medians in words, or why there are none.
echo_fig() {
    local name=$1 mode=$2
    if [ -n "${fail[$name,$mode]:-}" ]; then
        echo "${fail[$name,$mode]}"
    elif [ -n "${info[$name,$mode]:-}" ]; then
        echo "${info[$name,$mode]}"
    elif [ -n "${mthr[$name,$mode]:-}" ]; then
        if [ "${3:-}" = short ]; then
            awk -v t="${mthr[$name,$mode]}" -v k="${mrss[$name,$mode]}" \
                'BEGIN { printf "%.0f msg/s, %.0f MiB", t, k / 1024 }'
        else
            awk -v t="${mthr[$name,$mode]}" -v k="${mrss[$name,$mode]}" -v p="${mpth[$name,$mode]}" \
                -v o="${moth[$name,$mode]}" \
                'BEGIN { printf "%.0f msgs/s, peak RSS %.1f MiB, %d threads (%d OS threads)", t, k / 1024, p, o }'
        fi
    else
        echo "not run"
    fi
}
# echo_ratio NAME: goshim / native throughput (= native time / goshim time).
echo_ratio() {
    local a=${mthr[$1,native]:-} b=${mthr[$1,goshim]:-}
    [ -n "$a" ] && [ -n "$b" ] && awk -v a="$a" -v b="$b" 'BEGIN { if (a > 0) printf "%.2f", b / a }'
}
for spec in "${echo_cases[@]}"; do
    IFS='|' read -r name n rounds tmo reps <<<"$spec"
    r=$(echo_ratio "$name")
    echo "bench_io_$name: $n connections x $rounds exchanges of $size bytes," \
        "native $(echo_fig "$name" native), goshim $(echo_fig "$name" goshim), ratio ${r:-n/a}${r:+x}"
    # Natively past pid_max, or a machine that cannot host the run: information, no row.
    [ -n "${info[$name,goshim]:-}" ] ||
        bench_record "$name" "${mthr[$name,native]:-}" "${mthr[$name,goshim]:-}" "" msg/s higher
done

# ---- (d) the hand-off demo ----------------------------------------------------------
declare -A ho
for hmode in pipe fsync; do
    for mode in native goshim; do
        out=$(GOSHIM_PROCS=1 in_mode "$mode" timeout -k 5 60 "$progs/pbench_handoff" "$hmode" 2>&1)
        rc=$?
        last=${out##*$'\n'}
        label="natively (2 CPUs, GOSHIM_PROCS ignored)"
        [ "$mode" = goshim ] && label="under goshim, GOSHIM_PROCS=1"
        echo "bench_io_handoff_$hmode, $label:"
        sed 's/^/    /' <<<"$out"
        if [ $rc -ne 0 ] || [[ $last != *order=* ]]; then
            ho[$hmode,$mode]=$(why $rc 60 "$last")
            [ "$mode" = goshim ] && goshim_failed "handoff $hmode" "${ho[$hmode,$mode]}" "$out"
        else
            ho[$hmode,$mode]="CPU threads done at $(field "$last" cpu_all_done_ms) ms, blocked at $(field "$last" blocked_done_ms) ms, order ${last##*order=}"
        fi
    done
done

# ---- summary table -----------------------------------------------------------------
row() { printf '| %-20s | %-44s | %-44s | %9s | %-34s | %-8s |\n' "$@"; }
echo
row case "native (median)" "goshim (median)" speed-up target result
echo "|----------------------|----------------------------------------------|----------------------------------------------|----------:|------------------------------------|----------|"
# (a)
res=missed
[ -n "$pp_ratio" ] && awk -v r="$pp_ratio" 'BEGIN { exit !(r >= 5) }' && res=met
row pipe_pingpong "$(pp_fig native)" "$(pp_fig goshim)" "${pp_ratio:-n/a}${pp_ratio:+x}" \
    ">= 5x faster than native" "$res"
res=missed
[ -n "$pp_ratio1" ] && awk -v r="$pp_ratio1" 'BEGIN { exit !(r >= 5) }' && res=met
row "pipe_pingpong P=1" "$(pp_fig native)" "$(pp_fig goshim1)" "${pp_ratio1:-n/a}${pp_ratio1:+x}" \
    ">= 5x faster than native" "$res"
res=missed
[ -n "$pq_ratio" ] && awk -v r="$pq_ratio" 'BEGIN { exit !(r >= 0.95) }' && res=met
row "pipe_pingpong_procs" "$(pp_fig native pq)" "$(pp_fig goshim pq)" "${pq_ratio:-n/a}${pq_ratio:+x}" \
    "one thread: as native (>= 0.95x)" "$res"
# (b)
res=missed
if [ -n "${sc_per[goshim]:-}" ]; then
    read -r d e f t o <<<"${sc_per[goshim]}"
    awk -v d="$d" -v e="$e" 'BEGIN { exit !(d <= 4.05 && e <= 0.01) }' && res=met
fi
row "syscalls/round trip" "$(st_fig native)" "$(st_fig goshim)" - \
    "<= 4 data syscalls, no epoll_wait" "$res"
res=missed
if [ -n "${sc_per[goshim1]:-}" ]; then
    read -r d e f t o <<<"${sc_per[goshim1]}"
    awk -v d="$d" -v e="$e" 'BEGIN { exit !(d <= 4.05 && e <= 0.01) }' && res=met
fi
row "syscalls/rt P=1" "$(st_fig native)" "$(st_fig goshim1)" - \
    "<= 4 data syscalls, no epoll_wait" "$res"
# (c)
row echo_1k "$(echo_fig echo_1k native short)" "$(echo_fig echo_1k goshim short)" \
    "$(r=$(echo_ratio echo_1k); echo "${r:-n/a}${r:+x}")" "(info)" -
res=missed
r10=$(echo_ratio echo_10k)
[ -n "$r10" ] && awk -v r="$r10" -v a="${mrss[echo_10k,native]}" -v b="${mrss[echo_10k,goshim]}" \
    'BEGIN { exit !(r >= 1 && b * 4 <= a) }' && res=met
row echo_10k "$(echo_fig echo_10k native short)" "$(echo_fig echo_10k goshim short)" \
    "${r10:-n/a}${r10:+x}" ">= native msg/s, <= 1/4 native RSS" "$res"
if [ -n "${mthr[echo_30k,goshim]:-}" ]; then
    res=met
elif [ -n "${info[echo_30k,goshim]:-}" ]; then
    res=untested
else
    res=missed
fi
row echo_30k "$(echo_fig echo_30k native short)" "$(echo_fig echo_30k goshim short)" \
    "$(r=$(echo_ratio echo_30k); echo "${r:-n/a}${r:+x}")" "completes under goshim" "$res"
# (d)
for hmode in pipe fsync; do
    row "handoff_$hmode" "${ho[$hmode,native]}" "${ho[$hmode,goshim]} (P=1)" - "(info)" -
done
echo "(targets of the blocking-calls issue, informational; speed-up = native / goshim median time," \
    "for echo goshim / native throughput; data syscalls = read/write/readv/writev/preadv2/pwritev2/recv*/send*;" \
    "untested = the machine cannot host the run)"
exit $crashed
