#!/usr/bin/env bash
# make bench's closing summary: the rows where goshim is slower than native or
# more than 1.3x Go, out of the rows the bench drivers recorded with
# bench_record (scripts/bench_lib.sh) in the file GOSHIM_BENCH_SUMMARY names.
#
#   usage: scripts/bench_summary.sh FILE
#
# FILE has one tab-separated row per figure: driver, case, native, goshim, Go
# (medians of one run of the drivers; "-" for none), unit, and "lower" (a
# time: less is better) or "higher" (a rate). For each row the summary puts
# both comparisons the same way round, as goshim's cost against the other's:
#   vs native = goshim / native for a time, native / goshim for a rate
#   vs Go     = the same against Go
# so above 1 always means goshim is slower. A row is listed when vs native is
# above 1.00 or vs Go above 1.30 (each rounded to two decimals), or when it
# has a native or Go figure and no goshim one (goshim failed or was not run).
# The figures of one make bench run are noisy on a shared machine: a row
# just above 1.00 may be noise; each driver's own output has its spread.
# Exit status 0 (informational; a missing FILE: no rows), 2 if FILE cannot be read.
set -uo pipefail

if [ $# -ne 1 ]; then
    echo "bench_summary: usage: scripts/bench_summary.sh FILE (a file of bench_record rows)" >&2
    exit 2
fi
if [ ! -e "$1" ]; then
    printf '\n## Summary: where goshim is slower than native, or more than 1.3x Go\n\n'
    echo "(no rows were recorded: $1 does not exist)"
    exit 0
fi
if [ ! -r "$1" ]; then
    echo "bench_summary: cannot read $1" >&2
    exit 2
fi

awk -F '\t' '
function num(v) { return v != "" && v != "-" && v + 0 > 0 }
# cost(g, o, better): goshim against o, above 1 = goshim slower (two decimals), or "".
function cost(g, o, better) {
    if (!num(g) || !num(o))
        return ""
    return sprintf("%.2f", better == "higher" ? o / g : g / o)
}
function show(v) { return num(v) ? v : "-" }
NF >= 7 {
    total++
    vn = cost($4, $3, $7)
    vg = cost($4, $5, $7)
    why = ""
    if (!num($4) && (num($3) || num($5)))
        why = "no goshim figure"
    else if (vn != "" && vn + 0 > 1.00)
        why = "slower than native"
    if (vg != "" && vg + 0 > 1.30)
        why = why (why == "" ? "" : "; ") "over 1.3x Go"
    if (why == "")
        next
    n++
    row[n] = sprintf("| %-13s | %-26s | %12s | %12s | %12s | %-13s | %9s | %9s | %-32s |",
                     $1, $2, show($3), show($4), show($5), $6,
                     vn == "" ? "-" : vn "x", vg == "" ? "-" : vg "x", why)
}
END {
    print ""
    print "## Summary: where goshim is slower than native, or more than 1.3x Go"
    print ""
    if (total == 0) {
        print "(no rows were recorded)"
        exit
    }
    printf "| %-13s | %-26s | %12s | %12s | %12s | %-13s | %9s | %9s | %-32s |\n",
           "driver", "case", "native", "goshim", "Go", "unit", "vs native", "vs Go", "why listed"
    print "|---------------|----------------------------|-------------:|-------------:|-------------:|---------------|----------:|----------:|----------------------------------|"
    for (i = 1; i <= n; i++)
        print row[i]
    printf "(%d of %d rows; vs native, vs Go: goshim\047s time over the other\047s, or the other\047s\n", n, total
    print "rate over goshim\047s: above 1 = goshim slower; medians of one run of each driver, noisy)"
}' "$1"
