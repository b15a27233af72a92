# shellcheck shell=bash
# The real-program suite's cases, shared by scripts/test_real.sh (the suite:
# every case once natively and once under goshim, checked) and
# scripts/bench_real.sh (the same cases timed, repeated, interleaved). Source
# it after setting `root` (the tree), `lib` (the library to preload) and `me`
# (the driver's name, for messages), and after scripts/bench_lib.sh (sc, why,
# scale). It defines:
#   case_list              "name|description" of every case, in run order
#   real_packages          the Debian packages the cases need: installs the
#                          missing ones as root, else prints the command, exit 1
#   real_workdir           the work directory $tmp (removed at exit, with a
#                          server left running, unless GOSHIM_REAL_KEEP=1),
#                          the per-command timeout $tmo, the input paths
#   real_setup             real_packages, the library's presence, real_workdir
#   real_prepare NAME      makes NAME's inputs (outside any timing)
#   real_run NAME MODE [PROCS]
#                          one run of case NAME (its base name: no _p1) in
#                          MODE (native or goshim), at PROCS Ps (goshim) or
#                          pinned to PROCS CPUs (native; empty: neither), in
#                          $w (made by the caller): sets run_rc (0: passed
#                          every check), run_secs (wall seconds, 4 decimals,
#                          without the time of comparing outputs)
#                          and run_detail (why it failed), appends to note[NAME]
# A goshim run compares its outputs with the native run's files in $w: the
# native run of a case must come first (once).

realdir=$root/tests/real

# name|description (the order is the run order)
case_list=(
    "pigz|pigz -p 4: compress, decompress, byte-identical"
    "xz|xz -T0 (1 MiB blocks): compress, decompress, byte-identical"
    "zstd|zstd -T0: compress, decompress, byte-identical"
    "pbzip2|pbzip2 -p4: compress, decompress, byte-identical"
    "lbzip2|lbzip2 -n 4: compress, decompress, byte-identical"
    "sort|sort --parallel=4 -S 40M: output equal to native"
    "sysbench_threads|sysbench threads, 4 threads, fixed event count: all events done"
    "sysbench_mutex|sysbench mutex, 4 threads: one event per thread"
    "stressng_pthread|stress-ng --pthread 2, bounded ops: successful run, ops done"
    "stressng_mutex|stress-ng --mutex 2, bounded ops: successful run, ops done"
    "stressng_futex|stress-ng --futex 2, bounded ops: successful run, ops done"
    "py_threads|python3 tests/real/py_threads.py: output equal to native"
    "rg|rg -j4 over a generated tree: sorted output equal to native"
    "cxx_threads|tests/real/cxx_threads.cc (std::thread & co): output equal to native"
    "memcached|memcached -t 4, 8 client threads set/get every key, SIGTERM: exit 0"
    "redis|redis-server --io-threads 4, client threads + redis-benchmark, SHUTDOWN: exit 0"
    "redis_p1|the same at GOSHIM_PROCS=1, natively pinned to one CPU"
    "mariadb|mariadbd, sysbench oltp_read_write 8 threads: all events, row counts, SIGTERM: exit 0"
    "node|node worker_threads taking turns with Atomics.wait/notify: output equal to native"
    "node_p1|the same at GOSHIM_PROCS=1, natively pinned to one CPU"
)

# Also in scripts/setup.sh (make bench), which installs them for bench_real.sh.
real_package_list="pigz xz-utils zstd pbzip2 lbzip2 coreutils sysbench stress-ng python3 ripgrep
    memcached redis-server redis-tools mariadb-server mariadb-client g++ procps util-linux nodejs"

real_packages() {
    local pkg status missing=()
    for pkg in $real_package_list; do
        status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
        [ "$status" = "install ok installed" ] || missing+=("$pkg")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -eq 0 ]; then
        echo "$me: installing ${missing[*]}" >&2
        apt-get -o DPkg::Lock::Timeout=300 update -qq
        DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq \
            "${missing[@]}" >/dev/null
    else
        echo "$me: missing Debian packages: ${missing[*]}; run this, then retry:" >&2
        echo "sudo apt-get install -y ${missing[*]}"
        exit 1
    fi
}

