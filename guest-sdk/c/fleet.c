/*
 * fleet.c: the C SDK's implementation (see fleet.h). It writes requests with a small
 * JSON writer and reads replies with a small in-place reader: a reply's strings are
 * unescaped where they lie and NUL-terminated there, so that a reply costs no copy and no
 * allocation beyond its buffer.
 */
#include "fleet.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- The exports the SDK owns ---- */

FLEET_EXPORT("fleet_abi_version") int32_t fleet_abi_version(void) { return FLEET_ABI_VERSION; }

static char *input_buf;
static size_t input_cap;

/* fleet_input hands the host a buffer of at least size bytes for the next input. */
FLEET_EXPORT("fleet_input") void *fleet_input(uint32_t size) {
	if ((size_t)size + 1 > input_cap) {
		char *b = realloc(input_buf, size + 1);
		if (!b) {
			/* A pointer past any wasm32 memory (not NULL: address 0 is memory too), which
			 * the host refuses: the instance is replaced by a fresh one. */
			return (void *)(uintptr_t)UINT32_MAX;
		}
		input_buf = b, input_cap = size + 1;
	}
	return input_buf;
}

/* ---- Errors ---- */

static const char *const kind_names[] = {
	"", "TypeError", "ValueError", "PermissionDenied", "NotFound",
	"Conflict", "LimitExceeded", "Unavailable", "Internal", "RateLimited",
};

const char *fleet_kind_name(fleet_kind k) {
	if ((unsigned)k >= sizeof kind_names / sizeof kind_names[0]) {
		return "Internal";
	}
	return kind_names[k];
}

static char err_msg[512];

const char *fleet_error_message(void) { return err_msg; }

static int64_t err_wait_ms;

int64_t fleet_last_wait_ms(void) { return err_wait_ms; }

static fleet_kind fail(fleet_kind k, const char *msg) {
	snprintf(err_msg, sizeof err_msg, "%s", msg);
	return k;
}

/* ---- The JSON writer ---- */

typedef struct {
	char *b;
	size_t n, cap;
	bool oom;
} wbuf;

static void w_grow(wbuf *w, size_t more) {
	if (w->oom || w->n + more <= w->cap) {
		return;
	}
	size_t cap = w->cap ? w->cap : 256;
	while (cap < w->n + more) {
		cap *= 2;
	}
	char *b = realloc(w->b, cap);
	if (!b) {
		w->oom = true;
		return;
	}
	w->b = b, w->cap = cap;
}

static void w_bytes(wbuf *w, const char *s, size_t n) {
	w_grow(w, n);
	if (!w->oom) {
		memcpy(w->b + w->n, s, n);
		w->n += n;
	}
}

static void w_lit(wbuf *w, const char *s) { w_bytes(w, s, strlen(s)); }

/* w_json writes a JSON text of the caller's as it is; NULL is null. */
static void w_json(wbuf *w, const char *v) { w_lit(w, v ? v : "null"); }

static void w_int(wbuf *w, int64_t v) {
	char t[24];
	w_bytes(w, t, (size_t)snprintf(t, sizeof t, "%lld", (long long)v));
}

/* w_str writes s as a JSON string: quotes, backslashes and control bytes escaped, other
 * bytes (UTF-8) as they are. */
static void w_str(wbuf *w, const char *s) {
	static const char hex[] = "0123456789abcdef";
	w_bytes(w, "\"", 1);
	for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
		char e[6] = {'\\', 0};
		size_t n = 2;
		switch (*p) {
		case '"': e[1] = '"'; break;
		case '\\': e[1] = '\\'; break;
		case '\n': e[1] = 'n'; break;
		case '\r': e[1] = 'r'; break;
		case '\t': e[1] = 't'; break;
		default:
			if (*p >= 0x20) {
				w_bytes(w, (const char *)p, 1);
				continue;
			}
			e[1] = 'u', e[2] = '0', e[3] = '0', e[4] = hex[*p >> 4], e[5] = hex[*p & 15];
			n = 6;
		}
		w_bytes(w, e, n);
	}
	w_bytes(w, "\"", 1);
}

/* w_field writes ,"key": (or {"key": for the first field) and returns w. */
static wbuf *w_key(wbuf *w, const char *key) {
	w_bytes(w, w->n ? "," : "{", 1);
	w_str(w, key);
	w_bytes(w, ":", 1);
	return w;
}

