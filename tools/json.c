/*
 * JSON for the launcher: a recursive-descent reader into a tree of struct
 * json, and a writer of strings.
 *
 * The reader takes RFC 8259 JSON and nothing else (no comments, no
 * trailing commas, no NaN): the files it reads are written by goshim
 * stress --json on other machines, and one cut short by a kill must be
 * told apart from a whole one, so everything that is not a complete value
 * followed only by blanks is an error with its line and column. Numbers
 * keep their text: seeds are 64-bit, more than a double holds, and
 * json_u64 converts them exactly. Strings are decoded, \uXXXX (and its
 * surrogate pairs) to UTF-8. Nesting deeper than JSON_MAX_DEPTH is an
 * error rather than a deep recursion.
 *
 * The writer escapes what JSON requires and replaces bytes that are not
 * UTF-8 (a program's output may hold any) with U+FFFD, so that what it
 * writes is always valid JSON.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "tools/json.h"

#define JSON_MAX_DEPTH 64

struct reader {
    const char *start, *p;
    char *err;
    size_t errlen;
    bool failed;
};

static struct json *parse_value(struct reader *r, int depth);

/* Record the first error, with the line and column of r->p. */
__attribute__((format(printf, 2, 3))) static void reader_error(struct reader *r, const char *fmt,
                                                               ...)
{
    int line = 1, col = 1;
    va_list ap;
    int n;

    if (r->failed)
        return;
    r->failed = true;
    for (const char *q = r->start; q < r->p; q++) {
        line += *q == '\n';
        col = *q == '\n' ? 1 : col + 1;
    }
    n = snprintf(r->err, r->errlen, "line %d, column %d: ", line, col);
    if (n < 0 || (size_t)n >= r->errlen)
        return;
    va_start(ap, fmt);
    vsnprintf(r->err + n, r->errlen - (size_t)n, fmt, ap);
    va_end(ap);
}

static void skip_blanks(struct reader *r)
{
    r->p += strspn(r->p, " \t\r\n");
}

static struct json *new_value(struct reader *r, enum json_type type)
{
    struct json *j = calloc(1, sizeof *j);

    if (j == NULL)
        reader_error(r, "out of memory");
    else
        j->type = type;
    return j;
}