real_workdir() {
    # Per-command timeout: 120 s, more at larger scales.
    tmo=$(sc 120)
    [ "$tmo" -lt 120 ] && tmo=120
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/$me.XXXXXX")
    srv_pid=
    real_inputs "$tmp"
    trap real_cleanup EXIT
    trap 'exit 130' INT TERM
}

real_setup() {
    real_packages
    if [ ! -e "$lib" ]; then
        echo "$me: $lib is missing (run make)" >&2
        exit 1
    fi
    real_workdir
}

# real_inputs DIR: the cases' inputs are (or will be made) in DIR. tests/real/soak_case.sh
# points every run of a soak at the same ones: rg prints their paths.
real_inputs() {
    inputs=$1
    data=$inputs/data.txt
    bz_data=$inputs/bz_data.txt
    sort_in=$inputs/sort_in.txt
    tree=$inputs/tree
}

real_cleanup() {
    # srv_pid is the timeout(1) process: it passes SIGTERM on to the server.
    [ -n "$srv_pid" ] && reap_server TERM 20 2>/dev/null
    if [ "${GOSHIM_REAL_KEEP:-0}" = 1 ]; then
        echo "$me: work directory kept: $tmp" >&2
    else
        rm -rf "$tmp"
    fi
}

# ---- running a command natively or under goshim --------------------------------------
# Set per run by real_run (bottom): pre (the env prefix), err (the stderr log).
mode=native
pre=()
err=/dev/null
detail=

# x CMD...: CMD in the current mode, with the timeout. timeout(1) itself is
# never preloaded: env is what sets LD_PRELOAD, for the program only.
x() {
    timeout -k 5 "$tmo" "${pre[@]}" "$@"
}

# lastline FILE...: the last line of the files that is not goshim's (stats, trace, chaos banner).
lastline() {
    cat "$@" 2>/dev/null | grep -v -e '^goshim stats:' -e '^goshim: chaos mode, seed ' \
        -e '^SCHED [0-9]*ms:' | grep . | tail -1 || true
}

# step WHAT OUT CMD...: x CMD with stdout to OUT and stderr appended to $err;
# on failure sets detail ("WHAT: why") and returns 1.
step() {
    local what=$1 out=$2 rc=0
    shift 2
    x "$@" >"$out" 2>>"$err" || rc=$?
    if [ $rc -ne 0 ]; then
        local last
        last=$(lastline "$err")
        [ -n "$last" ] || last=$(tail -c 2000 "$out" | grep -a . | tail -1 || true)
        detail="$what: $(why $rc "$tmo" "$last")"
        return 1
    fi
}

