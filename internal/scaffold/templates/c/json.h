/*
 * json.h is a small reader of JSON objects, enough for a task's payload, which the host
 * has already checked against the queue's schema: find a member of the object, read it
 * as a string or an integer.
 */
#ifndef JSON_H
#define JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* json_member finds the member name of the object json (a member of the object itself,
 * not of one nested in it) and sets *value to the start of its JSON text and *len to its
 * length. It returns false when json is not an object or has no such member. Keys are
 * compared as they are written (no escapes). */
bool json_member(const char *json, const char *name, const char **value, size_t *len);

/* json_string copies the string member name into buf (at most cap bytes with the NUL),
 * decoding the escapes \" \\ \/ \b \f \n \r \t (a \u escape is kept as it is written).
 * It returns false when the member is absent, not a string, or longer than buf. */
bool json_string(const char *json, const char *name, char *buf, size_t cap);

/* json_int reads the integer member name into *v. It returns false when the member is
 * absent or not an integer that fits an int64_t. */
bool json_int(const char *json, const char *name, int64_t *v);

#endif
