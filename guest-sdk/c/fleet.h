/*
 * fleet.h: the C SDK of fleet-host's native ABI (abi/REFERENCE.md is the contract it
 * follows). One function per operation, which writes the request JSON, calls the host
 * function, fetches a reply that did not fit, and reads the reply into C values.
 *
 * Build a plugin (a WASI reactor) with clang and wasi-libc, fleet.c beside it:
 *
 *   clang --target=wasm32-wasi -O2 -mexec-model=reactor -nostdlib -Wl,--no-entry \
 *     $(clang --target=wasm32-wasi -print-file-name=crt1-reactor.o) \
 *     -I guest-sdk/c plugin.c guest-sdk/c/fleet.c -lc -o plugin.wasm
 *
 * Conventions:
 *   - Every operation returns FLEET_OK (0) or the error kind the host answered (or
 *     FLEET_INTERNAL for a reply this SDK cannot read); fleet_error_message() says why.
 *   - JSON values of the plugin's own (payloads, tags, KV values, filters, attrs) are
 *     passed and returned as JSON text: NUL-terminated, compact or not. NULL for an
 *     optional one leaves it out.
 *   - Strings and JSON texts a reply returns point into the SDK's reply buffer: they are
 *     NUL-terminated and valid until the next fleet_ operation. Copy what you keep.
 *   - Durations are milliseconds (0..2592000000, 30 days), times Unix milliseconds.
 *
 * The SDK defines the exports fleet_abi_version and fleet_input; the plugin defines
 * fleet_describe (FLEET_DESCRIBE) and fleet_handle (batch) or fleet_tick (loop) with
 * FLEET_EXPORT.
 */
#ifndef FLEET_H
#define FLEET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI version this SDK speaks (abi.Version). */
#define FLEET_ABI_VERSION 1

/* FLEET_EXPORT(name) exports the function it precedes under name. */
#define FLEET_EXPORT(name) __attribute__((export_name(name)))

/* The error kinds (abi.Kinds), in the ABI's order; 0 is success. */
typedef enum {
	FLEET_OK = 0,
	FLEET_TYPE_ERROR,        /* a field that does not exist (an unknown tag) */
	FLEET_VALUE_ERROR,       /* a wrong type, or a value the schema or the op refuses */
	FLEET_PERMISSION_DENIED, /* not granted the pool, queue, namespace, lock, counter or host */
	FLEET_NOT_FOUND,         /* the item, task or key no longer exists */
	FLEET_CONFLICT,          /* the token no longer holds the lease or lock */
	FLEET_LIMIT_EXCEEDED,    /* a size or count limit; nothing was written */
	FLEET_UNAVAILABLE,       /* the backend cannot be reached; retry later */
	FLEET_INTERNAL,          /* the host's bug, or a reply this SDK cannot read */
	FLEET_RATE_LIMITED,      /* the site's egress rate did not admit the request; nothing sent */
} fleet_kind;

/* fleet_kind_name is the kind as the ABI spells it ("TypeError"), "" for FLEET_OK. */
const char *fleet_kind_name(fleet_kind k);

/* fleet_error_message is the message of the last failed operation, kept until the next
 * one fails. */
const char *fleet_error_message(void);

/* fleet_last_wait_ms is, after FLEET_RATE_LIMITED, how long until the request could be
 * admitted (hand the task back for that long with fleet_retry); 0 after any other. */
int64_t fleet_last_wait_ms(void);

/* ---- The raw ABI: one import per operation (abi/REFERENCE.md, "Calling the host").
 * Each takes a request of req_len bytes at req and a reply buffer of reply_cap bytes;
 * it returns the reply's length (written when <= reply_cap, kept for reply_fetch when
 * larger), or -1 when a range lies outside memory. The functions below use these. */
