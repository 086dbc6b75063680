/*
 * cdemo is a batch plugin that uses every operation of the host, from C: per task of the
 * queue "cdemo-jobs" ({"n":N, ...}) it
 *
 *   - asks for a retry the first time it sees every fifth task (n divisible by 5),
 *   - reads its configuration ({"prefix":S,"url":S}),
 *   - stores the task's payload in KV "cdemo:data" under "<prefix>N" and reads it back
 *     (a payload larger than the SDK's 4 KiB reply buffer crosses through reply_fetch),
 *     and sets and deletes a second key,
 *   - puts an item {"n":N} tagged {"n":N} into the pool "cdemo-items", claims it by its
 *     tag, extends and releases the lease, lists it and counts the pool, and marks it
 *     bad when N is even,
 *   - takes and releases the lock "cdemo:lock",
 *   - adds 1 to the counter "cdemo:done" and reads it,
 *   - POSTs "ping N" to the configured url, expecting "pong N" back (a request the
 *     operator's egress rate did not admit in time hands the task back for the host's wait),
 *   - submits {"n":N} to "cdemo-results", once per task whatever its attempts (keyed by
 *     the task's id),
 *   - checks that a namespace it was not granted answers PermissionDenied,
 *   - and logs a line and records a metric.
 *
 * Anything unexpected fails the task with a reason that says what, for the test to read.
 */
#include "fleet.h"

#include <stdio.h>
#include <string.h>

FLEET_DESCRIBE(
	"{\"abi_version\":1,\"type\":\"cdemo\",\"version\":\"0.1.0\",\"mode\":\"batch\","
	"\"consumes\":{\"name\":\"cdemo-jobs\",\"payload_schema\":{\"type\":\"object\","
	"\"properties\":{\"n\":{\"type\":\"integer\"},\"pad\":{\"type\":\"string\"}},\"required\":[\"n\"]}},"
	"\"pools\":[{\"name\":\"cdemo-items\","
	"\"payload_schema\":{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}}},"
	"\"tags_schema\":{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}},\"additionalProperties\":false}}],"
	"\"submits\":[{\"name\":\"cdemo-results\",\"payload_schema\":{\"type\":\"object\","
	"\"properties\":{\"n\":{\"type\":\"integer\"}},\"required\":[\"n\"]}}],"
	"\"config_schema\":{\"type\":\"object\",\"properties\":{\"prefix\":{\"type\":\"string\"},"
	"\"url\":{\"type\":\"string\"}},\"required\":[\"prefix\",\"url\"],\"additionalProperties\":false}}")

static char why[600];

/* failed fails the task, naming the step and the SDK's error. */
static uint64_t failed(const char *step, fleet_kind k) {
	snprintf(why, sizeof why, "%s: %s: %s", step, fleet_kind_name(k), fleet_error_message());
	return fleet_fail(why);
}

/* wrong fails the task, naming the step and what it saw. */
static uint64_t wrong(const char *step, const char *saw) {
	snprintf(why, sizeof why, "%s: unexpected %.500s", step, saw ? saw : "(null)");
	return fleet_fail(why);
}

/* number reads the natural number after "key": in a compact JSON text, or -1. (Not
 * sscanf: wasi-libc's number scanning needs compiler-rt, which the build leaves out.) */
static long long number(const char *json, const char *key) {
	char pat[32];
	snprintf(pat, sizeof pat, "\"%s\":", key);
	const char *at = json ? strstr(json, pat) : NULL;
	if (!at || at[strlen(pat)] < '0' || at[strlen(pat)] > '9') return -1;
	long long v = 0;
	for (at += strlen(pat); *at >= '0' && *at <= '9'; at++) v = v * 10 + (*at - '0');
	return v;
}

