#include "json.h"

#include <string.h>

static const char *space(const char *p) {
	while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t') p++;
	return p;
}

/* end is just past the JSON value that starts at p. */
static const char *end(const char *p) {
	int depth = 0;
	bool in_string = false;
	for (; *p; p++) {
		if (in_string) {
			if (*p == '\\' && p[1]) {
				p++;
			} else if (*p == '"') {
				in_string = false;
				if (depth == 0) return p + 1;
			}
			continue;
		}
		switch (*p) {
		case '"':
			in_string = true;
			break;
		case '{':
		case '[':
			depth++;
			break;
		case '}':
		case ']':
			if (depth == 0) return p;
			if (--depth == 0) return p + 1;
			break;
		case ',':
		case ' ':
		case '\n':
		case '\r':
		case '\t':
			if (depth == 0) return p;
			break;
		}
	}
	return p;
}

bool json_member(const char *json, const char *name, const char **value, size_t *len) {
	const char *p = json ? space(json) : NULL;
	if (!p || *p != '{') return false;
	p = space(p + 1);
	size_t n = strlen(name);
	while (*p == '"') {
		const char *key_end = end(p);
		bool match = (size_t)(key_end - p) == n + 2 && memcmp(p + 1, name, n) == 0;
		p = space(key_end);
		if (*p != ':') return false;
		const char *start = space(p + 1);
		const char *stop = end(start);
		if (match) {
			*value = start;
			*len = (size_t)(stop - start);
			return true;
		}
		p = space(stop);
		if (*p != ',') return false;
		p = space(p + 1);
	}
	return false;
}

bool json_string(const char *json, const char *name, char *buf, size_t cap) {
	const char *v;
	size_t len;
	if (!json_member(json, name, &v, &len) || len < 2 || v[0] != '"' || cap == 0) return false;
	size_t o = 0;
	for (size_t i = 1; i < len - 1; i++) {
		char c = v[i];
		if (c == '\\' && i + 1 < len - 1) {
			switch (v[++i]) {
			case 'b': c = '\b'; break;
			case 'f': c = '\f'; break;
			case 'n': c = '\n'; break;
			case 'r': c = '\r'; break;
			case 't': c = '\t'; break;
			case 'u': c = '\\'; i--; break; /* kept as written */
			default: c = v[i]; break;       /* \" \\ \/ */
			}
		}
		if (o + 1 >= cap) return false;
		buf[o++] = c;
	}
	buf[o] = 0;
	return true;
}

bool json_int(const char *json, const char *name, int64_t *v) {
	const char *p;
	size_t len;
	if (!json_member(json, name, &p, &len) || len == 0) return false;
	bool neg = *p == '-';
	size_t i = neg ? 1 : 0;
	if (i == len) return false;
	uint64_t n = 0;
	for (; i < len; i++) {
		if (p[i] < '0' || p[i] > '9') return false;
		uint64_t d = (uint64_t)(p[i] - '0');
		if (n > (UINT64_MAX - d) / 10) return false;
		n = n * 10 + d;
	}
	if (n > (uint64_t)INT64_MAX + (neg ? 1 : 0)) return false;
	*v = neg ? (int64_t)(0 - n) : (int64_t)n;
	return true;
}
