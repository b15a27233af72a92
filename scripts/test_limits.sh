#!/usr/bin/env bash
# The real world's limits (make test-limits): Debian programs that use threads
# (pigz, python3 with threads) and small tests/progs programs, each run under a
# limit natively and then under LD_PRELOAD=build/libgoshim.so. A case passes
# when goshim finishes with native's output and exit status, or fails exactly
# as natively (the same status and the same error line). One line per case.
#
#   usage: scripts/test_limits.sh [--list] [CASE...]   (none = every case)
#   TEST_LIMITS_KEEP=1  keeps the work directory (outputs, logs)
#   TEST_LIMITS_LIB     the library to preload (default build/libgoshim.so)
#
# The limits come from tests/progs/prog_limits_exec (rlimits, a seccomp filter,
# a uid); vm.max_map_count is lowered with sysctl and put back on exit; SIGSTOP,
# strace -f -p and gdb -p come mid-run. Cases that need root (RLIMIT_NPROC,
# which root ignores; the sysctl) say "skip" without it, as do those whose tool
# is missing. Exit status: 0 if no case failed, 1 if one did, 2 for a bad
# argument. About a minute on a 2-vCPU VM.
set -euo pipefail

export PATH=/usr/sbin:/usr/bin:/sbin:/bin
root=$(cd "$(dirname "$0")/.." && pwd)
lib=${TEST_LIMITS_LIB:-$root/build/libgoshim.so}
progs=$root/build/tests/progs
limexec=$progs/prog_limits_exec
me=test_limits
tmo=120

# name|description (the run order)
case_list=(
    "as|RLIMIT_AS 400 MB: pigz, python3 threads"
    "as_threads|RLIMIT_AS 400 MB: as many 64 KiB threads as native (within 2%)"
    "nproc|RLIMIT_NPROC just enough natively: pigz, python3 threads"
    "nproc_none|RLIMIT_NPROC at the process's own count: python3 fails as natively"
    "sigpending|RLIMIT_SIGPENDING 0: pigz, python3 threads, python3 signals"
    "nofile|RLIMIT_NOFILE 16: pigz, python3 threads"
    "nofile_full|RLIMIT_NOFILE 16, the table filled: prog_limit_fds"
    "maxmap|vm.max_map_count 1000: pigz, python3 threads"
    "seccomp|modify_ldt, timer_create, membarrier refused (EPERM, ENOSYS): pigz, python3"
    "sigstop|SIGSTOP for 2 s mid-run, then SIGCONT: pigz, python3"
    "strace|strace -f -p attaching and detaching mid-run: pigz, python3"
    "gdb|gdb -p attaching and detaching mid-run: pigz, python3"
)

declare -A wanted=()
for arg in "$@"; do
    case $arg in
    --list)
        for c in "${case_list[@]}"; do printf '%-12s %s\n' "${c%%|*}" "${c#*|}"; done
        exit 0
        ;;
    -h | --help)
        echo "usage: scripts/test_limits.sh [--list] [CASE...]"
        exit 0
        ;;
    esac
    found=0
    for c in "${case_list[@]}"; do [ "${c%%|*}" = "$arg" ] && found=1; done
    if [ $found = 0 ]; then
        echo "$me: no case named '$arg' (scripts/test_limits.sh --list shows them)" >&2
        exit 2
    fi
    wanted[$arg]=1
done

for f in "$lib" "$limexec" "$progs/prog_limit_threads" "$progs/prog_limit_fds"; do
    if [ ! -e "$f" ]; then
        echo "$me: $f is missing (run make)" >&2
        exit 1
    fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_limits.XXXXXX")