static void w_base64(wbuf *w, const unsigned char *p, size_t n) {
	static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	w_bytes(w, "\"", 1);
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
		char q[4] = {tab[v >> 18 & 63], tab[v >> 12 & 63], i + 1 < n ? tab[v >> 6 & 63] : '=', i + 2 < n ? tab[v & 63] : '='};
		w_bytes(w, q, 4);
	}
	w_bytes(w, "\"", 1);
}

/* ---- The in-place JSON reader ---- */

/* The types of a reply's fields. */
enum { J_STR, J_RAW, J_INT, J_BOOL, J_OBJ, J_B64, J_ITEMS };

typedef struct jfield {
	const char *key;
	int type;
	void *out;                 /* const char **, int64_t *, bool *, fleet_pool_item lists... */
	const struct jfield *sub;  /* J_OBJ: the object's fields */
	int nsub;
	size_t *len;               /* J_B64: the decoded length */
} jfield;

/* The list J_ITEMS fills. */
typedef struct {
	fleet_pool_item *items;
	size_t cap, n;
} item_list;

typedef struct {
	char *b;
	size_t n, i;
	bool bad;
} jreader;

static void j_ws(jreader *r) {
	while (r->i < r->n && (r->b[r->i] == ' ' || r->b[r->i] == '\n' || r->b[r->i] == '\r' || r->b[r->i] == '\t')) {
		r->i++;
	}
}

static char j_peek(jreader *r) {
	j_ws(r);
	return r->i < r->n ? r->b[r->i] : 0;
}

static bool j_eat(jreader *r, char c) {
	if (j_peek(r) != c) {
		r->bad = true;
		return false;
	}
	r->i++;
	return true;
}

static int hexval(char c) {
	if (c >= '0' && c <= '9') return c - '0';
	if (c >= 'a' && c <= 'f') return c - 'a' + 10;
	if (c >= 'A' && c <= 'F') return c - 'A' + 10;
	return -1;
}

static int hex4(const char *p) {
	int v = 0;
	for (int k = 0; k < 4; k++) {
		int h = hexval(p[k]);
		if (h < 0) return -1;
		v = v << 4 | h;
	}
	return v;
}

static char *utf8(char *o, uint32_t c) {
	if (c < 0x80) {
		*o++ = (char)c;
	} else if (c < 0x800) {
		*o++ = (char)(0xC0 | c >> 6), *o++ = (char)(0x80 | (c & 63));
	} else if (c < 0x10000) {
		*o++ = (char)(0xE0 | c >> 12), *o++ = (char)(0x80 | (c >> 6 & 63)), *o++ = (char)(0x80 | (c & 63));
	} else {
		*o++ = (char)(0xF0 | c >> 18), *o++ = (char)(0x80 | (c >> 12 & 63));
		*o++ = (char)(0x80 | (c >> 6 & 63)), *o++ = (char)(0x80 | (c & 63));
	}
	return o;
}

/* j_str reads a string, unescapes it in place and NUL-terminates it there. The result is
 * never longer than the quoted text, so writing it over the text is safe. */
static char *j_str(jreader *r) {
	if (!j_eat(r, '"')) return NULL;
	char *start = r->b + r->i, *o = start;
	while (r->i < r->n) {
		char c = r->b[r->i++];
		if (c == '"') {
			*o = 0;
			return start;
		}
		if ((unsigned char)c < 0x20) break;
		if (c != '\\') {
			*o++ = c;
			continue;
		}
		if (r->i >= r->n) break;
		switch (c = r->b[r->i++]) {
		case '"': case '\\': case '/': *o++ = c; break;
		case 'b': *o++ = '\b'; break;
		case 'f': *o++ = '\f'; break;
		case 'n': *o++ = '\n'; break;
		case 'r': *o++ = '\r'; break;
		case 't': *o++ = '\t'; break;
		case 'u': {
			if (r->n - r->i < 4) goto bad;
			int u = hex4(r->b + r->i);
			if (u < 0) goto bad;
			r->i += 4;
			uint32_t cp = (uint32_t)u;
			if (u >= 0xD800 && u < 0xDC00 && r->n - r->i >= 6 && r->b[r->i] == '\\' && r->b[r->i + 1] == 'u') {
				int lo = hex4(r->b + r->i + 2);
				if (lo >= 0xDC00 && lo < 0xE000) {
					cp = 0x10000 + ((uint32_t)(u - 0xD800) << 10) + (uint32_t)(lo - 0xDC00);
					r->i += 6;
				}
			}
			if (cp >= 0xD800 && cp < 0xE000) cp = 0xFFFD; /* a lone surrogate, as Go writes it */
			o = utf8(o, cp);
			break;
		}
		default: goto bad;
		}
	}
bad:
	r->bad = true;
	return NULL;
}

