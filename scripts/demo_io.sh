#!/usr/bin/env bash
# The blocking-calls demo (part of `make demo`), about a minute:
#   1. one thread blocked in read() while four threads compute, with ONE
#      logical processor under goshim (GOSHIM_PROCS=1): the blocked thread
#      must not hold the processor (natively the kernel just schedules the
#      threads on every CPU)
#   2. a thread-per-connection echo server with 10,000 connections, natively
#      and under goshim: throughput, memory, threads
# The same unmodified programs run both ways; under goshim only the server is
# preloaded (the load generator is a native epoll program).
#
#   usage: scripts/demo_io.sh
# Exits non-zero if a program crashed, hung or failed under goshim.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
progs=$root/build/tests/progs
lib=$root/build/libgoshim.so
for f in "$lib" "$progs"/pbench_{handoff,echo_server,echo_client}; do
    if [ ! -e "$f" ]; then
        echo "demo_io: $f is missing (run make all)" >&2
        exit 1
    fi
done

me=demo_io
. "$(dirname "$0")/bench_lib.sh"
workdir
status=0

heading() {
    echo
    echo "=== $* ==="
}

heading "goshim demo: a thread blocked in the kernel does not stop the others"
cat <<'EOF'
One thread calls read() on a pipe that a child process writes to 300 ms
later; four other threads each compute for ~50 ms. Under goshim, with
GOSHIM_PROCS=1, all five threads share ONE logical processor: the read()
hands it over to the computing threads instead of holding it while it
waits, so the four finish first (at ~50, 100, 150, 200 ms) and the reader
at ~300 ms. Natively, the kernel spreads the threads over this machine's
CPUs (GOSHIM_PROCS means nothing there).
EOF
nat=$(timeout -k 5 30 "$progs/pbench_handoff" pipe 2>&1)
nrc=$?
gos=$(GOSHIM_PROCS=1 LD_PRELOAD=$lib timeout -k 5 30 "$progs/pbench_handoff" pipe 2>&1)
grc=$?
echo
printf '%-52s %s\n' "natively ($(nproc) CPUs):" "under goshim, GOSHIM_PROCS=1:"
paste -d '\n' <(sed 's/^/  /' <<<"$nat") <(sed 's/^/  /' <<<"$gos") |
    awk 'NR % 2 { left = $0; next } { printf "%-52s %s\n", left, $0 }'
if [ $nrc -ne 0 ]; then
    echo "demo_io: the native run failed (status $nrc)" >&2
    status=1
