/*
 * JSON for the launcher (tools/json.c): a reader that turns a whole text
 * into a tree, and a writer of strings. goshim stress --json writes its
 * results with it and --merge reads them back (tools/stress_json.c).
 */
#ifndef GOSHIM_TOOLS_JSON_H
#define GOSHIM_TOOLS_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum json_type { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT };

/* A value. Arrays and objects list their elements from child through next. */
struct json {
    enum json_type type;
    bool b;             /* JSON_BOOL */
    char *text;         /* JSON_STRING: decoded, NUL-terminated; JSON_NUMBER: as written */
    char *key;          /* a member of an object: its name; else NULL */
    struct json *child; /* JSON_ARRAY, JSON_OBJECT: the first element or member */
    struct json *next;  /* the next element or member of the parent */
};

/* The tree of text, or NULL with "line L, column C: what was wrong" in err. */
struct json *json_parse(const char *text, char *err, size_t errlen);
void json_free(struct json *j);
/* The member key of object obj, or NULL (also when obj is not an object). */
const struct json *json_get(const struct json *obj, const char *key);
/* j is a whole number from 0 to UINT64_MAX: true, its value in *v. */
bool json_u64(const struct json *j, uint64_t *v);
/* s (any bytes) as a JSON string; bytes that are not UTF-8 become U+FFFD. */
void json_put_string(FILE *f, const char *s);

#endif