/* j_skip passes over one value of any type, to depth 64. */
static void j_skip(jreader *r, int depth) {
	char c = j_peek(r);
	if (depth == 0) {
		r->bad = true;
		return;
	}
	if (c == '"') {
		/* skip without unescaping: the text may be a raw value the caller keeps */
		r->i++;
		while (r->i < r->n && r->b[r->i] != '"') {
			r->i += r->b[r->i] == '\\' ? 2 : 1;
		}
		if (r->i >= r->n) r->bad = true;
		r->i++;
		return;
	}
	if (c == '{' || c == '[') {
		char close = c == '{' ? '}' : ']';
		r->i++;
		if (j_peek(r) == close) {
			r->i++;
			return;
		}
		while (!r->bad) {
			if (c == '{') {
				j_skip(r, depth - 1);
				j_eat(r, ':');
			}
			j_skip(r, depth - 1);
			if (j_peek(r) == close) {
				r->i++;
				return;
			}
			j_eat(r, ',');
		}
		return;
	}
	size_t start = r->i;
	while (r->i < r->n && strchr("+-.0123456789eEtruefalsn", r->b[r->i])) {
		r->i++;
	}
	if (r->i == start) r->bad = true;
}

static int64_t j_int(jreader *r) {
	j_ws(r);
	bool neg = r->i < r->n && r->b[r->i] == '-';
	if (neg) r->i++;
	size_t start = r->i;
	int64_t v = 0;
	while (r->i < r->n && r->b[r->i] >= '0' && r->b[r->i] <= '9') {
		v = v * 10 + (r->b[r->i++] - '0');
	}
	if (r->i == start || r->i - start > 18) r->bad = true;
	return neg ? -v : v;
}

static bool j_bool(jreader *r) {
	j_ws(r);
	if (r->n - r->i >= 4 && !memcmp(r->b + r->i, "true", 4)) {
		r->i += 4;
		return true;
	}
	if (r->n - r->i >= 5 && !memcmp(r->b + r->i, "false", 5)) {
		r->i += 5;
		return false;
	}
	r->bad = true;
	return false;
}

/* j_base64 decodes a base64 string in place. */
static char *j_base64(jreader *r, size_t *len) {
	char *s = j_str(r);
	if (!s) return NULL;
	char *o = s;
	uint32_t acc = 0;
	int bits = 0;
	for (char *p = s; *p && *p != '='; p++) {
		const char *tab = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
		const char *at = strchr(tab, *p);
		if (!at) {
			r->bad = true;
			return NULL;
		}
		acc = acc << 6 | (uint32_t)(at - tab);
		if ((bits += 6) >= 8) {
			bits -= 8;
			*o++ = (char)(acc >> bits);
		}
	}
	*o = 0;
	*len = (size_t)(o - s);
	return s;
}

static void j_object(jreader *r, const jfield *f, int nf);

static void j_items(jreader *r, item_list *l);

/* j_value reads the value of field f. A raw value is NUL-terminated in place once the
 * byte after it was read. */
static void j_value(jreader *r, const jfield *f) {
	if (!f) {
		j_skip(r, 64);
		return;
	}
	if (j_peek(r) == 'n' && f->type != J_RAW) { /* null: the zero value */
		j_skip(r, 64);
		return;
	}
	switch (f->type) {
	case J_STR: *(char **)f->out = j_str(r); break;
	case J_B64: *(char **)f->out = j_base64(r, f->len); break;
	case J_INT: *(int64_t *)f->out = j_int(r); break;
	case J_BOOL: *(bool *)f->out = j_bool(r); break;
	case J_OBJ:
		if (f->out) *(bool *)f->out = true; /* J_OBJ's out, when set, says it was there */
		j_object(r, f->sub, f->nsub);
		break;
	case J_ITEMS: j_items(r, f->out); break;
	case J_RAW: {
		j_ws(r);
		char *start = r->b + r->i;
		j_skip(r, 64);
		*(char **)f->out = start;
		break;
	}
	}
}