FLEET_EXPORT("fleet_handle") uint64_t fleet_handle(uint32_t len) {
	fleet_task task;
	fleet_kind k;
	if ((k = fleet_read_task(len, &task))) return failed("read task", k);
	long long n = number(task.payload, "n");
	char key[100];
	if (n % 5 == 0) { /* a retry refunds its attempt: KV, not attempts, tells the first */
		bool seen;
		const char *v;
		snprintf(key, sizeof key, "retried-%lld", n);
		if ((k = fleet_kv_get("cdemo:data", key, &seen, &v))) return failed("kv_get retried", k);
		if (!seen) {
			if ((k = fleet_kv_set("cdemo:data", key, "true", 0))) return failed("kv_set retried", k);
			return fleet_retry(1);
		}
	}
	size_t payload_len = strlen(task.payload);
	char buf[160], tags[64], id[128], token[128], task_id[128];
	snprintf(id, sizeof id, "%s", task.id);

	const char *config;
	if ((k = fleet_config_get(&config))) return failed("config_get", k);
	char prefix[64] = "";
	const char *p = strstr(config, "\"prefix\":\"");
	const char *end = p ? strchr(p + 10, '"') : NULL;
	if (!end || end - (p + 10) >= (long)sizeof prefix) return wrong("config_get", config);
	memcpy(prefix, p + 10, (size_t)(end - (p + 10)));
	char url[200] = "";
	p = strstr(config, "\"url\":\"");
	end = p ? strchr(p + 7, '"') : NULL;
	if (!end || end - (p + 7) >= (long)sizeof url) return wrong("config_get", config);
	memcpy(url, p + 7, (size_t)(end - (p + 7)));

	/* KV: the payload in and out again */
	snprintf(key, sizeof key, "%s%lld", prefix, n);
	if ((k = fleet_kv_set("cdemo:data", key, task.payload, 0))) return failed("kv_set", k);
	bool found;
	const char *value;
	if ((k = fleet_kv_get("cdemo:data", key, &found, &value))) return failed("kv_get", k);
	if (!found || strlen(value) < payload_len || number(value, "n") != n) return wrong("kv_get", value);
	bool existed;
	snprintf(key, sizeof key, "scratch-%lld", n); /* the task's own: slots run at once */
	if ((k = fleet_kv_set("cdemo:data", key, "[1,2]", 60000))) return failed("kv_set scratch", k);
	if ((k = fleet_kv_delete("cdemo:data", key, &existed))) return failed("kv_delete", k);
	if (!existed) return wrong("kv_delete", "existed false");

	/* a pool item with health limits, claimed by its tag, extended, released, penalised
	 * and credited */
	snprintf(buf, sizeof buf, "{\"n\":%lld}", n);
	snprintf(tags, sizeof tags, "{\"n\":%lld}", n);
	const char *item_id;
	const fleet_health health = {.max_uses = 10, .max_error_score = 5};
	if ((k = fleet_pool_put("cdemo-items", buf, tags, 0, &health, &item_id))) return failed("pool_put", k);
	char put_id[128];
	snprintf(put_id, sizeof put_id, "%s", item_id);
	fleet_claim c;
	if ((k = fleet_pool_claim("cdemo-items", tags, 60000, &c))) return failed("pool_claim", k);
	if (!c.found || strcmp(c.item.id, put_id) || number(c.item.payload, "n") != n) return wrong("pool_claim", c.item.payload);
	if (c.item.uses != 1 || c.item.max_uses != 10 || c.item.max_error_score != 5 || c.item.score != 0) return wrong("pool_claim", "health");
	snprintf(token, sizeof token, "%s", c.token);
	int64_t until;
	if ((k = fleet_pool_extend("cdemo-items", put_id, token, 30000, &until))) return failed("pool_extend", k);
	if (until <= 0) return wrong("pool_extend", "until_ms");
	if ((k = fleet_pool_release("cdemo-items", put_id, token))) return failed("pool_release", k);
	if ((k = fleet_pool_penalize("cdemo-items", put_id, "stale", 2))) return failed("pool_mark_bad weighted", k);
	if ((k = fleet_pool_mark_good("cdemo-items", put_id, 0))) return failed("pool_mark_good", k);
	if (fleet_pool_penalize("cdemo-items", put_id, "none", 0) != FLEET_VALUE_ERROR) return wrong("fleet_pool_penalize", "weight 0 accepted");
	fleet_pool_item items[4];
	size_t listed;
	if ((k = fleet_pool_list("cdemo-items", tags, 10, items, 4, &listed))) return failed("pool_list", k);
	if (listed != 1 || strcmp(items[0].id, put_id) || number(items[0].tags, "n") != n) return wrong("pool_list", items[0].tags);
	if (items[0].score != 1 || items[0].uses != 1) return wrong("pool_list", "health: want score 1, uses 1");
	int64_t size;
	if ((k = fleet_pool_size("cdemo-items", &size))) return failed("pool_size", k);
	if (size < 1) return wrong("pool_size", "0");
	if (n % 2 == 0 && (k = fleet_pool_mark_bad("cdemo-items", put_id, "even"))) return failed("pool_mark_bad", k);

	/* a lock */
	fleet_lock l;
	if ((k = fleet_lock_acquire("cdemo:lock", 5000, 10000, &l))) return failed("lock_acquire", k);
	if (!l.acquired || l.fence <= 0) return wrong("lock_acquire", l.token);
	bool released;
	snprintf(token, sizeof token, "%s", l.token);
	if ((k = fleet_lock_release("cdemo:lock", token, &released))) return failed("lock_release", k);
	if (!released) return wrong("lock_release", token);

	/* the counter, a submit, a namespace not granted */
	if ((k = fleet_counter_incr("cdemo:done", 1, NULL))) return failed("counter_incr", k);
	int64_t count;
	if ((k = fleet_counter_get("cdemo:done", &count))) return failed("counter_get", k);
	if (count < 1) return wrong("counter_get", "0");

	char body[40], want[40], header[64];
	snprintf(body, sizeof body, "ping %lld", n);
	snprintf(want, sizeof want, "pong %lld", n);
	snprintf(header, sizeof header, "{\"X-N\":[\"%lld\"]}", n);
	fleet_http_request hr = {.method = "POST", .url = url, .headers = header, .body = body, .body_len = strlen(body)};
	fleet_http_response resp;
	if ((k = fleet_http(&hr, &resp)) == FLEET_RATE_LIMITED) return fleet_retry(fleet_last_wait_ms());
	if (k) return failed("http", k);
	if (resp.status != 200 || resp.body_len != strlen(want) || memcmp(resp.body, want, resp.body_len)) {
		return wrong("http", resp.error ? resp.error : resp.body);
	}
	const char *tid;
	if ((k = fleet_submit("cdemo-results", buf, id, &tid))) return failed("submit", k);
	snprintf(task_id, sizeof task_id, "%s", tid);
	if ((k = fleet_kv_get("secret", "x", &found, &value)) != FLEET_PERMISSION_DENIED) return failed("kv_get secret", k);
	/* the message arrives escapes and all: \"secret\" reads back as "secret" */
	if (!strstr(fleet_error_message(), "\"secret\"")) return wrong("kv_get secret", fleet_error_message());

	snprintf(buf, sizeof buf, "{\"n\":%lld,\"submitted\":\"%s\"}", n, task_id);
	if ((k = fleet_log("info", "cdemo: task done", buf))) return failed("log", k);
	if ((k = fleet_metric("cdemo_tasks", "counter", 1))) return failed("metric", k);
	return fleet_done();
}
