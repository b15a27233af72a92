#!/usr/bin/env bash
# Peer test suites: GLib's installed tests and CPython's regression tests, each
# natively, under goshim at the default P and under goshim at GOSHIM_PROCS=1.
#
#   scripts/test_peer.sh [--quick] [--lib PATH] [--only NAME...]
#
# --quick runs the subset `make test` uses (the tests that once hung or crashed
# under goshim, and the fast ones); without it, every test below (`make
# test-peer`, about an hour on 2 CPUs). --only runs just the named tests
# (glib/NAME or python/MODULE). One line a test with the three results and
# times, then the differences and a closing "peer: N passed, N failed, N
# skipped" line, counting each goshim run of a test that passes natively
# (passed: it passes under goshim too; failed: it does not); a test that
# fails natively is skipped. Exit status 1 if anything failed.
#
# The suites come from Debian packages (libglib2.0-tests,
# libpython3.11-testsuite; scripts/setup.sh installs them): nothing of theirs
# is copied into this tree. Logs: build/peer/<suite>-<test>.<mode>.log.
set -uo pipefail
cd "$(dirname "$0")/.."

GLIB_DIR=/usr/libexec/installed-tests/glib
PYTHON=/usr/bin/python3

# Threads, locks, main loops, spawning, signals and Unix I/O.
GLIB_ALL="1bit-mutex asyncqueue atomic bitlock cancellable cond contexts mainloop mutex once
          onceinit private rec-mutex rwlock spawn-multithreaded spawn-singlethread task thread
          thread-deprecated thread-pool threadtests timeout unix unix-streams signals"
PY_ALL="test_threading test_thread test_threadsignals test_threading_local test_signal test_queue
        test_concurrent_futures test_subprocess test_select test_selectors test_epoll test_poll
        test_fork1 test_time test_sched test_multiprocessing_fork test_multiprocessing_forkserver
        test_multiprocessing_spawn test_socketserver test_asyncio"
# make test's subset: a few seconds each natively.
GLIB_QUICK="asyncqueue atomic bitlock cancellable cond contexts once onceinit private
            spawn-singlethread task thread thread-pool threadtests unix unix-streams signals"
PY_QUICK="test_thread test_threadsignals test_threading_local test_queue test_select test_epoll
          test_poll test_fork1 test_sched"

GLIB_TIMEOUT=${PEER_GLIB_TIMEOUT:-120}
PY_TIMEOUT=${PEER_PY_TIMEOUT:-1200}

lib=build/libgoshim.so
quick=0
only=()
while [ $# -gt 0 ]; do
    case $1 in
    --quick) quick=1 ;;
    --lib) lib=$2; shift ;;
    --only) shift; only=("$@"); break ;;
    -h | --help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "test_peer: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done
lib=$(realpath "$lib" 2>/dev/null) || true
if [ ! -f "$lib" ]; then
    echo "test_peer: no library at '$lib': run make first" >&2
    exit 2
fi