/* UTF-8 of code point c into out (4 bytes at most); its length. */
static size_t put_utf8(char *out, unsigned c)
{
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (char)(0xC0 | c >> 6);
        out[1] = (char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (char)(0xE0 | c >> 12);
        out[1] = (char)(0x80 | (c >> 6 & 0x3F));
        out[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | c >> 18);
    out[1] = (char)(0x80 | (c >> 12 & 0x3F));
    out[2] = (char)(0x80 | (c >> 6 & 0x3F));
    out[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

/* Four hex digits at r->p (consumed): their value, or -1. */
static long hex4(struct reader *r)
{
    long v = 0;

    for (int k = 0; k < 4; k++, r->p++) {
        char c = *r->p;
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* After "\u" of a string: the code point (a surrogate pair read whole), or -1. */
static long unicode_escape(struct reader *r)
{
    long c = hex4(r), lo;

    if (c < 0xD800 || c > 0xDFFF)
        return c;
    if (c > 0xDBFF || strncmp(r->p, "\\u", 2) != 0)
        return -1;
    r->p += 2;
    if ((lo = hex4(r)) < 0xDC00 || lo > 0xDFFF)
        return -1;
    return 0x10000 + ((c - 0xD800) << 10) + (lo - 0xDC00);
}

/* The escape after a backslash into out; its length, or 0 when it is not one. */
static size_t string_escape(struct reader *r, char *out)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    const char *e = *r->p ? strchr(from, *r->p) : NULL;
    long c;

    if (e != NULL) {
        r->p++;
        *out = to[e - from];
        return 1;
    }
    if (*r->p++ != 'u' || (c = unicode_escape(r)) <= 0)
        return 0; /* \u0000 too: strings here are C strings */
    return put_utf8(out, (unsigned)c);
}

/* A string at r->p (its opening quote): its decoded text (malloc'd), or NULL. */
static char *parse_string(struct reader *r)
{
    size_t cap = 64, n = 0;
    char *s = malloc(cap);

    r->p++;
    while (s != NULL && *r->p != '"') {
        if (n + 5 > cap && (s = realloc(s, cap *= 2)) == NULL)
            break;
        if ((unsigned char)*r->p < 0x20) {
            reader_error(r, *r->p ? "a control character in a string" : "unterminated string");
            free(s);
            return NULL;
        }
        if (*r->p != '\\') {
            s[n++] = *r->p++;
            continue;
        }
        r->p++;
        size_t len = string_escape(r, s + n);
        if (len == 0) {
            reader_error(r, "a bad escape in a string");
            free(s);
            return NULL;
        }
        n += len;
    }
    if (s == NULL) {
        reader_error(r, "out of memory");
        return NULL;
    }
    r->p++;
    s[n] = '\0';
    return s;
}

/* -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? at r->p: its length, or 0. */
static size_t number_length(const char *p)
{
    const char *q = p + (*p == '-');
    size_t d = strspn(q, "0123456789");

    if (d == 0 || (q[0] == '0' && d > 1))
        return 0;
    q += d;
    if (*q == '.') {
        if ((d = strspn(q + 1, "0123456789")) == 0)
            return 0;
        q += 1 + d;
    }
    if (*q == 'e' || *q == 'E') {
        q += 1 + (q[1] == '+' || q[1] == '-');
        if ((d = strspn(q, "0123456789")) == 0)
            return 0;
        q += d;
    }
    return (size_t)(q - p);
}

/* The elements of an array or the members of an object, at r->p after its bracket. */
static void parse_items(struct reader *r, struct json *j, char close, int depth)
{
    struct json **tail = &j->child;

    skip_blanks(r);
    if (*r->p == close) {
        r->p++;
        return;
    }
    for (;;) {
        char *key = NULL;

        skip_blanks(r);
        if (close == '}') {
            if (*r->p != '"') {
                reader_error(r, "expected a member name in quotes");
                return;
            }
            if ((key = parse_string(r)) == NULL)
                return;
            skip_blanks(r);
            if (*r->p++ != ':') {
                r->p--;
                reader_error(r, "expected ':' after a member name");
                free(key);
                return;
            }
        }
        if ((*tail = parse_value(r, depth + 1)) == NULL) {
            free(key);
            return;
        }
        (*tail)->key = key;
        tail = &(*tail)->next;
        skip_blanks(r);
        if (*r->p == ',' || *r->p == close) {
            if (*r->p++ == close)
                return;
            continue;
        }
        reader_error(r, *r->p ? "expected ',' or '%c'" : "the text ends inside a '%c'", close);
        return;
    }
}

static struct json *parse_value(struct reader *r, int depth)
{
    static const struct {
        const char *word;
        enum json_type type;
        bool b;
    } words[] = {
        {"null", JSON_NULL, false}, {"true", JSON_BOOL, true}, {"false", JSON_BOOL, false}};
    struct json *j = NULL;
    size_t len;

    skip_blanks(r);
    if (depth > JSON_MAX_DEPTH) {
        reader_error(r, "nested more than %d deep", JSON_MAX_DEPTH);
        return NULL;
    }
    for (size_t k = 0; k < sizeof words / sizeof words[0]; k++) {
        len = strlen(words[k].word);
        if (strncmp(r->p, words[k].word, len) == 0 && (j = new_value(r, words[k].type))) {
            j->b = words[k].b;
            r->p += len;
            return j;
        }
    }
    if (*r->p == '"') {
        if ((j = new_value(r, JSON_STRING)) != NULL)
            j->text = parse_string(r);
    } else if (*r->p == '[' || *r->p == '{') {
        if ((j = new_value(r, *r->p == '[' ? JSON_ARRAY : JSON_OBJECT)) != NULL) {
            r->p++;
            parse_items(r, j, j->type == JSON_ARRAY ? ']' : '}', depth);
        }
    } else if ((len = number_length(r->p)) > 0) {
        if ((j = new_value(r, JSON_NUMBER)) != NULL && (j->text = strndup(r->p, len)) == NULL)
            reader_error(r, "out of memory");
        r->p += len;
    } else {
        reader_error(r, *r->p ? "expected a value" : "the text ends where a value should be");
    }
    if (r->failed) {
        json_free(j);
        return NULL;
    }
    return j;
}

struct json *json_parse(const char *text, char *err, size_t errlen)
{
    struct reader r = {.start = text, .p = text, .err = err, .errlen = errlen};
    struct json *j = parse_value(&r, 0);

    if (j != NULL) {
        skip_blanks(&r);
        if (*r.p != '\0') {
            reader_error(&r, "text after the value");
            json_free(j);
            return NULL;
        }
    }
    return j;
}

void json_free(struct json *j)
{
    while (j != NULL) {
        struct json *next = j->next;

        json_free(j->child);
        free(j->text);
        free(j->key);
        free(j);
        j = next;
    }
}

const struct json *json_get(const struct json *obj, const char *key)
{
    if (obj == NULL || obj->type != JSON_OBJECT)
        return NULL;
    for (const struct json *m = obj->child; m != NULL; m = m->next) {
        if (strcmp(m->key, key) == 0)
            return m;
    }
    return NULL;
}

bool json_u64(const struct json *j, uint64_t *v)
{
    if (j == NULL || j->type != JSON_NUMBER || strspn(j->text, "0123456789") != strlen(j->text))
        return false;
    errno = 0;
    *v = strtoull(j->text, NULL, 10);
    return errno == 0;
}

/* The length of the UTF-8 sequence at s (1 to 4), or 0 when it is not one. */
static size_t utf8_length(const unsigned char *s)
{
    size_t n = s[0] < 0x80                    ? 1
               : s[0] >= 0xC2 && s[0] <= 0xDF ? 2
               : s[0] >= 0xE0 && s[0] <= 0xEF ? 3
               : s[0] >= 0xF0 && s[0] <= 0xF4 ? 4
                                              : 0;

    for (size_t k = 1; k < n; k++) {
        if ((s[k] & 0xC0) != 0x80)
            return 0;
    }
    if ((n == 3 && s[0] == 0xE0 && s[1] < 0xA0) || (n == 3 && s[0] == 0xED && s[1] >= 0xA0) ||
        (n == 4 && s[0] == 0xF0 && s[1] < 0x90) || (n == 4 && s[0] == 0xF4 && s[1] >= 0x90))
        return 0; /* overlong, a surrogate, or past U+10FFFF */
    return n;
}

void json_put_string(FILE *f, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;

    fputc('"', f);
    while (*p) {
        size_t n = utf8_length(p);

        if (n == 0) {
            fputs("\xEF\xBF\xBD", f);
            p++;
        } else if (*p == '"' || *p == '\\') {
            fprintf(f, "\\%c", *p++);
        } else if (*p < 0x20) {
            fprintf(f, "\\u%04x", *p++);
        } else {
            fwrite(p, 1, n, f);
            p += n;
        }
    }
    fputc('"', f);
}