/* j_object reads an object, the fields named in f into their outputs, others skipped. */
static void j_object(jreader *r, const jfield *f, int nf) {
	if (!j_eat(r, '{')) return;
	if (j_peek(r) == '}') {
		r->i++;
		return;
	}
	while (!r->bad) {
		char *key = j_str(r);
		if (!key || !j_eat(r, ':')) return;
		const jfield *match = NULL;
		for (int k = 0; k < nf; k++) {
			if (!strcmp(f[k].key, key)) match = &f[k];
		}
		j_value(r, match);
		size_t end = r->i;
		char c = j_peek(r);
		r->i++;
		if (match && match->type == J_RAW && !r->bad) {
			r->b[end] = 0; /* c was read: the raw value ends here */
		}
		if (c == '}') return;
		if (c != ',') r->bad = true;
	}
}

/* item_fields fills f with the fields of a pool item, read into it. */
enum { ITEM_FIELDS = 9 };
static void item_fields(jfield f[ITEM_FIELDS], fleet_pool_item *it) {
	const jfield t[ITEM_FIELDS] = {
		{"id", J_STR, &it->id},
		{"payload", J_RAW, &it->payload},
		{"tags", J_RAW, &it->tags},
		{"created_at_ms", J_INT, &it->created_at_ms},
		{"expires_at_ms", J_INT, &it->expires_at_ms},
		{"score", J_INT, &it->score},
		{"uses", J_INT, &it->uses},
		{"max_uses", J_INT, &it->max_uses},
		{"max_error_score", J_INT, &it->max_error_score},
	};
	memcpy(f, t, sizeof t);
}

static void j_items(jreader *r, item_list *l) {
	if (!j_eat(r, '[')) return;
	if (j_peek(r) == ']') {
		r->i++;
		return;
	}
	while (!r->bad) {
		fleet_pool_item scratch, *it = l->n < l->cap ? &l->items[l->n] : &scratch;
		memset(it, 0, sizeof *it);
		jfield f[ITEM_FIELDS];
		item_fields(f, it);
		j_object(r, f, ITEM_FIELDS);
		l->n++;
		char c = j_peek(r);
		r->i++;
		if (c == ']') return;
		if (c != ',') r->bad = true;
	}
}

/* ---- Calling the host ---- */

typedef int32_t (*op_fn)(const void *, int32_t, void *, int32_t);

static wbuf req;     /* the request being written, reused by every call */
static wbuf reply;   /* the reply buffer, grown to the largest reply seen */

/* call closes the request in req ({} when no field was written), sends it to op and
 * reads the reply's ok result into f. */
static fleet_kind call(op_fn op, const char *name, const jfield *f, int nf) {
	w_lit(&req, req.n ? "}" : "{}");
	if (req.oom) {
		req.oom = false, req.n = 0;
		return fail(FLEET_LIMIT_EXCEEDED, "fleet: out of memory writing the request");
	}
	if (reply.cap == 0) w_grow(&reply, 4096);
	if (reply.oom) return fail(FLEET_INTERNAL, "fleet: out of memory for the reply buffer");
	int32_t n = op(req.b, (int32_t)req.n, reply.b, (int32_t)reply.cap - 1);
	req.n = 0;
	if (n < 0) {
		return fail(FLEET_INTERNAL, "fleet: the host refused the request or reply range");
	}
	if ((size_t)n > reply.cap - 1) { /* it did not fit: the host kept it */
		reply.n = 0;
		w_grow(&reply, (size_t)n + 1);
		if (reply.oom) return fail(FLEET_INTERNAL, "fleet: out of memory for a large reply");
		int32_t m = fleet_op_reply_fetch(NULL, 0, reply.b, (int32_t)reply.cap - 1);
		if (m != n) return fail(FLEET_INTERNAL, "fleet: reply_fetch did not return the kept reply");
	}
	reply.b[n] = 0;
	const char *kind = NULL, *message = NULL;
	err_wait_ms = 0;
	jfield errf[] = {{"kind", J_STR, &kind}, {"message", J_STR, &message}, {"wait_ms", J_INT, &err_wait_ms}};
	bool ok = false;
	jfield env[] = {{"ok", J_OBJ, &ok, f, nf}, {"error", J_OBJ, NULL, errf, 3}};
	jreader r = {reply.b, (size_t)n, 0, false};
	j_object(&r, env, 2);
	char m[128];
	if (r.bad) {
		snprintf(m, sizeof m, "fleet: %s: malformed reply", name);
		return fail(FLEET_INTERNAL, m);
	}
	if (kind) {
		for (int k = 1; k < (int)(sizeof kind_names / sizeof kind_names[0]); k++) {
			if (!strcmp(kind, kind_names[k])) {
				return fail((fleet_kind)k, message ? message : "");
			}
		}
		return fail(FLEET_INTERNAL, message ? message : "unknown error kind");
	}
	if (!ok) {
		snprintf(m, sizeof m, "fleet: %s: reply has neither ok nor error", name);
		return fail(FLEET_INTERNAL, m);
	}
	return FLEET_OK;
}