#define FLEET_IMPORT(name) __attribute__((import_module("fleet"), import_name(name)))
#define FLEET_OP(name) \
	FLEET_IMPORT(#name) int32_t fleet_op_##name(const void *req, int32_t req_len, void *reply, int32_t reply_cap)
FLEET_OP(pool_put);
FLEET_OP(pool_claim);
FLEET_OP(pool_list);
FLEET_OP(pool_release);
FLEET_OP(pool_extend);
FLEET_OP(pool_mark_bad);
FLEET_OP(pool_mark_good);
FLEET_OP(pool_size);
FLEET_OP(kv_get);
FLEET_OP(kv_set);
FLEET_OP(kv_delete);
FLEET_OP(lock_acquire);
FLEET_OP(lock_release);
FLEET_OP(counter_incr);
FLEET_OP(counter_get);
FLEET_OP(submit);
FLEET_OP(config_get);
FLEET_OP(log);
FLEET_OP(metric);
FLEET_OP(http);
FLEET_OP(reply_fetch);
#undef FLEET_OP

/* ---- Pools ---- */

/* fleet_pool_item is one pool entry. */
typedef struct {
	const char *id;
	const char *payload; /* JSON text */
	const char *tags;    /* JSON text */
	int64_t created_at_ms;
	int64_t expires_at_ms; /* 0: no expiry */
	/* The health: its error score (0: healthy), its claims (this one included), and its
	 * put's limits (0: none). A claim prefers the lowest score. */
	int64_t score, uses, max_uses, max_error_score;
} fleet_pool_item;

/* fleet_health is an item's health limits (0: none): it retires once claimed max_uses
 * times (when that lease ends), and once its score passes max_error_score. */
typedef struct {
	int64_t max_uses, max_error_score;
} fleet_health;

/* fleet_claim is a claim's answer: found false when no item matched. */
typedef struct {
	bool found;
	fleet_pool_item item;
	const char *token; /* the lease, for release, extend */
	int64_t until_ms;
} fleet_claim;

/* fleet_pool_put adds an item (tags may be NULL; ttl_ms 0: no expiry; health may be NULL:
 * no limits) and sets *id. */
fleet_kind fleet_pool_put(const char *pool, const char *payload, const char *tags, int64_t ttl_ms, const fleet_health *health, const char **id);
/* fleet_pool_claim leases one item whose tags equal where's (a JSON object, or NULL for
 * any) for hold_ms. */
fleet_kind fleet_pool_claim(const char *pool, const char *where, int64_t hold_ms, fleet_claim *out);
/* fleet_pool_list browses up to limit matching items (0: the host's default) into
 * items[0..cap); *n is how many the host returned, which may exceed cap. */
fleet_kind fleet_pool_list(const char *pool, const char *where, int limit, fleet_pool_item *items, size_t cap, size_t *n);
fleet_kind fleet_pool_release(const char *pool, const char *id, const char *token);
/* fleet_pool_extend renews a lease for hold_ms from now; *until_ms (may be NULL) is its end. */
fleet_kind fleet_pool_extend(const char *pool, const char *id, const char *token, int64_t hold_ms, int64_t *until_ms);
/* fleet_pool_mark_bad evicts an item for good; fleet_pool_penalize adds weight (1 or
 * more) to its score instead, which retires it only past its max_error_score; and
 * fleet_pool_mark_good lowers its score by weight (0: 1), never below 0. A 429 is a rate
 * signal, not a bad session: release it and mark nothing. */
fleet_kind fleet_pool_mark_bad(const char *pool, const char *id, const char *reason);
fleet_kind fleet_pool_penalize(const char *pool, const char *id, const char *reason, int64_t weight);
fleet_kind fleet_pool_mark_good(const char *pool, const char *id, int64_t weight);
fleet_kind fleet_pool_size(const char *pool, int64_t *size);

/* ---- KV ---- */

/* fleet_kv_get sets *found, and *value (JSON text) when found. */
fleet_kind fleet_kv_get(const char *ns, const char *key, bool *found, const char **value);
fleet_kind fleet_kv_set(const char *ns, const char *key, const char *value, int64_t ttl_ms);
/* fleet_kv_delete sets *existed (may be NULL). */
fleet_kind fleet_kv_delete(const char *ns, const char *key, bool *existed);

/* ---- Locks ---- */

typedef struct {
	bool acquired;
	const char *token;
	int64_t fence; /* grows with every acquisition: a fencing token */
	int64_t until_ms;
} fleet_lock;

/* fleet_lock_acquire waits up to wait_ms (0: not at all) for the lock, held hold_ms. */
fleet_kind fleet_lock_acquire(const char *name, int64_t hold_ms, int64_t wait_ms, fleet_lock *out);
/* fleet_lock_release sets *released (may be NULL): false when token no longer held it. */
fleet_kind fleet_lock_release(const char *name, const char *token, bool *released);

/* ---- Counters ---- */

/* fleet_counter_incr adds delta (0 counts as 1) and sets *value (may be NULL). */
fleet_kind fleet_counter_incr(const char *name, int64_t delta, int64_t *value);
fleet_kind fleet_counter_get(const char *name, int64_t *value);

/* ---- Tasks, config, log, metrics ---- */

/* fleet_submit enqueues payload on queue and sets *task_id; key (NULL: none) makes it
 * idempotent: the host enqueues once per key on the queue for 10 minutes and answers a
 * repeat with the first task's id (another payload under the key is FLEET_CONFLICT). */
fleet_kind fleet_submit(const char *queue, const char *payload, const char *key, const char **task_id);

/* fleet_submit_options are what fleet_submit_with asks of the host beyond the payload. */
typedef struct {
	const char *key;       /* NULL: none; as fleet_submit's key */
	/* unique (NULL: none; 1..255 bytes) makes the task unique on its queue by this key:
	 * while the task a submit of the key enqueued waits or runs, or for unique_ttl_ms
	 * after it was submitted (whichever ends last), a submit of the same key, by this
	 * plugin, another or the HTTP API, enqueues nothing and answers the first task's id,
	 * whatever its payload. Keys are per queue, not per plugin. */
	const char *unique;
	int64_t unique_ttl_ms; /* 0..86400000 (a day); 0: only while the task is pending */
} fleet_submit_options;

/* fleet_submit_with is fleet_submit with opts (NULL: none): a scraper that needs a
 * cookie harvested asks once per site, however many of its tasks wait for it:
 *
 *   fleet_submit_with("harvest", "{\"site\":\"example.com\"}",
 *       &(fleet_submit_options){.unique = "site:example.com", .unique_ttl_ms = 60000}, &id);
 *
 * A key or TTL outside its range is FLEET_VALUE_ERROR. */
fleet_kind fleet_submit_with(const char *queue, const char *payload, const fleet_submit_options *opts, const char **task_id);
/* fleet_config_get sets *config to the plugin's configuration (JSON text). */
fleet_kind fleet_config_get(const char **config);
/* fleet_log writes one line at level "debug", "info", "warn" or "error"; attrs is a JSON
 * object or NULL. */
fleet_kind fleet_log(const char *level, const char *message, const char *attrs);
/* fleet_metric records a metric: kind "counter" adds value, "gauge" sets it. */
fleet_kind fleet_metric(const char *name, const char *kind, double value);

/* ---- HTTP ---- */

typedef struct {
	const char *method;  /* "GET", "POST", ... */
	const char *url;
	const char *headers; /* JSON object of arrays, {"Accept":["text/html"]}, or NULL */
	const void *body;
	size_t body_len;
	int64_t timeout_ms;  /* 0: the host's default */
	const char *proxy;   /* an http:// proxy URL that is granted too, or NULL */
	int max_redirects;   /* 0: the host's default; -1: none */
} fleet_http_request;

typedef struct {
	int status;           /* 0 when no response arrived: see error */
	const char *headers;  /* JSON object of arrays, or NULL */
	const char *body;     /* the bytes, NUL-terminated for convenience */
	size_t body_len;
	const char *final_url;
	const char *error;      /* NULL, or why no response arrived */
	const char *error_code; /* timeout, dns, refused, redirect_denied, too_many_redirects, body_too_large, transport */
} fleet_http_response;

/* fleet_http sends one request through the host. A network failure is a response with
 * status 0 and error set, not an error kind; a host the grant does not allow is
 * FLEET_PERMISSION_DENIED. */
fleet_kind fleet_http(const fleet_http_request *req, fleet_http_response *out);

/* ---- The plugin's side: reading a task, returning a result ---- */

/* fleet_task is what fleet_handle receives; its strings stay valid until the export
 * returns. */
typedef struct {
	const char *id;
	const char *payload; /* JSON text */
	int64_t attempts;       /* the attempts spent, counting this one: 1 on the first */
	int64_t enqueued_at_ms;
	const char *last_error; /* NULL on the first attempt */
	/* hand_backs is how often the task was handed back without spending an attempt
	 * (fleet_retry, a drain's cut): a plugin that retries while it waits for something
	 * parks the task (fleet_park) once it has waited too often. */
	int64_t hand_backs;
	int64_t iteration;
} fleet_task;

/* fleet_read_task reads the len bytes of input that fleet_handle(len) was given. */
fleet_kind fleet_read_task(uint32_t len, fleet_task *task);
/* fleet_read_tick reads the input of fleet_tick(len): the loop's iteration. */
fleet_kind fleet_read_tick(uint32_t len, int64_t *iteration);

/* fleet_packed packs a pointer and a length as fleet_describe, fleet_handle and
 * fleet_tick return them: ptr in the high 32 bits, len in the low 32. */
static inline uint64_t fleet_packed(const void *ptr, size_t len) {
	return (uint64_t)(uintptr_t)ptr << 32 | (uint32_t)len;
}

/* FLEET_DESCRIBE(doc) defines the fleet_describe export, which returns doc, a string
 * literal holding the describe document (abi/REFERENCE.md, "The describe document"). */
#define FLEET_DESCRIBE(doc)                                          \
	FLEET_EXPORT("fleet_describe") uint64_t fleet_describe(void) { \
		static const char describe_doc[] = doc;                   \
		return fleet_packed(describe_doc, sizeof describe_doc - 1); \
	}

/* The results of fleet_handle and fleet_tick, as fleet_packed values. */
uint64_t fleet_done(void);
/* fleet_retry hands the task back to its queue after after_ms (0: the host's delay). */
uint64_t fleet_retry(int64_t after_ms);
/* fleet_fail reports a failed attempt: the task is handed back after a backoff that
 * grows with its attempts, or parked once its attempts are spent. */
uint64_t fleet_fail(const char *reason);
/* fleet_park reports that the task cannot succeed, whatever attempts it has left (a page
 * that is gone, a payload no attempt can handle): the host parks it now for the operator,
 * with reason as its last error. A loop plugin's tick has no task to park: there it is
 * fleet_fail. A host older than the park outcome takes it as a broken result
 * (abi/REFERENCE.md, "The outcome document"). */
uint64_t fleet_park(const char *reason);

#ifdef __cplusplus
}
#endif

#endif /* FLEET_H */
