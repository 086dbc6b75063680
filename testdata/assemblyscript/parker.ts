// parker.ts is the AssemblyScript side of the SDKs' park, unique and hand-back test
// (tests/sdkpark_test.go; tests/testdata/cpark/cpark.c is the C side, and behaves the
// same). Per task of the queue "sdk-park" ({"op":S[,"n":N]}) it
//
//   - "park": parks the task with the reason "asked to park";
//   - "wait": retries until the task was handed back n times (its handBacks), then parks
//     it with the reason "handed back N times";
//   - "unique": submits {} to the Go counter's queue "count" under the unique key
//     "sdk-park:once" (a minute), keeps the task id it answered in KV "park-as:ids" under
//     the task's id, and checks that a unique TTL over a day answers a ValueError.
//
// Anything unexpected fails the task with a reason that says what.
import { done, fail, field, kvSet, lastError, output, park, readTask, retry, SubmitOptions, submitTask, Task } from "../../guest-sdk/assemblyscript/index";

export function fleet_describe(): i32 {
  return output('{"abi_version":1,"type":"park-as","version":"1.0.0","mode":"batch",' +
    '"consumes":{"name":"sdk-park","payload_schema":{"type":"object",' +
    '"properties":{"op":{"enum":["park","wait","unique"]},"n":{"type":"integer"}},"required":["op"]}},' +
    '"submits":[{"name":"count","payload_schema":{"$schema":"https://json-schema.org/draft/2020-12/schema",' +
    '"properties":{},"additionalProperties":false,"type":"object"}}]}');
}

export function fleet_handle(): i32 {
  const task = readTask();
  const op = field(task.payload, "op");
  if (op == '"park"') {
    return park("asked to park");
  }
  if (op == '"wait"') {
    const n = field(task.payload, "n");
    if (task.handBacks < (n === null ? 0 : I64.parseInt(n))) {
      return retry(1);
    }
    return park("handed back " + task.handBacks.toString() + " times");
  }
  if (op == '"unique"') {
    return uniqueSubmit(task);
  }
  return fail("unknown op in " + task.payload);
}

function uniqueSubmit(task: Task): i32 {
  const once = new SubmitOptions();
  once.unique = "sdk-park:once";
  once.uniqueTtlMs = 60000;
  const got = submitTask("count", "{}", once);
  if (got === null) {
    return fail("submit: " + lastError);
  }
  if (kvSet("park-as:ids", task.id, field(got, "task_id")!) === null) {
    return fail("kv_set: " + lastError);
  }
  const tooLong = new SubmitOptions();
  tooLong.unique = "sdk-park:once";
  tooLong.uniqueTtlMs = 86400001;
  if (submitTask("count", "{}", tooLong) !== null) {
    return fail("a unique TTL over a day was accepted");
  }
  const kind = field(field(lastError, "error")!, "kind");
  if (kind != '"ValueError"') {
    return fail("a unique TTL over a day answered " + lastError + ", want a ValueError");
  }
  return done();
}