/* call1 is call for a result of one field, key, of type J_STR, J_RAW, J_INT or J_BOOL,
 * stored in *out (const char *, int64_t or bool; out may be NULL), zero on an error. */
static fleet_kind call1(op_fn op, const char *name, const char *key, int type, void *out) {
	union {
		const char *s;
		int64_t i;
		bool b;
	} v;
	memset(&v, 0, sizeof v);
	jfield f[] = {{key, type, &v}};
	fleet_kind k = call(op, name, f, 1);
	if (out) memcpy(out, &v, type == J_INT ? sizeof v.i : type == J_BOOL ? sizeof v.b : sizeof v.s);
	return k;
}

/* CALL and CALL1 name the op once: its import and its name in messages. */
#define CALL(op, f, nf) call(fleet_op_##op, #op, f, nf)
#define CALL1(op, key, type, out) call1(fleet_op_##op, #op, key, type, out)

/* ---- The operations ---- */

#define KEY(k) w_key(&req, k)

fleet_kind fleet_pool_put(const char *pool, const char *payload, const char *tags, int64_t ttl_ms, const fleet_health *health, const char **id) {
	w_str(KEY("pool"), pool);
	w_json(KEY("payload"), payload);
	if (tags) w_json(KEY("tags"), tags);
	if (ttl_ms) w_int(KEY("ttl_ms"), ttl_ms);
	if (health && health->max_uses) w_int(KEY("max_uses"), health->max_uses);
	if (health && health->max_error_score) w_int(KEY("max_error_score"), health->max_error_score);
	return CALL1(pool_put, "id", J_STR, id);
}

static void w_query(const char *pool, const char *where) {
	w_str(KEY("pool"), pool);
	if (where) w_json(KEY("where"), where);
}

fleet_kind fleet_pool_claim(const char *pool, const char *where, int64_t hold_ms, fleet_claim *out) {
	w_query(pool, where);
	w_int(KEY("hold_ms"), hold_ms);
	fleet_claim c;
	memset(&c, 0, sizeof c);
	jfield item[ITEM_FIELDS];
	item_fields(item, &c.item);
	jfield f[] = {
		{"found", J_BOOL, &c.found},
		{"item", J_OBJ, NULL, item, ITEM_FIELDS},
		{"token", J_STR, &c.token},
		{"until_ms", J_INT, &c.until_ms},
	};
	fleet_kind k = CALL(pool_claim, f, 4);
	if (out) *out = c;
	return k;
}

fleet_kind fleet_pool_list(const char *pool, const char *where, int limit, fleet_pool_item *items, size_t cap, size_t *n) {
	w_query(pool, where);
	if (limit) w_int(KEY("limit"), limit);
	item_list l = {items, cap, 0};
	jfield f[] = {{"items", J_ITEMS, &l}};
	fleet_kind k = CALL(pool_list, f, 1);
	if (n) *n = l.n;
	return k;
}

static void w_item_ref(const char *pool, const char *id, const char *last, const char *value) {
	w_str(KEY("pool"), pool);
	w_str(KEY("id"), id);
	w_str(KEY(last), value);
}

fleet_kind fleet_pool_release(const char *pool, const char *id, const char *token) {
	w_item_ref(pool, id, "token", token);
	return CALL(pool_release, NULL, 0);
}

fleet_kind fleet_pool_extend(const char *pool, const char *id, const char *token, int64_t hold_ms, int64_t *until_ms) {
	w_item_ref(pool, id, "token", token);
	w_int(KEY("hold_ms"), hold_ms);
	return CALL1(pool_extend, "until_ms", J_INT, until_ms);
}

