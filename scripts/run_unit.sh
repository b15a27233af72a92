#!/usr/bin/env bash
# Run the unit binary with its arguments, its output as it comes; when it fails, repeat the
# failed tests' lines at the end, where a CI log's tail (all that some CI pages show) has
# them: a failure mid-run was otherwise out of sight behind the slowest test's [PASS].
set -uo pipefail
log=$(mktemp "${TMPDIR:-/tmp}/goshim-unit.XXXXXX")
trap 'rm -f "$log"' EXIT
"$@" 2>&1 | tee "$log"
st=${PIPESTATUS[0]}
if [ "$st" -ne 0 ]; then
    echo "---- unit run failed (status $st); what failed:"
    grep -E -A4 'Assertion Failed|CRASH|Timed out|\[FAIL\]|Warning! The test' "$log" |
        grep -v -E '^\[(PASS|RUN |====)\]' | head -n 60
fi
exit "$st"
