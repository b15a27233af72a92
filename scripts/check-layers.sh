#!/usr/bin/env bash
# The layering and size rules of the tree (docs/design.md, rules 19-21), checked on the
# sources and, when built, on the runtime's objects:
#   * sched/ includes nothing of shim/ or preload/; shim/ nothing of
#     preload/; shim/ and preload/ reach sched/ only through its public
#     header, sched/api.h;
#   * no object of sched/ calls a name that libgoshim.so exports (inside the
#     library such a call would bind to goshim's own wrapper);
#   * no function over 80 lines and no file over 800 lines in sched/, shim/,
#     preload/, tests/ and tools/;
#   * a comment cites no file that is nowhere in the tree, no path of a build
#     machine and no document outside the repository (the last section).
# Prints every breach with its place; exits 1 if there is one.
#   usage: scripts/check-layers.sh [ROOT [BUILD]]
# ROOT defaults to the tree holding this script, BUILD to ROOT/build; the
# symbol check is skipped when BUILD has no libgoshim.so.
set -euo pipefail

root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
build=${2:-$root/build}
max_fn=80
max_file=800
status=0
breach() {
    echo "check-layers: $*" >&2
    status=1
}

cd "$root"
# The C files under the folders given that exist.
sources() {
    local d dirs=()
    for d in "$@"; do [ -d "$d" ] && dirs+=("$d"); done
    [ ${#dirs[@]} -eq 0 ] || find "${dirs[@]}" -name '*.[ch]' | sort
}

# Includes across layers.
while IFS= read -r hit; do
    breach "$hit: sched/ must not include the layers above it"
done < <(grep -Hn '#include "\(shim\|preload\)/' $(sources sched) /dev/null || true)
while IFS= read -r hit; do
    breach "$hit: shim/ must not include preload/"
done < <(grep -Hn '#include "preload/' $(sources shim) /dev/null || true)
while IFS= read -r hit; do
    breach "$hit: only sched/api.h is sched/'s public header"
done < <(grep -Hn '#include "sched/' $(sources shim preload) /dev/null | grep -v '"sched/api\.h"' || true)

# Calls from sched/ into names the library interposes.
lib=$build/libgoshim.so
if [ -f "$lib" ] && compgen -G "$build/sched/*.o" >/dev/null; then
    mapfile -t calls < <(
        comm -12 <(nm -D --defined-only "$lib" | awk 'NF >= 3 { sub(/@.*/, "", $3); print $3 }' | sort -u) \
            <(for o in "$build"/sched/*.o; do nm -u "$o" | awk '{ print $2 }'; done | sort -u)
    )
    for sym in "${calls[@]}"; do
        [ -n "$sym" ] || continue
        users=$(for o in "$build"/sched/*.o; do
            if nm -u "$o" | awk '{ print $2 }' | grep -x "$sym" >/dev/null; then basename "$o"; fi
        done | tr '\n' ' ')
        breach "${users% }: sched/ calls '$sym', which libgoshim.so interposes: call glibc's through libc.c or a raw system call"
    done
fi

# Sizes.
files=$(sources sched shim preload tests tools)
for f in $files; do
    n=$(wc -l <"$f")
    [ "$n" -le $max_file ] || breach "$f: $n lines (at most $max_file: split it by concern)"
done
if ! command -v ctags >/dev/null || ! ctags --version 2>/dev/null | grep -q 'Universal Ctags'; then
    breach "universal-ctags is needed to measure functions (scripts/setup.sh installs it)"
else
    while read -r n file line name; do
        breach "$file:$line: $name is $n lines (at most $max_fn: split it into steps)"
    done < <(
        # shellcheck disable=SC2086 # one word per file on purpose
        ctags --fields=+ne --c-kinds=f --language-force=C -o - $files |
            awk -F'\t' -v max=$max_fn '{
                l = ""; e = ""
                for (i = 4; i <= NF; i++) {
                    if ($i ~ /^line:/) l = substr($i, 6)
                    if ($i ~ /^end:/) e = substr($i, 5)
                }
                if (l != "" && e != "" && e - l + 1 > max) print e - l + 1, $2, l, $1
            }'
    )
fi
# ---- What comments cite ------------------------------------------------------
# A comment must hold for a reader who has only this tree:
#   * a file it names (.c .h .md .S .def .sh .py .inc .mk) is in the tree: a
#     path from one of the tree's folders (sched/x.c, docs/y.md) exactly
#     there, a bare name or any other path as some file's name. Not file
#     names: system headers (<pthread.h>), words with $ * { ~ (variables,
#     globs), absolute paths, placeholders (NAME.c, DIR/x.md, x.h, foo.c).
#     Another project's files (not a path from one of the tree's folders) are
#     named with the project on the same line (glibc's allocatestack.c, the
#     kernel's kernel/sys.c, LTP's lib/common.c);
#   * no path of a build machine (/work/..., /home/..., /tmp/...): say what the
#     file is, not where it lay;
#   * no document outside the repository (DESIGN.md or "DESIGN rule N",
#     STYLE.md, *_FACTS.md, PRIOR_ART.md: notes the project began from, which
#     it does not hold): cite docs/ instead.
# Comments: /* */ and // in C, C++, assembly, .def, Go and JavaScript files, #
# in shell, Python, make files and the Makefile, in sched/ shim/ preload/
# tests/ tools/ scripts/ and the Makefile; this script, which must spell out
# what it looks for, excepted.
#
# Allowed: "file token" pairs let through ("*" for the file: in every file); none now.
cite_pending=''
cite_files() {
    local d
    for d in sched shim preload tests tools scripts; do
        [ -d "$d" ] || continue
        find "$d" -type f \( -name '*.[ch]' -o -name '*.S' -o -name '*.def' -o -name '*.inc' \
            -o -name '*.cc' -o -name '*.cpp' -o -name '*.go' -o -name '*.js' -o -name '*.sh' \
            -o -name '*.py' -o -name '*.mk' \) ! -path scripts/check-layers.sh
    done | sort
    [ ! -f Makefile ] || echo Makefile
}
mapfile -t cited < <(cite_files)
if [ ${#cited[@]} -gt 0 ]; then
    while IFS= read -r hit; do
        breach "$hit"
    done < <(
        find . -name .git -prune -o -path ./build -prune -o -type f -print | sed 's|^\./||' |
            awk -v pending="$cite_pending" '
            function base(p) { sub(/.*\//, "", p); return p }
            function report(what, tok) {
                if (!((FILENAME " " tok) in allow) && !(("* " tok) in allow))
                    print FILENAME ":" FNR ": " what
            }
            function placeholder(t,   n, i, c, part) {
                n = split(t, part, "/")
                sub(/\.[A-Za-z]+$/, "", part[n])
                for (i = 1; i <= n; i++) {
                    c = part[i]
                    if (c ~ /^[A-Za-z]$/ || c ~ /^(NAME|DIR|FILE|PATH|PROG|X|N|foo|bar|baz)$/)
                        return 1
                }
                return 0
            }
            function foreign(rest) {
                return rest ~ /(^|[^A-Za-z0-9_])(glibc|libc|Linux|kernel|CPython|Python|GLib|Go|musl|libunwind|libgcc|LTP|POSIX|Criterion|gdb)([^A-Za-z0-9_]|$)/
            }
            # Whether t (no leading ./ or ../) is a path from one of the folders of the tree.
            function ours(t,   first) {
                first = t
                return sub(/\/.*/, "", first) && first in top
            }
            function exists(t) {
                if (ours(t))
                    return t in path
                return base(t) in name
            }
            function check(text,   s, tok, doc, rest, off) {
                s = text
                while (match(s, /(^|[^A-Za-z0-9_])(DESIGN|STYLE\.md|PRIOR_ART|[A-Z][A-Z0-9]*_FACTS)/)) {
                    doc = substr(s, RSTART, RLENGTH)
                    s = substr(s, RSTART + RLENGTH)
                    sub(/^[^A-Z]/, "", doc)
                    if (substr(s, 1, 1) !~ /[A-Za-z0-9_]/)
                        report("cites " doc ", a document outside the repository: cite docs/ instead", doc)
                }
                s = text
                while (match(s, /(^|[^A-Za-z0-9_.~$}\/-])\/(work|home|tmp)\//)) {
                    doc = substr(s, RSTART, RLENGTH)
                    sub(/^[^\/]/, "", doc)
                    report("a path of a build machine (" doc "...): say what the file is, not where it lay", doc)
                    s = substr(s, RSTART + RLENGTH)
                }
                s = text
                off = 0
                while (match(s, /[A-Za-z0-9_.\/~$*{}<+-]+/)) {
                    tok = substr(s, RSTART, RLENGTH)
                    rest = substr(text, 1, off + RSTART - 1) " " substr(text, off + RSTART + RLENGTH)
                    off += RSTART + RLENGTH - 1
                    s = substr(s, RSTART + RLENGTH)
                    sub(/\.+$/, "", tok)
                    while (tok ~ /^\.\.?\//)
                        sub(/^\.\.?\//, "", tok)
                    if (tok !~ /[A-Za-z0-9_+-]\.(c|h|md|S|def|sh|py|inc|mk)$/ || tok ~ /[$*{}<~]/ ||
                        tok ~ /^\// || placeholder(tok))
                        continue
                    if (!exists(tok) && (ours(tok) || !foreign(rest)))
                        report("cites " tok ", which is nowhere in the tree (name the project it belongs to if it is another'"'"'s)", tok)
                }
            }
            # One line of C-like text: the comment parts, given whether it starts in one.
            function c_comments(line,   out, i, n, j, c, q) {
                out = ""
                n = length(line)
                i = 1
                while (i <= n) {
                    if (inc) {
                        j = index(substr(line, i), "*/")
                        if (j == 0) {
                            out = out substr(line, i)
                            break
                        }
                        out = out substr(line, i, j - 1) " "
                        i += j + 1
                        inc = 0
                        continue
                    }
                    if (!match(substr(line, i), /\/\*|\/\/|["\047]/))
                        break
                    i += RSTART - 1
                    c = substr(line, i, 2)
                    if (c == "/*") {
                        inc = 1
                        i += 2
                    } else if (c == "//") {
                        out = out substr(line, i + 2)
                        break
                    } else {
                        q = substr(line, i, 1)
                        for (i++; i <= n; i++) {
                            c = substr(line, i, 1)
                            if (c == "\\")
                                i++
                            else if (c == q)
                                break
                        }
                        i++
                    }
                }
                return out
            }
            # One line of shell, Python or make: the text after a # that starts a word outside quotes.
            function hash_comment(line,   i, n, c, q) {
                if (FNR == 1 && line ~ /^#!/)
                    return ""
                n = length(line)
                q = ""
                for (i = 1; i <= n; i++) {
                    c = substr(line, i, 1)
                    if (q != "") {
                        if (c == "\\" && q == "\"")
                            i++
                        else if (c == q)
                            q = ""
                    } else if (c == "\"" || c == "\047") {
                        q = c
                    } else if (c == "\\") {
                        i++
                    } else if (c == "#" && (i == 1 || substr(line, i - 1, 1) ~ /[ \t]/)) {
                        return substr(line, i + 1)
                    }
                }
                return ""
            }
            BEGIN {
                n = split(pending, pl, "\n")
                for (i = 1; i <= n; i++)
                    if (pl[i] != "")
                        allow[pl[i]]
                n = split("sched shim preload tests tools scripts docs", pl, " ")
                for (i = 1; i <= n; i++)
                    top[pl[i]]
            }
            NR == FNR {
                path[$0]
                name[base($0)]
                t = $0
                if (sub(/\/.*/, "", t))
                    top[t]
                next
            }
            FNR == 1 {
                inc = 0
                hash = FILENAME ~ /\.(sh|py|mk)$/ || FILENAME == "Makefile"
            }
            {
                text = hash ? hash_comment($0) : c_comments($0)
                if (text != "")
                    check(text)
            }
        ' - "${cited[@]}"
    )
fi
exit $status
