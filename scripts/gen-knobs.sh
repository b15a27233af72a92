#!/usr/bin/env bash
# docs/knobs.md, the reference of every GOSHIM_ environment variable, written
# from sched/config.def, the one list of them (its top comment says how it is
# laid out). The build runs it when config.def or this script changes; the
# page is committed, so that it reads on the web too.
#
#   usage: scripts/gen-knobs.sh [ROOT]           write ROOT/docs/knobs.md
#          scripts/gen-knobs.sh --check [ROOT]   write nothing; exit 1 if
#                                                 the page is stale, or a
#                                                 variable is missing (below)
# ROOT defaults to the tree holding this script. CC (default cc) compiles a
# small program that includes config.def with its macros defined to fill a
# table: the page says what the compiler reads, as config.c does, with the
# strings joined and escaped as C joins and escapes them.
#
# --check reports, with the way to fix each:
#   * docs/knobs.md differs from what config.def gives (edited by hand, or
#     config.def changed and the page was not regenerated);
#   * a GOSHIM_ variable read in the tree (getenv("GOSHIM_..."), os.environ
#     in Python, $GOSHIM_... in a shell script or the Makefile) that
#     config.def does not list;
#   * a variable of the library or the launcher that the ENVIRONMENT section
#     of tools/goshim.1 does not name.
set -euo pipefail

check=0
if [ "${1:-}" = --check ]; then
    check=1
    shift
fi
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
me=gen-knobs
page=docs/knobs.md
cd "$root"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cat >"$tmp/gen.c" <<'EOF'
#include <stdio.h>
#include <string.h>

struct knob {
    const char *name, *group, *reader, *form, *dflt, *text;
};
static const struct knob knobs[] = {
#define CONFIG_VAR(name, kind, field, min, max, form, dflt, text)                                  \
    {#name, "LIBRARY", "sched/config.c", form, dflt, text},
#define CONFIG_ENV(name, group, reader, form, dflt, text) {#name, #group, reader, form, dflt, text},
#include "sched/config.def"
};
struct group {
    const char *id, *label, *title, *text;
};
static const struct group groups[] = {
#define CONFIG_GROUP(id, label, title, text) {#id, label, title, text},
#include "sched/config.def"
};
#define N(a) (sizeof(a) / sizeof((a)[0]))

/* A word that would make a Markdown block if a line began with it. */
static int starts_block(const char *w, size_t n)
{
    size_t i = 0;
    while (i < n && w[i] >= '0' && w[i] <= '9')
        i++;
    if (i > 0 && i + 1 == n && (w[i] == '.' || w[i] == ')'))
        return 1;
    if (w[0] == '#' || w[0] == '>' || w[0] == '|')
        return 1;
    for (i = 0; i < n; i++)
        if (!strchr("-+*=_", w[i]))
            return 0;
    return 1;
}

/* text wrapped at 80 columns after first, the next lines indented by
 * indent; words are never split. */
static void wrap(const char *first, const char *indent, const char *text)
{
    size_t col = strlen(first), start = col;
    fputs(first, stdout);
    for (const char *p = text; *p;) {
        while (*p == ' ')
            p++;
        size_t n = strcspn(p, " ");
        if (n == 0)
            break;
        if (col > start && col + 1 + n > 80 && !starts_block(p, n)) {
            printf("\n%s", indent);
            col = start = strlen(indent);
        } else if (col > start) {
            putchar(' ');
            col++;
        }
        fwrite(p, 1, n, stdout);
        col += n;
        p += n;
    }
    putchar('\n');
}

static void para(const char *text)
{
    wrap("", "", text);
    putchar('\n');
}

/* "a, b" as "`a`, `b`". */
static const char *code_list(const char *list)
{
    static char buf[1024];
    size_t len = 0;
    for (const char *p = list; *p && len < sizeof buf - 8;) {
        size_t n = strcspn(p, ",");
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%s`%.*s`", len ? ", " : "",
                                (int)n, p);
        p += n;
        while (*p == ',' || *p == ' ')
            p++;
    }
    return buf;
}

