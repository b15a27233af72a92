#!/usr/bin/env bash
# One command for `goshim compare`: a thread-per-connection echo server
# (whatever LD_PRELOAD this script was given applies to it) served by the
# native epoll load generator (LD_PRELOAD removed).
#
#   usage: scripts/echo_pair.sh NCONN ROUNDS SIZE
# Exits with the client's status (0: every byte echoed), or 3 if the server failed.
set -uo pipefail
if [ $# -ne 3 ]; then
    echo "usage: scripts/echo_pair.sh NCONN ROUNDS SIZE" >&2
    exit 2
fi
progs=$(cd "$(dirname "$0")/.." && pwd)/build/tests/progs
tmp=$(mktemp -d "${TMPDIR:-/tmp}/echo_pair.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
"$progs/pbench_echo_server" "$tmp/port" "$1" &
server=$!
for _ in $(seq 300); do
    [ -s "$tmp/port" ] && break
    kill -0 "$server" 2>/dev/null || break
    sleep 0.02
done
env -u LD_PRELOAD "$progs/pbench_echo_client" "$tmp/port" "$1" "$2" "$3"
rc=$?
wait "$server" || rc=3
exit "$rc"