# same WHAT A B: fails (sets detail) unless files A and B are identical. Its time is
# not the program's: it goes to untimed_us (only goshim runs compare), in microseconds
# from EPOCHREALTIME's digits (six decimals; the point is the locale's), with shell
# arithmetic: an awk there ran after the clock was read, and its 2-3 ms a call (a fork
# and an exec) went to goshim's time, 5 ms of rg's 33 a case.
same() {
    local t0 rc=0
    t0=${EPOCHREALTIME//[!0-9]/}
    cmp -s "$2" "$3" || rc=$?
    local t1=${EPOCHREALTIME//[!0-9]/}
    untimed_us=$((untimed_us + 10#$t1 - 10#$t0))
    if [ $rc -ne 0 ]; then
        detail="$1: differs from the reference ($(cmp "$2" "$3" 2>&1 | head -1))"
        return 1
    fi
}

# nonempty WHAT FILE
nonempty() {
    if [ ! -s "$2" ]; then
        detail="$1: empty output"
        return 1
    fi
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_server LOG CMD...: CMD in the current mode, in the background; srv_pid
# is its timeout(1) process (a simple command, so that $! is not a subshell).
start_server() {
    local log=$1
    shift
    timeout -k 5 "$tmo" "${pre[@]}" "$@" >"$log" 2>>"$err" &
    srv_pid=$!
}

# wait_ready WHAT CMD...: retry CMD (a readiness probe, run natively with a
# 2 s timeout) for up to 15 s; fails if the server exits or never answers. Retried
# every 20 ms: bench_real times the whole case, and at 200 ms a server ready 10 ms
# later than the other mode's could cost it 200 (mariadb read 1.10-1.17x so).
wait_ready() {
    local what=$1 end=$((SECONDS + 15))
    shift
    while [ $SECONDS -lt $end ]; do
        if ! kill -0 "$srv_pid" 2>/dev/null; then
            reap_server none 0 2>/dev/null
            detail="$what exited at start-up: $(why $srv_rc "$tmo" "$(lastline "$err")")"
            return 1
        fi
        timeout -k 1 2 "$@" >/dev/null 2>&1 && return 0
        sleep 0.02
    done
    detail="$what never answered (15 s)"
    return 1
}

# reap_server SIG TENTHS: send SIG to the server's timeout(1), which passes it
# on ("none": send nothing; "KILL": no grace), wait up to TENTHS tenths of a
# second (looking every 10 ms, for wait_ready's reason), then SIGKILL the server (timeout's child) and timeout, by PID, in
# that order (a killed timeout would leave the server running). Sets srv_rc
# and srv_killed (0 or 1), clears srv_pid. Call it with 2>/dev/null: bash
# reports a killed job there.
reap_server() {
    local i c
    srv_killed=0
    srv_rc=0
    [ "$1" = none ] || [ "$1" = KILL ] || kill -"$1" "$srv_pid" || true
    for ((i = 0; i < $2 * 10; i++)); do
        kill -0 "$srv_pid" || break
        sleep 0.01
    done
    if kill -0 "$srv_pid"; then
        srv_killed=1
        for c in $(ps -o pid= --ppid "$srv_pid" || true); do
            task_states "$c" >>"$w/server.$mode" || true
            kill -KILL "$c" || true
        done
        kill -KILL "$srv_pid" || true
    fi
    wait "$srv_pid" || srv_rc=$?
    srv_pid=
}

# task_states PID: one line per thread of a stuck server, for the log: state,
# kernel wait channel, blocked and pending signals.
task_states() {
    local t
    for t in /proc/"$1"/task/*; do
        echo "stuck server: task ${t##*/} state $(awk '{ print $3 }' "$t/stat")" \
            "wchan $(cat "$t/wchan")" \
            "$(grep -E '^(SigBlk|SigPnd)' "$t/status" | tr -s '\t\n' '  ')"
    done
}

# kill_server WHAT: after a failed client, end the server; adds to detail
# whether it had exited on its own (and how) or was still running.
kill_server() {
    local what=$1
    [ -n "$srv_pid" ] || return 0
    reap_server KILL 0 2>/dev/null
    if [ $srv_killed -eq 1 ]; then
        detail+=" ($what was still running)"
    else
        detail+=" ($what had exited: $(why $srv_rc "$tmo" "$(lastline "$err")"))"
    fi
    # A server that reports its own crash (redis: "crashed by signal") and lives on.
    local said
    said=$(grep -a -h -m1 -iE 'crashed by signal|segmentation fault|assertion|panic' \
        "$w/server.$mode" "$err" 2>/dev/null | head -1 || true)
    [ -n "$said" ] && detail+="; its log: ${said:0:160}"
    return 0
}

# stop_server WHAT [SIGNAL]: send SIGNAL (default TERM; "none": the server was
# asked to exit already), wait up to 15 s; fails unless the server exits 0.
stop_server() {
    local what=$1 sig=${2:-TERM}
    [ -n "$srv_pid" ] || return 0
    reap_server "$sig" 150 2>/dev/null
    if [ $srv_killed -eq 1 ]; then
        detail="$what did not exit within 15 s of ${sig/none/SHUTDOWN} (killed)"
        return 1
    fi
    if [ $srv_rc -ne 0 ]; then
        detail="$what after ${sig/none/SHUTDOWN}: $(why $srv_rc "$tmo" "$(lastline "$err")")"
        return 1
    fi
}

# ---- inputs (made once, before any timing) -------------------------------------------
# gen_text FILE BYTES: reproducible text (Park-Miller generator, exact in
# awk's doubles), about 3:1 compressible.
gen_text() {
    awk -v bytes="$2" 'BEGIN {
        nw = split("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima " \
                   "mike november oscar papa quebec romeo sierra tango uniform victor whiskey " \
                   "xray yankee zulu goshim thread mutex futex sched steal", w, " ")
        x = 42; n = 0; i = 0
        while (n < bytes) {
            x = (x * 16807) % 2147483647; a = w[x % nw + 1]
            x = (x * 16807) % 2147483647; b = w[x % nw + 1]
            x = (x * 16807) % 2147483647
            line = sprintf("%08d %s %s %d", i++, a, b, x)
            print line
            n += length(line) + 1
        }
    }' >"$1"
}
need_data() {
    [ -s "$data" ] || gen_text "$data" "$(sc $((24 * 1024 * 1024)))"
}

# bzip2 compresses about 10 times slower than gzip: a third of the text.
need_bz_data() {
    [ -s "$bz_data" ] || gen_text "$bz_data" "$(sc $((8 * 1024 * 1024)))"
}

need_sort_in() {
    [ -s "$sort_in" ] && return
    awk -v n="$(sc 2000000)" 'BEGIN {
        x = 7
        for (i = 0; i < n; i++) {
            x = (x * 16807) % 2147483647
            printf "%08x %d\n", x, i
        }
    }' >"$sort_in"
}

need_tree() {
    [ -d "$tree" ] && return
    local ndirs d
    ndirs=$(sc 40)
    for ((d = 0; d < ndirs; d++)); do
        mkdir -p "$(printf '%s/d%03d' "$tree" $d)"
    done
    awk -v ndirs="$ndirs" -v dir="$tree" 'BEGIN {
        x = 11
        for (d = 0; d < ndirs; d++) {
            for (f = 0; f < 50; f++) {
                fn = sprintf("%s/d%03d/f%03d.txt", dir, d, f)
                for (l = 0; l < 120; l++) {
                    x = (x * 16807) % 2147483647
                    printf "line %d value %d%s%s\n", l, x % 100000, \
                        (x % 97 == 0 ? " NEEDLE" : ""), (x % 13 == 0 ? " Goshim" : "") > fn
                }
                close(fn)
            }
        }
    }'
}

cxx_bin=$root/build/real/cxx_threads
need_cxx() {
    if [ ! -x "$cxx_bin" ] || [ "$realdir/cxx_threads.cc" -nt "$cxx_bin" ]; then
        mkdir -p "$(dirname "$cxx_bin")"
        g++ -std=c++17 -O2 -g -pthread -Wall -Wextra -o "$cxx_bin" "$realdir/cxx_threads.cc"
    fi
}

# mariadb's data directory: made once (natively) in $inputs, used by every run of the case
# (in a soak, by every run of every process); each run drops and re-creates the database its
# workload uses.
mariadb_dir=
need_mariadb() {
    [ -n "$mariadb_dir" ] && return
    local user=()
    [ "$(id -u)" -eq 0 ] && user=(--user=root)
    if [ ! -d "$inputs/mariadb-data" ]; then
        rm -rf "$inputs/mariadb-data.new"
        if ! timeout -k 5 "$tmo" mariadb-install-db --no-defaults "${user[@]}" \
            --datadir="$inputs/mariadb-data.new" --auth-root-authentication-method=normal \
            --skip-test-db >"$inputs/mariadb-install.log" 2>&1; then
            echo "$me: mariadb-install-db failed: $(tail -1 "$inputs/mariadb-install.log")" >&2
            return 1
        fi
        mv "$inputs/mariadb-data.new" "$inputs/mariadb-data"
    fi
    mariadb_dir=$inputs/mariadb-data
}

# Tasks per run in a PID namespace (stress-ng): possible as root only.
can_count=0
unshare -p -f --kill-child true 2>/dev/null && can_count=1

# xt TASKFILE CMD...: like x, in a new PID namespace; afterwards TASKFILE
# holds the number of PIDs CMD used (the namespace's next PID minus the
# shell's and the probe's).
xt() {
    local tf=$1
    shift
    # shellcheck disable=SC2016 # the inner sh expands these
    timeout -k 5 "$tmo" unshare -p -f --kill-child sh -c \
        '"$@"; rc=$?; p=$(sh -c "echo \$\$"); echo $((p - 2)) >"$0"; exit $rc' \
        "$tf" "${pre[@]}" "$@"
}

# ---- the cases ---------------------------------------------------------------------
# c_NAME: one run in $mode; work files in $w ($tmp/NAME); outputs named
# *.$mode. Returns non-zero with detail set on failure. Goshim runs compare
# with the native run's files. want_gs: the least gs_created expected.
declare -A want_gs=([stressng_pthread]=1 [stressng_mutex]=1 [stressng_futex]=1)
# start_now: cases whose goshim run starts the runtime at load (GOSHIM_START=now).
# stress-ng's stressors end with _exit, which prints no stats: only the parent's line can
# show goshim ran, and the parent makes no thread of its own (by default it would run
# natively and say only that the runtime did not start).
declare -A start_now=([stressng_pthread]=1 [stressng_mutex]=1 [stressng_futex]=1)
declare -A note
# trace_proof: cases whose program leaves with _exit (lbzip2), which prints no stats: their
# goshim run has sysmon trace the scheduler every 10 ms (GOSHIM_SCHEDTRACE), and a `SCHED`
# line with more than one thread shows the runtime ran them.
declare -A trace_proof=([lbzip2]=1)

# round_trip INPUT EXT TOOL ARGS...: TOOL ARGS -c compresses INPUT into z.EXT, TOOL ARGS -dc
# gives it back, byte-identical.
round_trip() {
    local in=$1 ext=$2
    shift 2
    step compress "$w/z.$ext.$mode" "$@" -c "$in" || return 1
    step decompress "$w/out.$mode" "$@" -dc "$w/z.$ext.$mode" || return 1
    same "round trip" "$in" "$w/out.$mode"
}

c_pigz() { need_data && round_trip "$data" gz pigz -p 4; }
c_xz() { need_data && round_trip "$data" xz xz -T0 -1 --block-size=1MiB; }
c_zstd() { need_data && round_trip "$data" zst zstd -q -T0 -3; }
c_pbzip2() { need_bz_data && round_trip "$bz_data" bz2 pbzip2 -p4; }
c_lbzip2() { need_bz_data && round_trip "$bz_data" bz2 lbzip2 -n 4; }

c_sort() {
    need_sort_in
    mkdir -p "$w/t.$mode"
    step sort "$w/out.$mode" sort --parallel=4 -S 40M -T "$w/t.$mode" "$sort_in" || return 1
    nonempty sort "$w/out.$mode" || return 1
    [ "$mode" = native ] || same "sorted output" "$w/out.native" "$w/out.$mode"
}

# events FILE: sysbench's "total number of events".
events() {
    sed -n 's/^ *total number of events: *\([0-9]*\).*/\1/p' "$1" | head -1
}

c_sysbench_threads() {
    local n
    n=$(sc 1000)
    step "sysbench threads" "$w/out.$mode" \
        sysbench threads --threads=4 --thread-locks=4 --events="$n" --time=0 run || return 1
    if [ "$(events "$w/out.$mode")" != "$n" ]; then
        detail="total number of events '$(events "$w/out.$mode")', not $n"
        return 1
    fi
}

c_sysbench_mutex() {
    step "sysbench mutex" "$w/out.$mode" sysbench mutex --threads=4 --mutex-num=64 \
        --mutex-locks="$(sc 400000)" --mutex-loops=100 run || return 1
    if [ "$(events "$w/out.$mode")" != 4 ]; then
        detail="total number of events '$(events "$w/out.$mode")', not 4 (one per thread)"
        return 1
    fi
}

# stressng NAME OPS: one stressor, 2 instances, bounded ops; in a PID namespace
# when possible (tasks in note).
stressng() {
    local s=$1 ops=$2 rc=0 out=$w/out.$mode tf=$w/tasks.$mode
    local cmd=(stress-ng "--$s" 2 "--$s-ops" "$ops" --metrics-brief -t 100)
    [ "$s" = mutex ] && [ "$(id -u)" -eq 0 ] && cmd=(setpriv --bounding-set=-sys_nice "${cmd[@]}")
    if [ $can_count -eq 1 ]; then
        xt "$tf" "${cmd[@]}" >"$out" 2>&1 || rc=$?
    else
        x "${cmd[@]}" >"$out" 2>&1 || rc=$?
    fi
    grep '^goshim stats:' "$out" >>"$err" || true
    if [ $rc -ne 0 ]; then
        detail="stress-ng: $(why $rc "$tmo" "$(grep -E 'fail|error' "$out" | tail -1)")"
        return 1
    fi
    if ! grep -q 'successful run completed' "$out"; then
        detail="no 'successful run completed' line"
        return 1
    fi
    local done_ops
    done_ops=$(awk -v s="$s" '$2 == "metrc:" && $4 == s && $5 ~ /^[0-9]+$/ { print $5; exit }' "$out")
    if [ -z "$done_ops" ] || [ "$done_ops" -lt "$ops" ]; then
        detail="$s bogo ops '${done_ops}', want >= $ops"
        return 1
    fi
    [ -s "$tf" ] && note[$name]+="${note[$name]:+, }$mode $(cat "$tf") tasks"
    return 0
}

c_stressng_pthread() {
    stressng pthread "$(sc 2000)" || return 1
    # The stressor's threads must be Gs: at most half as many OS tasks as natively. Read
    # with the shell's read: a cat's fork and exec would count as goshim's time.
    local tg=0 tn=0
    [ "$mode" = goshim ] && [ -s "$w/tasks.native" ] && [ -s "$w/tasks.goshim" ] || return 0
    read -r tg <"$w/tasks.goshim" || true
    read -r tn <"$w/tasks.native" || true
    if [ $((tg * 2)) -gt "$tn" ]; then
        detail="$tg OS tasks (natively $tn): threads were not Gs"
        return 1
    fi
}

# The mutex stressor's threads make themselves SCHED_FIFO. As root that
# works natively, and on 2 CPUs the first thread can then starve the
# stressor's main thread until it has done every op: "could not create any
# pthreads", exit 3 (natively, about 1 run in 10 here). Without CAP_SYS_NICE
# the switch to SCHED_FIFO fails (EPERM, ignored) and the stressor is sound.
c_stressng_mutex() {
    stressng mutex "$(sc 100000)"
}

c_stressng_futex() {
    stressng futex "$(sc 20000)"
}

c_py_threads() {
    step py_threads.py "$w/out.$mode" python3 "$realdir/py_threads.py" "$scale" || return 1
    if ! grep -q '^counter .* ok$' "$w/out.$mode"; then
        detail="self-check: $(head -1 "$w/out.$mode")"
        return 1
    fi
    [ "$mode" = native ] || same output "$w/out.native" "$w/out.$mode"
}

c_rg() {
    need_tree
    local q
    for q in a b; do
        local args=(-j4 -n --no-heading -e 'NEEDLE|value 4242\d' "$tree")
        [ $q = b ] && args=(-j4 -c -i goshim "$tree")
        step "rg ($q)" "$w/raw.$q.$mode" rg "${args[@]}" || return 1
        sort "$w/raw.$q.$mode" >"$w/out.$q.$mode"
        nonempty "rg ($q)" "$w/out.$q.$mode" || return 1
        [ "$mode" = native ] || same "rg ($q) sorted output" "$w/out.$q.native" "$w/out.$q.$mode" ||
            return 1
    done
}

c_cxx_threads() {
    need_cxx
    step cxx_threads "$w/out.$mode" "$cxx_bin" "$scale" || return 1
    [ "$mode" = native ] || same output "$w/out.native" "$w/out.$mode"
}

# client WHAT CMD...: a native client with the timeout; detail on failure.
client() {
    local what=$1 rc=0 out=$w/client.$mode
    shift
    timeout -k 5 "$tmo" "$@" >>"$out" 2>&1 || rc=$?
    if [ $rc -ne 0 ]; then
        detail="$what: $(why $rc "$tmo" "$(grep . "$out" | tail -1)")"
        return 1
    fi
}

c_memcached() {
    local port user=()
    port=$(free_port)
    [ "$(id -u)" -eq 0 ] && user=(-u root)
    : >"$w/client.$mode"
    start_server "$w/server.$mode" memcached -t 4 -p "$port" -U 0 -l 127.0.0.1 -m 128 -c 256 "${user[@]}"
    wait_ready memcached python3 -c "import socket; s = socket.create_connection(('127.0.0.1', $port)); s.sendall(b'version\r\n'); assert s.recv(100).startswith(b'VERSION')" || {
        kill_server memcached
        return 1
    }
    if ! client kv_client python3 "$realdir/kv_client.py" memcached "$port" 8 "$(sc 2000)"; then
        kill_server memcached
        return 1
    fi
    stop_server memcached TERM
}

c_redis() {
    local port n
    port=$(free_port)
    n=$(sc 1000)
    : >"$w/client.$mode"
    start_server "$w/server.$mode" redis-server --port "$port" --bind 127.0.0.1 \
        --io-threads 4 --io-threads-do-reads yes --save '' --appendonly no --dir "$w"
    wait_ready redis-server sh -c "redis-cli -p $port ping | grep -q PONG" || {
        kill_server redis-server
        return 1
    }
    local ok=1
    client kv_client python3 "$realdir/kv_client.py" redis "$port" 8 "$(sc 600)" || ok=0
    if [ $ok -eq 1 ]; then
        client redis-benchmark redis-benchmark -p "$port" -q -n "$n" -c 32 -t set,get,incr,lpush,lpop || ok=0
    fi
    if [ $ok -eq 1 ]; then
        # Every test must report its rate (redis-benchmark -q: "SET: N requests per second").
        local t
        for t in SET GET INCR LPUSH LPOP; do
            # grep without -q: it reads to the end, so tr never dies of SIGPIPE, which
            # pipefail would count as a missing result (a slow run's output passes 4 KB).
            if ! tr '\r' '\n' <"$w/client.$mode" | grep "^$t: [0-9.]* requests per second" >/dev/null; then
                detail="redis-benchmark: no $t result"
                ok=0
                break
            fi
        done
    fi
    if [ $ok -eq 1 ]; then
        timeout -k 1 10 redis-cli -p "$port" info stats >"$w/info.$mode" 2>&1 || true
        local r wr
        r=$(sed -n 's/^io_threaded_reads_processed:\([0-9]*\).*/\1/p' "$w/info.$mode")
        wr=$(sed -n 's/^io_threaded_writes_processed:\([0-9]*\).*/\1/p' "$w/info.$mode")
        note[$name]+="${note[$name]:+, }$mode io-thread reads/writes ${r:-?}/${wr:-?}"
    fi
    if [ $ok -eq 0 ]; then
        kill_server redis-server
        return 1
    fi
    if ! timeout -k 1 10 redis-cli -p "$port" shutdown nosave >>"$w/client.$mode" 2>&1; then
        # redis-cli reports the connection closing as an error; only the server's status counts.
        :
    fi
    stop_server redis-server none
}

# mariadb: the server in the current mode (a small buffer pool, the redo log written at
# commit but flushed once a second: the disk out of the figure), a native sysbench
# oltp_read_write client of 8 threads, fixed events; afterwards every table still has its
# rows (the workload deletes and inserts the same ids) and the server exits 0 on SIGTERM.
c_mariadb() {
    need_mariadb || {
        detail="mariadb-install-db failed"
        return 1
    }
    local sock=$w/mysqld.sock rows tables=4 n user=()
    rows=$(sc 5000)
    n=$(sc 1000)
    [ "$(id -u)" -eq 0 ] && user=(--user=root)
    : >"$w/client.$mode"
    start_server "$w/server.$mode" mariadbd --no-defaults "${user[@]}" --datadir="$mariadb_dir" \
        --socket="$sock" --pid-file="$w/mysqld.pid" --skip-networking --skip-log-bin \
        --innodb-buffer-pool-size=64M --innodb-flush-log-at-trx-commit=2 --max-connections=64
    wait_ready mariadbd mariadb-admin -S "$sock" -uroot ping || {
        kill_server mariadbd
        return 1
    }
    local sb=(sysbench oltp_read_write --db-driver=mysql --mysql-socket="$sock" --mysql-user=root
        --tables=$tables --table-size="$rows")
    if ! client mariadb mariadb -S "$sock" -uroot -e \
        'DROP DATABASE IF EXISTS sbtest; CREATE DATABASE sbtest' ||
        ! client "sysbench prepare" "${sb[@]}" prepare ||
        ! client "sysbench run" "${sb[@]}" --threads=8 --events="$n" --time=0 run; then
        kill_server mariadbd
        return 1
    fi
    if [ "$(events "$w/client.$mode")" != "$n" ]; then
        detail="sysbench: total number of events '$(events "$w/client.$mode")', not $n"
        kill_server mariadbd
        return 1
    fi
    local t c
    for ((t = 1; t <= tables; t++)); do
        c=$(timeout -k 1 10 mariadb -S "$sock" -uroot -N -e "SELECT COUNT(*) FROM sbtest.sbtest$t" 2>&1)
        if [ "$c" != "$rows" ]; then
            detail="sbtest$t has '${c:0:80}' rows, not $rows"
            kill_server mariadbd
            return 1
        fi
    done
    stop_server mariadbd TERM
}

c_node() {
    step node_workers.js "$w/out.$mode" node "$realdir/node_workers.js" 8 "$(sc 2000)" || return 1
    [ "$mode" = native ] || same output "$w/out.native" "$w/out.$mode"
}


# ---- one run -----------------------------------------------------------------------
# gs_max FILE: the largest gs_created of the goshim stats in FILE ('' if none).
gs_max() {
    sed -n 's/^goshim stats: procs=.* gs_created=\([0-9]*\) .*/\1/p' "$1" | sort -n | tail -1
}

# real_prepare NAME: NAME's inputs and the C++ build, outside the timed runs.
real_prepare() {
    case ${1%_p1} in
    pigz | xz | zstd) need_data ;;
    pbzip2 | lbzip2) need_bz_data ;;
    sort) need_sort_in ;;
    rg) need_tree ;;
    cxx_threads) need_cxx ;;
    mariadb) need_mariadb || true ;; # c_mariadb says why
    esac
}