chmod 755 "$tmp"
old_maxmap=
cleanup() {
    [ -n "$old_maxmap" ] && sysctl -qw vm.max_map_count="$old_maxmap"
    if [ "${TEST_LIMITS_KEEP:-0}" = 1 ]; then
        echo "$me: work directory kept: $tmp" >&2
    else
        rm -rf "$tmp"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The input: 16 MiB of text, the same every run.
python3 -c '
import hashlib, sys
h = b"goshim"
lines = []
for i in range(16 * 1024 * 1024 // 65):
    h = hashlib.sha256(h).digest()
    lines.append(h.hex())
sys.stdout.write("\n".join(lines) + "\n")
' >"$tmp/in.txt"
cp "$root/tests/real/py_threads.py" "$tmp/py_threads.py"
cat >"$tmp/py_signals.py" <<'EOF'
# Threads at work while the main thread takes SIGUSR1 and SIGALRM from itself.
import os, signal, threading
got = {"usr1": 0, "alrm": 0}
def on(sig, frame):
    got["usr1" if sig == signal.SIGUSR1 else "alrm"] += 1
signal.signal(signal.SIGUSR1, on)
signal.signal(signal.SIGALRM, on)
total = [0]
lock = threading.Lock()
def work(k):
    s = 0
    for i in range(200000):
        s += i * k % 7
    with lock:
        total[0] += s
ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
for t in ts: t.start()
for _ in range(50):
    os.kill(os.getpid(), signal.SIGUSR1)
signal.setitimer(signal.ITIMER_REAL, 0.01)
for t in ts: t.join()
while got["alrm"] == 0:
    signal.pause()
print("usr1", got["usr1"], "alrm", got["alrm"], "total", total[0])
EOF
chmod 644 "$tmp"/*

pigz_cmd=(/usr/bin/pigz -p 4 -c "$tmp/in.txt")
py_cmd=(/usr/bin/python3 "$tmp/py_threads.py")
# Mid-run actions need runs that outlast the action: each reads its standard input to the
# end, which midrun holds open until the action is over (a debugger's start took longer
# than a whole pigz run on an idle host: gdb found a zombie). pigz compresses what it is
# fed, in.txt twice; python3 runs the threads script at twice the work, then reads.
pigz_long=(/usr/bin/pigz -p 4 -n -c) # -n: no name or time in the header (stdin: now)
py_long=(/usr/bin/python3 -c "import runpy, sys; sys.argv = ['py_threads.py', '2']
runpy.run_path('$tmp/py_threads.py', run_name='__main__'); sys.stdin.read()")
pysig_cmd=(/usr/bin/python3 "$tmp/py_signals.py")

# run MODE TAG SETTINGS CMD...: CMD under prog_limits_exec SETTINGS (a string, may be
# empty), natively or under goshim (MODE), stdout to $tmp/TAG.MODE.out, stderr to .err;
# the exit status to .rc.
run() {
    local mode=$1 tag=$2 settings=$3
    shift 3
    local pre=(env -u LD_PRELOAD)
    [ "$mode" = goshim ] && pre=(env LD_PRELOAD="$lib")
    local rc=0
    # shellcheck disable=SC2086 # settings are words
    timeout -k 5 $tmo "${pre[@]}" "$limexec" $settings -- "$@" >"$tmp/$tag.$mode.out" \
        2>"$tmp/$tag.$mode.err" || rc=$?
    echo $rc >"$tmp/$tag.$mode.rc"
}

# errline FILE: the last line of a stderr log that is not goshim's.
errline() {
    grep -v '^goshim' "$1" | grep . | tail -1 || true
}

# compare TAG: native and goshim gave the same status and output, or failed alike.
compare() {
    local t=$tmp/$1 n g
    n=$(cat "$t.native.rc")
    g=$(cat "$t.goshim.rc")
    if [ "$n" != "$g" ]; then
        echo "$1: exit status $g under goshim, $n natively: $(errline "$t.goshim.err")"
        return 1
    fi
    if [ "$n" = 0 ] && ! cmp -s "$t.native.out" "$t.goshim.out"; then
        echo "$1: output differs from native"
        return 1
    fi
    if [ "$n" != 0 ] && [ "$(errline "$t.native.err")" != "$(errline "$t.goshim.err")" ]; then
        echo "$1: fails otherwise than natively: '$(errline "$t.goshim.err")'"
        return 1
    fi
    if [ "$n" = 124 ]; then
        echo "$1: timed out in both modes"
        return 1
    fi
}

# both TAG SETTINGS CMD...: run natively and under goshim, then compare.
both() {
    local tag=$1 settings=$2
    shift 2
    run native "$tag" "$settings" "$@"
    run goshim "$tag" "$settings" "$@"
    compare "$tag"
}

# midrun MODE TAG ACTION CMD...: CMD in the background, its standard input a FIFO fed
# in.txt before and after ACTION (a function), which gets its pid once it has run 0.3 s;
# CMD is still running then: it waits for the rest of its input.
midrun() {
    local mode=$1 tag=$2 action=$3 feed
    shift 3
    local pre=(env -u LD_PRELOAD)
    [ "$mode" = goshim ] && pre=(env LD_PRELOAD="$lib")
    local fifo=$tmp/$tag.$mode.fifo
    mkfifo "$fifo"
    "${pre[@]}" "$@" <"$fifo" >"$tmp/$tag.$mode.out" 2>"$tmp/$tag.$mode.err" &
    local pid=$! rc=0
    exec {feed}>"$fifo"
    cat "$tmp/in.txt" >&$feed
    sleep 0.3
    if ! kill -0 $pid 2>/dev/null; then
        echo "$tag: ended before the action" >"$tmp/$tag.$mode.note"
    else
        "$action" $pid >"$tmp/$tag.$mode.action" 2>&1 || echo "$tag: $action failed" >"$tmp/$tag.$mode.note"
    fi
    cat "$tmp/in.txt" >&$feed 2>/dev/null
    exec {feed}>&-
    wait $pid || rc=$?
    echo $rc >"$tmp/$tag.$mode.rc"
}

act_stop() {
    kill -STOP "$1"
    sleep 2
    kill -CONT "$1"
}
act_strace() {
    timeout -s INT 1 strace -f -qq -o /dev/null -p "$1" || [ $? = 124 ]
}
act_gdb() {
    timeout 60 gdb -q -batch -p "$1" -ex "info threads" -ex "thread apply all bt 2" -ex detach
}

# attach TAG ACTION CMD...: midrun natively and under goshim, then compare.
attach() {
    local tag=$1 action=$2
    shift 2
    midrun native "$tag" "$action" "$@"
    midrun goshim "$tag" "$action" "$@"
    cat "$tmp/$tag".*.note 2>/dev/null && return 1
    compare "$tag"
}

uid=$((40000 + $$ % 20000))
need_root() {
    [ "$(id -u)" = 0 ] || {
        echo "skip (needs root)"
        return 2
    }
}

# ---- the cases: each prints nothing and returns 0, or prints why and returns 1 (2: skip).
case_as() {
    both as_pigz "as=400M" "${pigz_cmd[@]}" && both as_py "as=400M" "${py_cmd[@]}"
}
case_as_threads() {
    both as_threads "as=400M" "$progs/prog_limit_threads" 100000 64 || true
    local n g
    n=$(sed -n 's/^made \([0-9]*\) threads$/\1/p' "$tmp/as_threads.native.out")
    g=$(sed -n 's/^made \([0-9]*\) threads$/\1/p' "$tmp/as_threads.goshim.out")
    echo "native $n, goshim $g threads" >"$tmp/as_threads.note"
    if [ -z "$n" ] || [ -z "$g" ] || [ $((g * 100)) -lt $((n * 98)) ]; then
        echo "as_threads: goshim made ${g:-?} threads, native ${n:-?}"
        return 1
    fi
}
case_nproc() {
    need_root || return $?
    both nproc_pigz "uid=$uid nproc+=8" "${pigz_cmd[@]}" &&
        both nproc_py "uid=$uid nproc+=8" "${py_cmd[@]}"
}
case_nproc_none() {
    need_root || return $?
    both nproc_none "uid=$uid nproc+=0" "${py_cmd[@]}"
}
case_sigpending() {
    both sigp_pigz "sigpending=0" "${pigz_cmd[@]}" && both sigp_py "sigpending=0" "${py_cmd[@]}" &&
        both sigp_pysig "sigpending=0" "${pysig_cmd[@]}"
}
case_nofile() {
    both nofile_pigz "nofile=16" "${pigz_cmd[@]}" && both nofile_py "nofile=16" "${py_cmd[@]}"
}
# The netpoller's epoll and eventfd took two of the program's 16 numbers, so it opened two
# files fewer before EMFILE than natively; under a small limit it now takes none.
case_nofile_full() {
    both nofile_fds "nofile=16" "$progs/prog_limit_fds"
}
case_maxmap() {
    need_root || return $?
    old_maxmap=$(sysctl -n vm.max_map_count)
    sysctl -qw vm.max_map_count=1000
    local rc=0
    both maxmap_pigz "" "${pigz_cmd[@]}" && both maxmap_py "" "${py_cmd[@]}" || rc=1
    sysctl -qw vm.max_map_count="$old_maxmap"
    old_maxmap=
    return $rc
}
case_seccomp() {
    local e
    local deny=modify_ldt,timer_create,membarrier
    both seccomp_pigz "deny=$deny:EPERM" "${pigz_cmd[@]}" &&
        both seccomp_py "deny=$deny:EPERM" "${py_cmd[@]}" &&
        both seccomp_pysig "deny=$deny:ENOSYS" "${pysig_cmd[@]}"
}
case_sigstop() {
    attach stop_pigz act_stop "${pigz_long[@]}" && attach stop_py act_stop "${py_long[@]}"
}
case_strace() {
    command -v strace >/dev/null || {
        echo "skip (no strace)"
        return 2
    }
    attach strace_pigz act_strace "${pigz_long[@]}" && attach strace_py act_strace "${py_long[@]}"
}
case_gdb() {
    command -v gdb >/dev/null || {
        echo "skip (no gdb)"
        return 2
    }
    attach gdb_pigz act_gdb "${pigz_long[@]}" && attach gdb_py act_gdb "${py_long[@]}"
}

failed=0
for c in "${case_list[@]}"; do
    name=${c%%|*}
    [ ${#wanted[@]} -gt 0 ] && [ -z "${wanted[$name]:-}" ] && continue
    start=$SECONDS
    rc=0
    msg=$("case_$name" 2>&1) || rc=$?
    note=$(cat "$tmp/$name.note" 2>/dev/null || true)
    case $rc in
    0) printf '%-12s ok    %3ds  %s\n' "$name" $((SECONDS - start)) "$note" ;;
    2) printf '%-12s skip  %s\n' "$name" "$msg" ;;
    *)
        printf '%-12s FAIL  %3ds  %s\n' "$name" $((SECONDS - start)) "$msg"
        failed=1
        ;;
    esac
done
exit $failed
