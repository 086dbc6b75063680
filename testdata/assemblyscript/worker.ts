// worker.ts consumes the queue "as-jobs" ({"n": int}): per task it claims an item of
// the pool "as-pool", penalises it by 2 and credits it by 1 (a net 1 on its score), and
// releases it, records n in KV and reads it back, adds 1 to the
// counter "as-worker:done" and submits a task to the Go counter's queue "count".
import { counterIncr, done, fail, field, kvGet, kvSet, lastError, output, poolClaim, poolMarkBad, poolMarkGood, poolRelease, readTask, retry, submitTask, unquote } from "../../guest-sdk/assemblyscript/index";

export function fleet_describe(): i32 {
  return output('{"abi_version":1,"type":"as-worker","version":"1.0.0","mode":"batch",' +
    '"consumes":{"name":"as-jobs","payload_schema":{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}},' +
    '"pools":[{"name":"as-pool","payload_schema":{"type":"object"},"tags_schema":{"type":"object"}}],' +
    '"submits":[{"name":"count","payload_schema":{"$schema":"https://json-schema.org/draft/2020-12/schema",' +
    '"properties":{},"additionalProperties":false,"type":"object"}}]}');
}

export function fleet_handle(): i32 {
  const task = readTask();
  const id = task.id;
  const n = field(task.payload, "n")!;

  const claim = poolClaim("as-pool", 30000);
  if (claim === null) {
    return fail("pool_claim: " + lastError);
  }
  if (field(claim, "found") != "true") {
    return retry(10); // as-pool is empty
  }
  const item = unquote(field(field(claim, "item")!, "id")!);
  if (poolMarkBad("as-pool", item, "as-worker", 2) === null) {
    return fail("pool_mark_bad: " + lastError);
  }
  if (poolMarkGood("as-pool", item, 1) === null) {
    return fail("pool_mark_good: " + lastError);
  }
  if (poolRelease("as-pool", item, unquote(field(claim, "token")!)) === null) {
    return fail("pool_release: " + lastError);
  }

  if (kvSet("as-worker:seen", id, n) === null) {
    return fail("kv_set: " + lastError);
  }
  const got = kvGet("as-worker:seen", id);
  if (got === null) {
    return fail("kv_get: " + lastError);
  }
  if (field(got, "value") != n) {
    return fail("kv_get read " + got + ", want the value " + n);
  }
  if (counterIncr("as-worker:done", 1) === null) {
    return fail("counter_incr: " + lastError);
  }
  if (submitTask("count", "{}") === null) {
    return fail("submit: " + lastError);
  }
  return done();
}
