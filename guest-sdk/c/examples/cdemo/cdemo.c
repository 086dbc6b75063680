/*
 * cdemo is a batch plugin that uses every kind of state the host offers, from C: per task
 * of the queue "cdemo-jobs" ({"n":N, ...}) it
 *
 *   - reads its configuration ({"prefix":S}),
 *   - stores the task's payload in KV "cdemo:data" under "<prefix>N" and reads it back
 *     (a payload larger than the SDK's 4 KiB reply buffer crosses through reply_fetch),
 *   - puts an item {"n":N} tagged {"n":N} into the pool "cdemo-items", claims it by its
 *     tag, extends and releases the lease,
 *   - takes and releases the lock "cdemo:lock",
 *   - adds 1 to the counter "cdemo:done",
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

static const char describe[] =
	"{\"abi_version\":1,\"type\":\"cdemo\",\"version\":\"0.1.0\",\"mode\":\"batch\","
	"\"consumes\":{\"name\":\"cdemo-jobs\",\"payload_schema\":{\"type\":\"object\","
	"\"properties\":{\"n\":{\"type\":\"integer\"},\"pad\":{\"type\":\"string\"}},\"required\":[\"n\"]}},"
	"\"pools\":[{\"name\":\"cdemo-items\","
	"\"payload_schema\":{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}}},"
	"\"tags_schema\":{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}},\"additionalProperties\":false}}],"
	"\"submits\":[{\"name\":\"cdemo-results\",\"payload_schema\":{\"type\":\"object\","
	"\"properties\":{\"n\":{\"type\":\"integer\"}},\"required\":[\"n\"]}}],"
	"\"config_schema\":{\"type\":\"object\",\"properties\":{\"prefix\":{\"type\":\"string\"}},"
	"\"required\":[\"prefix\"],\"additionalProperties\":false}}";

FLEET_EXPORT("fleet_describe") uint64_t fleet_describe(void) {
	return fleet_packed(describe, sizeof describe - 1);
}

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

	/* KV: the payload in and out again */
	char key[100];
	snprintf(key, sizeof key, "%s%lld", prefix, n);
	if ((k = fleet_kv_set("cdemo:data", key, task.payload, 0))) return failed("kv_set", k);
	bool found;
	const char *value;
	if ((k = fleet_kv_get("cdemo:data", key, &found, &value))) return failed("kv_get", k);
	if (!found || strlen(value) < payload_len || number(value, "n") != n) return wrong("kv_get", value);

	/* a pool item, claimed by its tag, extended and released */
	snprintf(buf, sizeof buf, "{\"n\":%lld}", n);
	snprintf(tags, sizeof tags, "{\"n\":%lld}", n);
	const char *item_id;
	if ((k = fleet_pool_put("cdemo-items", buf, tags, 0, &item_id))) return failed("pool_put", k);
	char put_id[128];
	snprintf(put_id, sizeof put_id, "%s", item_id);
	fleet_claim c;
	if ((k = fleet_pool_claim("cdemo-items", tags, 60000, &c))) return failed("pool_claim", k);
	if (!c.found || strcmp(c.item.id, put_id) || number(c.item.payload, "n") != n) return wrong("pool_claim", c.item.payload);
	snprintf(token, sizeof token, "%s", c.token);
	int64_t until;
	if ((k = fleet_pool_extend("cdemo-items", put_id, token, 30000, &until))) return failed("pool_extend", k);
	if (until <= 0) return wrong("pool_extend", "until_ms");
	if ((k = fleet_pool_release("cdemo-items", put_id, token))) return failed("pool_release", k);

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
	const char *tid;
	if ((k = fleet_submit("cdemo-results", buf, id, &tid))) return failed("submit", k);
	snprintf(task_id, sizeof task_id, "%s", tid);
	if ((k = fleet_kv_get("secret", "x", &found, &value)) != FLEET_PERMISSION_DENIED) return failed("kv_get secret", k);

	snprintf(buf, sizeof buf, "{\"n\":%lld,\"submitted\":\"%s\"}", n, task_id);
	if ((k = fleet_log("info", "cdemo: task done", buf))) return failed("log", k);
	if ((k = fleet_metric("cdemo_tasks", "counter", 1))) return failed("metric", k);
	return fleet_done();
}