fleet_kind fleet_pool_mark_bad(const char *pool, const char *id, const char *reason) {
	w_item_ref(pool, id, "reason", reason);
	return CALL(pool_mark_bad, NULL, 0);
}

fleet_kind fleet_pool_penalize(const char *pool, const char *id, const char *reason, int64_t weight) {
	if (weight < 1) return fail(FLEET_VALUE_ERROR, "fleet: fleet_pool_penalize: weight must be 1 or more (fleet_pool_mark_bad evicts)");
	w_item_ref(pool, id, "reason", reason);
	w_int(KEY("weight"), weight);
	return CALL(pool_mark_bad, NULL, 0);
}

fleet_kind fleet_pool_mark_good(const char *pool, const char *id, int64_t weight) {
	w_str(KEY("pool"), pool);
	w_str(KEY("id"), id);
	if (weight) w_int(KEY("weight"), weight);
	return CALL(pool_mark_good, NULL, 0);
}

fleet_kind fleet_pool_size(const char *pool, int64_t *size) {
	w_str(KEY("pool"), pool);
	return CALL1(pool_size, "size", J_INT, size);
}

static void w_kv(const char *ns, const char *key) {
	w_str(KEY("namespace"), ns);
	w_str(KEY("key"), key);
}

fleet_kind fleet_kv_get(const char *ns, const char *key, bool *found, const char **value) {
	w_kv(ns, key);
	bool fd = false;
	const char *v = NULL;
	jfield f[] = {{"found", J_BOOL, &fd}, {"value", J_RAW, &v}};
	fleet_kind k = CALL(kv_get, f, 2);
	if (found) *found = fd;
	if (value) *value = v;
	return k;
}

fleet_kind fleet_kv_set(const char *ns, const char *key, const char *value, int64_t ttl_ms) {
	w_kv(ns, key);
	w_json(KEY("value"), value);
	if (ttl_ms) w_int(KEY("ttl_ms"), ttl_ms);
	return CALL(kv_set, NULL, 0);
}

fleet_kind fleet_kv_delete(const char *ns, const char *key, bool *existed) {
	w_kv(ns, key);
	return CALL1(kv_delete, "existed", J_BOOL, existed);
}

fleet_kind fleet_lock_acquire(const char *name, int64_t hold_ms, int64_t wait_ms, fleet_lock *out) {
	w_str(KEY("name"), name);
	w_int(KEY("hold_ms"), hold_ms);
	if (wait_ms) w_int(KEY("wait_ms"), wait_ms);
	fleet_lock l;
	memset(&l, 0, sizeof l);
	jfield f[] = {
		{"acquired", J_BOOL, &l.acquired},
		{"token", J_STR, &l.token},
		{"fence", J_INT, &l.fence},
		{"until_ms", J_INT, &l.until_ms},
	};
	fleet_kind k = CALL(lock_acquire, f, 4);
	if (out) *out = l;
	return k;
}

fleet_kind fleet_lock_release(const char *name, const char *token, bool *released) {
	w_str(KEY("name"), name);
	w_str(KEY("token"), token);
	return CALL1(lock_release, "released", J_BOOL, released);
}

fleet_kind fleet_counter_incr(const char *name, int64_t delta, int64_t *value) {
	w_str(KEY("name"), name);
	if (delta) w_int(KEY("delta"), delta);
	return CALL1(counter_incr, "value", J_INT, value);
}

fleet_kind fleet_counter_get(const char *name, int64_t *value) {
	w_str(KEY("name"), name);
	return CALL1(counter_get, "value", J_INT, value);
}

fleet_kind fleet_submit(const char *queue, const char *payload, const char *key, const char **task_id) {
	return fleet_submit_with(queue, payload, &(fleet_submit_options){.key = key}, task_id);
}

fleet_kind fleet_submit_with(const char *queue, const char *payload, const fleet_submit_options *opts, const char **task_id) {
	w_str(KEY("queue"), queue);
	w_json(KEY("payload"), payload);
	if (opts && opts->key) w_str(KEY("key"), opts->key);
	if (opts && opts->unique) w_str(KEY("unique"), opts->unique);
	if (opts && opts->unique_ttl_ms) w_int(KEY("unique_ttl_ms"), opts->unique_ttl_ms);
	return CALL1(submit, "task_id", J_STR, task_id);
}

fleet_kind fleet_config_get(const char **config) {
	return CALL1(config_get, "config", J_RAW, config);
}

