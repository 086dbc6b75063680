/*
 * counter is plugins/examples/counter in C: a batch plugin that adds 1 to the fleet
 * counter "counter:done" per task of the queue "count". Its type is "counter-c", so that
 * it loads beside the Go counter; the queue's contract is the Go plugin's, byte for byte.
 */
#include "fleet.h"

FLEET_DESCRIBE(
	"{\"abi_version\":1,\"type\":\"counter-c\",\"version\":\"1.0.0\",\"mode\":\"batch\","
	"\"consumes\":{\"name\":\"count\",\"payload_schema\":{"
	"\"$schema\":\"https://json-schema.org/draft/2020-12/schema\","
	"\"properties\":{},\"additionalProperties\":false,\"type\":\"object\"}}}")

FLEET_EXPORT("fleet_handle") uint64_t fleet_handle(uint32_t len) {
	fleet_task task;
	if (fleet_read_task(len, &task) != FLEET_OK) {
		return fleet_fail(fleet_error_message());
	}
	if (fleet_counter_incr("counter:done", 1, NULL) != FLEET_OK) {
		return fleet_fail(fleet_error_message());
	}
	return fleet_done();
}