tests=()
if [ ${#only[@]} -gt 0 ]; then
    tests=("${only[@]}")
else
    if [ $quick = 1 ]; then glib=$GLIB_QUICK py=$PY_QUICK; else glib=$GLIB_ALL py=$PY_ALL; fi
    for t in $glib; do tests+=("glib/$t"); done
    for t in $py; do tests+=("python/$t"); done
fi

missing=()
for t in "${tests[@]}"; do
    case $t in
    glib/*) [ -x "$GLIB_DIR/${t#glib/}" ] || missing+=("$t (libglib2.0-tests)") ;;
    python/*) [ -e "/usr/lib/python3.11/test/${t#python/}.py" ] ||
        [ -d "/usr/lib/python3.11/test/${t#python/}" ] || missing+=("$t (libpython3.11-testsuite)") ;;
    *) echo "test_peer: '$t' is neither glib/NAME nor python/MODULE" >&2; exit 2 ;;
    esac
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "test_peer: not installed: ${missing[*]}; scripts/setup.sh installs them" >&2
    exit 2
fi

logs=build/peer
mkdir -p "$logs"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# run_one TEST MODE: runs TEST natively (MODE native) or under goshim (default, p1)
# and prints "<word> <seconds>"; word is pass, fail:N, hang or sig:NAME.
run_one() {
    local t=$1 mode=$2 env=() rc start end log cmd=() limit dir=$work
    case $mode in
    default) env=(LD_PRELOAD="$lib") ;;
    p1) env=(LD_PRELOAD="$lib" GOSHIM_PROCS=1) ;;
    esac
    case $t in
    glib/*) cmd=("$GLIB_DIR/${t#glib/}"); limit=$GLIB_TIMEOUT; dir=$GLIB_DIR ;;
    python/*) cmd=("$PYTHON" -m test "${t#python/}"); limit=$PY_TIMEOUT
        # test_socketserver runs nothing without the network resource (it uses only
        # the loopback interface).
        [ "$t" = python/test_socketserver ] && cmd+=(-u network) ;;
    esac
    log="$logs/${t%%/*}-${t#*/}.$mode.log"
    start=$(date +%s.%N)
    # GLib's from their directory, CPython's from a scratch one (they write there); no
    # stdin; in a session of their own, so that a test signalling its process group
    # reaches nobody else (timeout ends the whole group).
    (cd "$dir" && exec env "${env[@]}" setsid -w timeout -k 10 "$limit" "${cmd[@]}") \
        </dev/null >"$log" 2>&1
    rc=$?
    end=$(date +%s.%N)
    local word
    if [ $rc = 0 ]; then
        word=pass
    elif [ $rc = 124 ] || [ $rc = 137 ]; then
        word=hang
    elif [ $rc -gt 128 ]; then
        word="sig:$(kill -l $((rc - 128)) 2>/dev/null || echo $((rc - 128)))"
    else
        word="fail:$rc"
    fi
    printf '%s %s\n' "$word" "$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')"
}

passed=0 failed=0 skipped=0
declare -A total=([native]=0 [default]=0 [p1]=0)
diffs=()
printf '%-34s %-16s %-16s %-16s\n' test native goshim "goshim P=1"
for t in "${tests[@]}"; do
    declare -A word=() secs=()
    for mode in native default p1; do
        read -r w s < <(run_one "$t" "$mode")
        word[$mode]=$w
        secs[$mode]=$s
        total[$mode]=$(awk -v a="${total[$mode]}" -v b="$s" 'BEGIN { print a + b }')
    done
    printf '%-34s %-16s %-16s %-16s\n' "$t" "${word[native]} ${secs[native]}s" \
        "${word[default]} ${secs[default]}s" "${word[p1]} ${secs[p1]}s"
    for mode in default p1; do
        if [ "${word[native]}" != pass ]; then
            skipped=$((skipped + 1))
        elif [ "${word[$mode]}" = pass ]; then
            passed=$((passed + 1))
        else
            failed=$((failed + 1))
            diffs+=("$t: ${word[$mode]} under goshim ($([ $mode = p1 ] && echo P=1 || echo default P)); log $logs/${t%%/*}-${t#*/}.$mode.log")
        fi
    done
    unset word secs
done

echo
if [ ${#diffs[@]} -gt 0 ]; then
    echo "differences (pass natively, not under goshim):"
    printf '  %s\n' "${diffs[@]}"
else
    echo "differences: none"
fi
awk -v n="${total[native]}" -v d="${total[default]}" -v p="${total[p1]}" 'BEGIN {
    printf "time: native %.0f s, goshim %.0f s (%.2fx), goshim P=1 %.0f s (%.2fx)\n",
           n, d, d / (n + 0.001), p, p / (n + 0.001) }'
echo "peer: $passed passed, $failed failed, $skipped skipped"
[ $failed = 0 ]