fleet_kind fleet_log(const char *level, const char *message, const char *attrs) {
	w_str(KEY("level"), level);
	w_str(KEY("message"), message);
	if (attrs) w_json(KEY("attrs"), attrs);
	return CALL(log, NULL, 0);
}

fleet_kind fleet_metric(const char *name, const char *kind, double value) {
	char num[32];
	snprintf(num, sizeof num, "%.17g", value);
	w_str(KEY("name"), name);
	w_str(KEY("kind"), kind);
	w_lit(KEY("value"), num);
	return CALL(metric, NULL, 0);
}

fleet_kind fleet_http(const fleet_http_request *in, fleet_http_response *out) {
	w_str(KEY("method"), in->method);
	w_str(KEY("url"), in->url);
	if (in->headers) w_json(KEY("headers"), in->headers);
	if (in->body_len) w_base64(KEY("body"), in->body, in->body_len);
	if (in->timeout_ms) w_int(KEY("timeout_ms"), in->timeout_ms);
	if (in->proxy) w_str(KEY("proxy"), in->proxy);
	if (in->max_redirects) w_int(KEY("max_redirects"), in->max_redirects);
	fleet_http_response h;
	memset(&h, 0, sizeof h);
	int64_t status = 0;
	jfield f[] = {
		{"status", J_INT, &status},
		{"headers", J_RAW, &h.headers},
		{"body", J_B64, &h.body, NULL, 0, &h.body_len},
		{"final_url", J_STR, &h.final_url},
		{"error", J_STR, &h.error},
		{"error_code", J_STR, &h.error_code},
	};
	fleet_kind k = CALL(http, f, 6);
	h.status = (int)status;
	if (out) *out = h;
	return k;
}

/* ---- Tasks and results ---- */

fleet_kind fleet_read_task(uint32_t len, fleet_task *t) {
	memset(t, 0, sizeof *t);
	if (!input_buf || len >= input_cap) return fail(FLEET_INTERNAL, "fleet: no input of that length");
	input_buf[len] = 0;
	jfield task[] = {
		{"id", J_STR, &t->id},
		{"payload", J_RAW, &t->payload},
		{"attempts", J_INT, &t->attempts},
		{"enqueued_at_ms", J_INT, &t->enqueued_at_ms},
		{"last_error", J_STR, &t->last_error},
		{"hand_backs", J_INT, &t->hand_backs},
	};
	jfield f[] = {{"task", J_OBJ, NULL, task, sizeof task / sizeof task[0]}, {"iteration", J_INT, &t->iteration}};
	jreader r = {input_buf, len, 0, false};
	j_object(&r, f, 2);
	if (r.bad) return fail(FLEET_INTERNAL, "fleet: malformed task input");
	return FLEET_OK;
}

fleet_kind fleet_read_tick(uint32_t len, int64_t *iteration) {
	if (!input_buf || len >= input_cap) return fail(FLEET_INTERNAL, "fleet: no input of that length");
	int64_t it = 0;
	jfield f[] = {{"iteration", J_INT, &it}};
	jreader r = {input_buf, len, 0, false};
	j_object(&r, f, 1);
	if (r.bad) return fail(FLEET_INTERNAL, "fleet: malformed tick input");
	if (iteration) *iteration = it;
	return FLEET_OK;
}

static const char done_result[] = "{\"outcome\":\"done\"}";
static wbuf result;

uint64_t fleet_done(void) { return fleet_packed(done_result, sizeof done_result - 1); }

static uint64_t result_packed(void) {
	w_lit(&result, "}");
	if (result.oom) { /* the host refuses a result it cannot read: the task is retried */
		result.oom = false, result.n = 0;
		return 0;
	}
	uint64_t p = fleet_packed(result.b, result.n);
	result.n = 0;
	return p;
}

uint64_t fleet_retry(int64_t after_ms) {
	w_str(w_key(&result, "outcome"), "retry");
	if (after_ms) w_int(w_key(&result, "retry_after_ms"), after_ms);
	return result_packed();
}

/* reasoned is the result of an outcome that carries a reason: fail, park. */
static uint64_t reasoned(const char *outcome, const char *reason) {
	w_str(w_key(&result, "outcome"), outcome);
	w_str(w_key(&result, "reason"), reason);
	return result_packed();
}

uint64_t fleet_fail(const char *reason) { return reasoned("fail", reason); }

uint64_t fleet_park(const char *reason) { return reasoned("park", reason); }