fi
if [ $grc -ne 0 ] || [[ ${gos##*$'\n'} != *order=* ]]; then
    echo "demo_io: the goshim run failed (status $grc)" >&2
    status=1
elif [[ ${gos##*$'\n'} == *order=ok* ]]; then
    echo "-> under goshim the computing threads were not held up by the blocked read()"
else
    echo "-> under goshim the blocked read() held up the computing threads (order=bad)"
fi

heading "goshim demo: 10,000 connections, one thread each"
n=10000
rounds=10
cat <<EOF
pbench_echo_server is written the old way: one thread per connection,
blocking accept(), read() and write(). A native epoll client opens $n
connections (all open at once), then sends $rounds messages of 64 bytes on
each and checks every echoed byte. Natively each connection's thread is a
kernel thread; under goshim it is a task (G), carried by as many OS threads
as goshim needs (the "OS threads" row).
EOF

# nofile_why FILE: the server's "need N file descriptors" complaint, shortened.
nofile_why() {
    grep -m1 'file descriptors' "$1" |
        sed 's/^server: need \([0-9]*\) file descriptors, the hard limit is \([0-9]*\) and raising it failed: \([^(]*\) (.*/needs \1 fds, RLIMIT_NOFILE hard limit \2 cannot be raised (\3)/; s/^server: //; s/ )$/)/'
}

declare -A res
# echo_run MODE: one server (native or preloaded) + client run; fills res[MODE,*].
echo_run() {
    local mode=$1 pf=$tmp/port i cli cli_rc srv_rc killed=0
    rm -f "$pf" "$pf.tmp"
    local start=$SECONDS
    if [ "$mode" = goshim ]; then
        LD_PRELOAD=$lib timeout -k 5 120 "$progs/pbench_echo_server" "$pf" $n \
            >"$tmp/srv.out" 2>"$tmp/srv.err" &
    else
        timeout -k 5 120 "$progs/pbench_echo_server" "$pf" $n >"$tmp/srv.out" 2>"$tmp/srv.err" &
    fi
    bg_pid=$!
    for ((i = 0; i < 300; i++)); do
        [ -s "$pf" ] || ! kill -0 $bg_pid 2>/dev/null && break
        sleep 0.1
    done
    cli="(not started: the server wrote no port)"
    cli_rc=1
    if [ -s "$pf" ]; then
        cli=$(PBENCH_STALL_S=15 timeout -k 5 60 "$progs/pbench_echo_client" "$pf" $n $rounds 64 2>&1)
        cli_rc=$?
    fi
    local grace=150 # the server exits once every connection reached EOF
    [ $cli_rc -ne 0 ] && grace=20
    reap_bg $grace
    srv_rc=$bg_rc
    local sline cline
    sline=$(grep '^server:' "$tmp/srv.out" | tail -1)
    cline=$(grep '^client:' <<<"$cli" | tail -1)
    res[$mode,secs]=$((SECONDS - start))
    if [ $srv_rc -eq 0 ] && [ $cli_rc -eq 0 ]; then
        res[$mode,ok]=1
        res[$mode,tput]=$(sed -n 's/.*msgs_per_s=\([0-9]*\).*/\1/p' <<<"$cline")
        res[$mode,open]=$(sed -n 's/.*open_seconds=\([0-9.]*\).*/\1/p' <<<"$cline")
        res[$mode,rss]=$(sed -n 's/.*vmhwm_kb=\([0-9]*\).*/\1/p' <<<"$sline")
        res[$mode,thr]=$(sed -n 's/.*peak_threads=\([0-9]*\).*/\1/p' <<<"$sline")
        res[$mode,os]=$(sed -n 's/.*os_threads=\([0-9]*\).*/\1/p' <<<"$sline")
        return 0
    fi
    res[$mode,ok]=0
    local msg
    if [[ $sline == *"pthread_create failed"* ]]; then
        msg=${sline#server: }
    elif grep -q 'file descriptors' "$tmp/srv.err"; then
        msg="cannot run here: $(nofile_why "$tmp/srv.err")"
    elif [ $killed -eq 1 ]; then
        msg="server stuck; ${cline:-client: ${cli##*$'\n'}}"
    else
        msg="server status $srv_rc (${sline:-$(tail -1 "$tmp/srv.err")}), client status $cli_rc (${cline:-${cli##*$'\n'}})"
    fi
    grep -q 'thread limit reached' "$tmp/srv.err" && msg+=" [goshim hit GOSHIM_MAXTHREADS]"
    res[$mode,msg]=$msg
    return 1
}

echo
echo "running natively ..."
echo_run native
echo "running under goshim ..."
if ! echo_run goshim; then
    [[ ${res[goshim,msg]} == "cannot run here"* ]] || status=1
fi

cell() { # cell MODE KEY: a formatted figure, or "-"
    local mode=$1 key=$2
    if [ "${res[$mode,ok]}" != 1 ]; then
        echo "-"
        return
    fi
    case $key in
    tput) printf "%'d msg/s" "${res[$mode,tput]}" ;;
    rss) awk -v k="${res[$mode,rss]}" 'BEGIN { printf "%.0f MiB", k / 1024 }' ;;
    thr) printf "%'d" "${res[$mode,thr]}" ;;
    os) printf "%'d" "${res[$mode,os]}" ;;
    open) echo "${res[$mode,open]} s" ;;
    secs) echo "${res[$mode,secs]} s" ;;
    esac
}
echo
printf '| %-44s | %-16s | %-16s |\n' "$n connections x $rounds echoes" native "goshim"
printf '|%s|%s|%s|\n' "----------------------------------------------" "------------------" "------------------"
printf '| %-44s | %16s | %16s |\n' "echo throughput (exchanges per second)" "$(cell native tput)" "$(cell goshim tput)" \
    "server peak memory (VmHWM)" "$(cell native rss)" "$(cell goshim rss)" \
    "threads the program made (+ main)" "$(cell native thr)" "$(cell goshim thr)" \
    "OS threads when all connections were open" "$(cell native os)" "$(cell goshim os)" \
    "time to open all connections" "$(cell native open)" "$(cell goshim open)" \
    "whole run, wall clock" "$(cell native secs)" "$(cell goshim secs)"
for mode in native goshim; do
    [ "${res[$mode,ok]}" = 1 ] || echo "$mode: ${res[$mode,msg]}"
done
[ "${res[native,ok]}" = 1 ] || [[ ${res[native,msg]} == "cannot run here"* ]] || status=1
echo
echo "(full figures, medians and the 30,000-connection case: scripts/bench_io.sh, part of make bench)"
exit $status