/* GitHub's anchor of a heading that is a variable's name. */
static void anchor(const char *name)
{
    for (const char *p = name; *p; p++)
        putchar(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
}

static void page(void)
{
    printf("# Environment variables\n\n"
           "<!-- Written from sched/config.def by scripts/gen-knobs.sh: edit config.def. -->\n\n");
    para("Every `GOSHIM_` environment variable that goshim, its launcher and its tests read, "
         "with the values each accepts and its default; all are optional. The list is "
         "`sched/config.def`, which the library's parser reads too; this page is written "
         "from it.");
    printf("| variable | for | default |\n| --- | --- | --- |\n");
    for (size_t g = 0; g < N(groups); g++)
        for (size_t k = 0; k < N(knobs); k++)
            if (!strcmp(knobs[k].group, groups[g].id)) {
                printf("| [`%s`](#", knobs[k].name);
                anchor(knobs[k].name);
                printf(") | %s | %s |\n", groups[g].label, knobs[k].dflt);
            }
    putchar('\n');
    for (size_t g = 0; g < N(groups); g++) {
        printf("## %s\n\n", groups[g].title);
        para(groups[g].text);
        for (size_t k = 0; k < N(knobs); k++) {
            const struct knob *kb = &knobs[k];
            if (strcmp(kb->group, groups[g].id))
                continue;
            printf("### %s\n\n", kb->name);
            wrap("- accepts: ", "  ", kb->form);
            wrap("- default: ", "  ", kb->dflt);
            wrap("- read by: ", "  ", code_list(kb->reader));
            putchar('\n');
            para(kb->text);
        }
    }
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "names")) {
        for (size_t k = 0; k < N(knobs); k++)
            printf("%s %s\n", knobs[k].group, knobs[k].name);
        return 0;
    }
    for (size_t k = 0; k < N(knobs); k++) {
        size_t g = 0;
        while (g < N(groups) && strcmp(knobs[k].group, groups[g].id))
            g++;
        if (g == N(groups)) {
            fprintf(stderr, "%s: group %s has no CONFIG_GROUP\n", knobs[k].name, knobs[k].group);
            return 1;
        }
    }
    page();
    fflush(stdout);
    return ferror(stdout) ? 1 : 0;
}
EOF
if ! ${CC:-cc} -std=gnu11 -Wall -Wextra -Werror -I. -o "$tmp/gen" "$tmp/gen.c" 2>"$tmp/cc.err"; then
    echo "$me: sched/config.def does not compile as its top comment describes:" >&2
    cat "$tmp/cc.err" >&2
    exit 1
fi
# $(...) drops the last blank line.
out=$("$tmp/gen") || {
    echo "$me: sched/config.def: see above" >&2
    exit 1
}
printf '%s\n' "$out" >"$tmp/knobs.md"

if [ $check = 0 ]; then
    mkdir -p "$(dirname "$page")"
    cp "$tmp/knobs.md" "$page"
    exit 0
fi

status=0
if ! [ -f "$page" ]; then
    echo "$me: $page is missing: run scripts/gen-knobs.sh (make does) and commit it" >&2
    status=1
elif ! diff -u "$page" "$tmp/knobs.md" >"$tmp/diff"; then
    echo "$me: $page is not what sched/config.def gives (edit config.def, not the page;" \
        "then run scripts/gen-knobs.sh and commit both):" >&2
    head -n 40 "$tmp/diff" >&2
    status=1
fi

"$tmp/gen" names >"$tmp/names"
listed() { awk '{ print $2 }' "$tmp/names" | grep -x "$1" >/dev/null; }
# Variables the tree reads, with the first place that reads each.
mapfile -t reads < <(
    {
        grep -rnoE --include='*.c' --include='*.h' --include='*.cc' --include='*.py' \
            'getenv\("GOSHIM_[A-Z0-9_]+"|environ(\.get\(|\[)"GOSHIM_[A-Z0-9_]+' \
            sched shim preload tools tests 2>/dev/null || true
        grep -rnoE '\$\{?GOSHIM_[A-Z0-9_]+' scripts tests Makefile tools/*.mk 2>/dev/null || true
    } | sed -E 's/^([^:]+:[0-9]+):.*(GOSHIM_[A-Z0-9_]+).*/\2 \1/' | sort -u -k1,1
)
for r in "${reads[@]}"; do
    [ -n "$r" ] || continue
    name=${r%% *}
    listed "$name" ||
        {
            echo "$me: ${r#* }: $name is read but not listed in sched/config.def: add it there" \
                "(CONFIG_ENV, with its group and a description)" >&2
            status=1
        }
done

# The man page names every variable of the library and the launcher.
man=tools/goshim.1
if [ -f "$man" ]; then
    envsec=$(sed -n '/^\.SH ENVIRONMENT/,/^\.SH /p' "$man")
    while read -r group name; do
        case $group in LIBRARY | LAUNCHER) ;; *) continue ;; esac
        grep -qw -- "$name" <<<"$envsec" ||
            {
                echo "$me: $man: its ENVIRONMENT section does not name $name" \
                    "(sched/config.def lists it among the $group variables)" >&2
                status=1
            }
    done <"$tmp/names"
fi
exit $status
