// counter.ts is plugins/examples/counter over Extism: it adds 1 to the fleet counter
// "as-counter:done" per task of the queue "as-count". The transports benchmark runs it
// beside the Go and C counters.
import { Host } from "@extism/as-pdk";
import { counterIncr, done, fail, lastError, output } from "../../guest-sdk/assemblyscript/index";

export function fleet_describe(): i32 {
  return output('{"abi_version":1,"type":"as-counter","version":"1.0.0","mode":"batch",' +
    '"consumes":{"name":"as-count","payload_schema":{"type":"object"}}}');
}

export function fleet_handle(): i32 {
  Host.input();
  if (counterIncr("as-counter:done", 1) === null) {
    return fail("counter_incr: " + lastError);
  }
  return done();
}