# real_run NAME MODE [PROCS]: see the top. Sets the globals the cases use: name, mode,
# pre (the command prefix of the mode), err (the stderr log), detail.
real_run() {
    name=$1
    mode=$2
    local base=${1%_p1} procs=${3:-} rc=0 t0 t1 g
    if [ "$mode" = goshim ]; then
        pre=(env GOSHIM_STATS=1 ${procs:+GOSHIM_PROCS=$procs} "LD_PRELOAD=$lib"
            ${start_now[$base]:+GOSHIM_START=now} ${trace_proof[$base]:+GOSHIM_SCHEDTRACE=10})
    elif [ -n "$procs" ]; then
        pre=(taskset -c "0-$((procs - 1))")
    else
        pre=(env) # the exec that goshim's env costs: a 20 ms program feels 1 ms
    fi
    err=$w/stderr.$mode
    : >"$err"
    detail=
    untimed_us=0
    t0=$EPOCHREALTIME
    "c_$base" || rc=$?
    t1=$EPOCHREALTIME
    run_secs=$(awk -v a="$t0" -v b="$t1" -v u="$untimed_us" 'BEGIN { printf "%.4f", b - a - u / 1e6 }')
    if [ $rc -eq 0 ] && [ "$mode" = goshim ]; then
        g=$(gs_max "$err")
        if [ -z "$g" ] && [ -n "${trace_proof[$base]:-}" ]; then
            g=$(grep -c '^SCHED .* threads=\([2-9]\|[1-9][0-9]\)' "$err" || true)
            if [ "$g" -eq 0 ]; then
                rc=1
                detail="no 'SCHED' line with threads: goshim was not active"
            else
                note[$name]+="${note[$name]:+, }$g trace lines (no stats: _exit)"
            fi
        elif [ -z "$g" ]; then
            rc=1
            detail="no 'goshim stats:' line: goshim was not active"
        elif [ "$g" -lt "${want_gs[$base]:-2}" ]; then
            rc=1
            detail="gs_created=$g: the threads did not become Gs"
        else
            note[$name]+="${note[$name]:+, }gs_created=$g"
        fi
    fi
    if [ $rc -eq 0 ] && [ "$mode" = native ] && grep -q '^goshim stats:' "$err"; then
        rc=1
        detail="goshim stats printed in the native run"
    fi
    run_rc=$rc
    run_detail=$detail
}
