/*
 * cwire exercises the C SDK's reading of what the host writes beyond plain ASCII: per
 * task of the queue "cwire" ({"url":S}) its first attempt fails with a reason full of
 * what JSON escapes (quotes, a backslash, a tab, the <>& that Go's encoder writes as
 * \u003c..., UTF-8), and its second attempt checks that task.last_error reads back as
 * that reason; then it POSTs the 256 byte values to the url (a server that echoes the
 * body) and checks that the response body decodes from base64 to the same bytes. It adds
 * 1 to "cwire:ok" per task that passed.
 */
#include "fleet.h"

#include <stdio.h>
#include <string.h>

FLEET_DESCRIBE(
	"{\"abi_version\":1,\"type\":\"cwire\",\"mode\":\"batch\",\"consumes\":{\"name\":\"cwire\","
	"\"payload_schema\":{\"type\":\"object\",\"properties\":{\"url\":{\"type\":\"string\"}},\"required\":[\"url\"]}}}")

static const char reason[] = "quote \" backslash \\ tab \t html <b>&amp; \xc3\xa9 \xf0\x9f\x98\x80";

static char why[700];

FLEET_EXPORT("fleet_handle") uint64_t fleet_handle(uint32_t len) {
	fleet_task task;
	if (fleet_read_task(len, &task)) return fleet_fail(fleet_error_message());
	if (task.attempts == 1) return fleet_fail(reason);
	if (!task.last_error || !strstr(task.last_error, reason)) {
		snprintf(why, sizeof why, "last_error reads %s", task.last_error ? task.last_error : "(none)");
		fleet_log("error", why, NULL);
		return fleet_retry(0); /* not a fail: its reason would become the next last_error */
	}
	char url[256];
	const char *p = strstr(task.payload, "\"url\":\"");
	const char *end = p ? strchr(p + 7, '"') : NULL;
	if (!end || end - (p + 7) >= (long)sizeof url) return fleet_fail("no url");
	memcpy(url, p + 7, (size_t)(end - (p + 7)));
	url[end - (p + 7)] = 0;

	unsigned char bytes[256];
	for (int i = 0; i < 256; i++) bytes[i] = (unsigned char)i;
	fleet_http_request req = {.method = "POST", .url = url, .body = bytes, .body_len = sizeof bytes};
	fleet_http_response resp;
	fleet_kind k = fleet_http(&req, &resp);
	if (k) return fleet_fail(fleet_error_message());
	if (resp.status != 200 || resp.body_len != sizeof bytes || memcmp(resp.body, bytes, sizeof bytes)) {
		snprintf(why, sizeof why, "http: status %d, %zu bytes back", resp.status, resp.body_len);
		fleet_log("error", why, NULL);
		return fleet_retry(0);
	}
	if (fleet_counter_incr("cwire:ok", 1, NULL)) return fleet_fail(fleet_error_message());
	return fleet_done();
}
