/*
 * ticker is a loop plugin in C: each tick adds 1 to the counter "ticker:ticks" and keeps
 * the slot's iteration in KV "ticker:state" under the slot's own key, then asks for the
 * next tick after 1 ms (retry_after_ms paces a loop).
 */
#include "fleet.h"

#include <stdio.h>

FLEET_DESCRIBE("{\"abi_version\":1,\"type\":\"ticker\",\"version\":\"0.1.0\",\"mode\":\"loop\"}")

FLEET_EXPORT("fleet_tick") uint64_t fleet_tick(uint32_t len) {
	int64_t iteration, ticks;
	if (fleet_read_tick(len, &iteration) != FLEET_OK) return fleet_fail(fleet_error_message());
	if (fleet_counter_incr("ticker:ticks", 1, &ticks) != FLEET_OK) return fleet_fail(fleet_error_message());
	char value[32];
	snprintf(value, sizeof value, "%lld", (long long)iteration);
	if (fleet_kv_set("ticker:state", "iteration", value, 0) != FLEET_OK) return fleet_fail(fleet_error_message());
	return fleet_retry(1);
}
