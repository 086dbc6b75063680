/*
 * cpark is the C side of the SDKs' park, unique and hand-back test (tests/sdkpark_test.go;
 * testdata/assemblyscript/parker.ts is the AssemblyScript side, and behaves the same).
 * Per task of the queue "sdk-park" ({"op":S[,"n":N]}) it
 *
 *   - "park": parks the task with the reason "asked to park" (fleet_park);
 *   - "wait": retries until the task was handed back n times (task.hand_backs), then
 *     parks it with the reason "handed back N times";
 *   - "unique": submits {} to the Go counter's queue "count" under the unique key
 *     "sdk-park:once" (a minute), keeps the task id it answered in KV "park-c:ids" under
 *     the task's id, and checks that a unique TTL over a day answers FLEET_VALUE_ERROR.
 *
 * Anything unexpected fails the task with a reason that says what.
 */
#include "fleet.h"

#include <stdio.h>
#include <string.h>

FLEET_DESCRIBE(
	"{\"abi_version\":1,\"type\":\"park-c\",\"version\":\"1.0.0\",\"mode\":\"batch\","
	"\"consumes\":{\"name\":\"sdk-park\",\"payload_schema\":{\"type\":\"object\","
	"\"properties\":{\"op\":{\"enum\":[\"park\",\"wait\",\"unique\"]},\"n\":{\"type\":\"integer\"}},"
	"\"required\":[\"op\"]}},"
	"\"submits\":[{\"name\":\"count\",\"payload_schema\":{"
	"\"$schema\":\"https://json-schema.org/draft/2020-12/schema\","
	"\"properties\":{},\"additionalProperties\":false,\"type\":\"object\"}}]}")

static char why[600];

/* member_int reads the integer member "name" of the flat JSON object json (0 if absent):
 * the payloads here hold no nested value. */
static int64_t member_int(const char *json, const char *name) {
	char pat[32];
	snprintf(pat, sizeof pat, "\"%s\":", name);
	const char *p = strstr(json, pat);
	int64_t v = 0;
	for (p = p ? p + strlen(pat) : ""; *p >= '0' && *p <= '9'; p++) v = v * 10 + (*p - '0');
	return v;
}

static uint64_t unique_submit(const fleet_task *task) {
	const char *id;
	fleet_submit_options once = {.unique = "sdk-park:once", .unique_ttl_ms = 60000};
	if (fleet_submit_with("count", "{}", &once, &id)) return fleet_fail(fleet_error_message());
	char value[300];
	snprintf(value, sizeof value, "\"%s\"", id); /* a task id needs no escape */
	if (fleet_kv_set("park-c:ids", task->id, value, 0)) return fleet_fail(fleet_error_message());
	fleet_submit_options too_long = {.unique = "sdk-park:once", .unique_ttl_ms = 86400001};
	fleet_kind k = fleet_submit_with("count", "{}", &too_long, &id);
	if (k != FLEET_VALUE_ERROR) {
		snprintf(why, sizeof why, "a unique TTL over a day answered %s (%s), want ValueError", k ? fleet_kind_name(k) : "ok", fleet_error_message());
		return fleet_fail(why);
	}
	return fleet_done();
}

FLEET_EXPORT("fleet_handle") uint64_t fleet_handle(uint32_t len) {
	fleet_task task;
	if (fleet_read_task(len, &task)) return fleet_fail(fleet_error_message());
	if (strstr(task.payload, "\"op\":\"park\"")) return fleet_park("asked to park");
	if (strstr(task.payload, "\"op\":\"wait\"")) {
		if (task.hand_backs < member_int(task.payload, "n")) return fleet_retry(1);
		snprintf(why, sizeof why, "handed back %lld times", (long long)task.hand_backs);
		return fleet_park(why);
	}
	if (strstr(task.payload, "\"op\":\"unique\"")) return unique_submit(&task);
	snprintf(why, sizeof why, "unknown op in %s", task.payload);
	return fleet_fail(why);
}
