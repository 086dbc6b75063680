// fleet.ts is the AssemblyScript side of fleet's Extism transport (abi/EXTISM.md): each
// fleet operation is a host function of extism:host/user that takes the request JSON in
// an Extism memory block and returns the reply envelope, {"ok":...} or {"error":...}, in
// another. The plugins here build their JSON by hand: AssemblyScript has no JSON in its
// standard library, and the tests need no more than a few fields.
import { Host, Memory } from "@extism/as-pdk";
import { error_set, length } from "@extism/as-pdk/lib/env";

@external("extism:host/user", "pool_claim")
declare function pool_claim(req: u64): u64;
@external("extism:host/user", "pool_release")
declare function pool_release(req: u64): u64;
@external("extism:host/user", "pool_mark_bad")
declare function pool_mark_bad(req: u64): u64;
@external("extism:host/user", "pool_mark_good")
declare function pool_mark_good(req: u64): u64;
@external("extism:host/user", "kv_set")
declare function kv_set(req: u64): u64;
@external("extism:host/user", "kv_get")
declare function kv_get(req: u64): u64;
@external("extism:host/user", "counter_incr")
declare function counter_incr(req: u64): u64;
@external("extism:host/user", "submit")
declare function submit(req: u64): u64;

// myAbort is the module's abort (asc --use abort=fleet/myAbort): it tells the host why
// through Extism's error, and the call ends at the trap that follows it.
export function myAbort(message: string | null, fileName: string | null, line: u32, column: u32): void {
  const m = Memory.allocateString("abort: " + (message === null ? "" : message) + " at " +
    (fileName === null ? "" : fileName) + ":" + line.toString() + ":" + column.toString());
  error_set(m.offset);
}

// block is a new block holding s. Memory.store writes it 8 bytes a kernel call, where
// the PDK's Memory.allocateString makes one call a byte.
function block(s: string): u64 {
  const bytes = Uint8Array.wrap(String.UTF8.encode(s));
  const m = Memory.allocate(bytes.length);
  m.store(bytes);
  return m.offset;
}

// reply reads the envelope in the block at offset; 0 (no block: the host could not
// allocate one) is Unavailable.
function reply(offset: u64): string {
  if (offset == 0) {
    return '{"error":{"kind":"Unavailable","message":"no reply block"}}';
  }
  return new Memory(offset, length(offset)).toString();
}

// ok is the envelope's result, or null when it is an error (the envelope is kept in
// lastError).
export let lastError: string = "";

// lastKind is the kind of lastError ("RateLimited", ...); lastWaitMs, after a
// RateLimited error, how long until the request could be admitted (0 otherwise).
export function lastKind(): string {
  const e = field(lastError, "error");
  if (e === null) return "";
  const k = field(e!, "kind");
  return k === null ? "" : unquote(k!);
}

export function lastWaitMs(): i64 {
  const e = field(lastError, "error");
  if (e === null) return 0;
  const w = field(e!, "wait_ms");
  return w === null ? 0 : I64.parseInt(w!);
}

function ok(envelope: string): string | null {
  const v = field(envelope, "ok");
  if (v === null) {
    lastError = envelope;
  }
  return v;
}

export function quote(s: string): string {
  return '"' + s.replaceAll("\\", "\\\\").replaceAll('"', '\\"') + '"';
}

export function poolClaim(pool: string, holdMs: i64): string | null {
  return ok(reply(pool_claim(block('{"pool":' + quote(pool) + ',"hold_ms":' + holdMs.toString() + "}"))));
}

export function poolRelease(pool: string, id: string, token: string): string | null {
  return ok(reply(pool_release(block('{"pool":' + quote(pool) + ',"id":' + quote(id) + ',"token":' + quote(token) + "}"))));
}

// poolMarkBad evicts the item (weight 0), or adds weight to its score, which retires it
// only past its max_error_score.
export function poolMarkBad(pool: string, id: string, reason: string, weight: i64 = 0): string | null {
  let req = '{"pool":' + quote(pool) + ',"id":' + quote(id) + ',"reason":' + quote(reason);
  if (weight != 0) {
    req += ',"weight":' + weight.toString();
  }
  return ok(reply(pool_mark_bad(block(req + "}"))));
}

// poolMarkGood lowers the item's score by weight (0: 1), never below 0.
export function poolMarkGood(pool: string, id: string, weight: i64 = 0): string | null {
  let req = '{"pool":' + quote(pool) + ',"id":' + quote(id);
  if (weight != 0) {
    req += ',"weight":' + weight.toString();
  }
  return ok(reply(pool_mark_good(block(req + "}"))));
}

export function kvSet(ns: string, key: string, value: string): string | null {
  return ok(reply(kv_set(block('{"namespace":' + quote(ns) + ',"key":' + quote(key) + ',"value":' + value + "}"))));
}

export function kvGet(ns: string, key: string): string | null {
  return ok(reply(kv_get(block('{"namespace":' + quote(ns) + ',"key":' + quote(key) + "}"))));
}

export function counterIncr(name: string, delta: i64): string | null {
  return ok(reply(counter_incr(block('{"name":' + quote(name) + ',"delta":' + delta.toString() + "}"))));
}

// SubmitOptions are what submitTask asks of the host beyond the payload (abi/EXTISM.md,
// "The helpers of fleet.ts").
export class SubmitOptions {
  // key ("": none) makes the submit idempotent: the host enqueues once per key on the
  // queue for 10 minutes and answers a repeat with the first task's id.
  key: string = "";
  // unique ("": none; 1..255 bytes) makes the task unique on its queue: while the task a
  // submit of the key enqueued waits or runs, or for uniqueTtlMs after it was submitted
  // (whichever ends last), a submit of the key enqueues nothing and answers that task's id.
  unique: string = "";
  uniqueTtlMs: i64 = 0; // 0..86400000 (a day)
}

export function submitTask(queue: string, payload: string, opts: SubmitOptions | null = null): string | null {
  let req = '{"queue":' + quote(queue) + ',"payload":' + payload;
  if (opts !== null) {
    if (opts.key != "") {
      req += ',"key":' + quote(opts.key);
    }
    if (opts.unique != "") {
      req += ',"unique":' + quote(opts.unique);
    }
    if (opts.uniqueTtlMs != 0) {
      req += ',"unique_ttl_ms":' + opts.uniqueTtlMs.toString();
    }
  }
  return ok(reply(submit(block(req + "}"))));
}

// Task is the task of fleet_handle's input (abi/REFERENCE.md, "Inputs").
export class Task {
  id: string = "";
  payload: string = "{}"; // JSON text
  attempts: i64 = 0; // the attempts spent, counting this one: 1 on the first
  // handBacks is how often the task was handed back without spending an attempt (a
  // retry, a drain's cut): a plugin that retries while it waits for something parks the
  // task once it has waited too often.
  handBacks: i64 = 0;
}

// readTask reads fleet_handle's input.
export function readTask(): Task {
  const t = new Task();
  const task = field(Host.inputString(), "task");
  if (task === null) {
    return t;
  }
  const id = field(task, "id");
  const payload = field(task, "payload");
  const attempts = field(task, "attempts");
  const handBacks = field(task, "hand_backs");
  if (id !== null) {
    t.id = unquote(id);
  }
  if (payload !== null) {
    t.payload = payload;
  }
  if (attempts !== null) {
    t.attempts = I64.parseInt(attempts);
  }
  if (handBacks !== null) {
    t.handBacks = I64.parseInt(handBacks);
  }
  return t;
}

export function output(s: string): i32 {
  Host.output(Uint8Array.wrap(String.UTF8.encode(s)));
  return 0;
}

export function done(): i32 {
  return output('{"outcome":"done"}');
}

// retry hands the task back to its queue after afterMs (0: the host's retry delay),
// without spending an attempt.
export function retry(afterMs: i64): i32 {
  return output(afterMs == 0 ? '{"outcome":"retry"}' : '{"outcome":"retry","retry_after_ms":' + afterMs.toString() + "}");
}

// fail reports a failed attempt: the task is handed back after a backoff that grows with
// its attempts, or parked once its attempts are spent.
export function fail(reason: string): i32 {
  return output('{"outcome":"fail","reason":' + quote(reason) + "}");
}

// park reports that the task cannot succeed, whatever attempts it has left: the host
// parks it now for the operator with reason. A loop plugin's tick has no task: there it
// is fail.
export function park(reason: string): i32 {
  return output('{"outcome":"park","reason":' + quote(reason) + "}");
}

// field returns the JSON text of the member name of the object json (a member of the
// object itself, not of one nested in it), or null. Keys are compared as they are
// written: enough for the host's replies and inputs, whose keys have no escapes.
export function field(json: string, name: string): string | null {
  let i = space(json, 0);
  if (i >= json.length || json.charCodeAt(i) != 0x7b) { // {
    return null;
  }
  i++;
  while (i < json.length) {
    i = space(json, i);
    if (i >= json.length || json.charCodeAt(i) != 0x22) { // "
      return null;
    }
    const keyEnd = valueEnd(json, i);
    const key = json.substring(i + 1, keyEnd - 1);
    i = space(json, keyEnd);
    if (i >= json.length || json.charCodeAt(i) != 0x3a) { // :
      return null;
    }
    const start = space(json, i + 1);
    const end = valueEnd(json, start);
    if (key == name) {
      return json.substring(start, end);
    }
    i = space(json, end);
    if (i >= json.length || json.charCodeAt(i) != 0x2c) { // ,
      return null;
    }
    i++;
  }
  return null;
}

// space is the index of the first byte at or after i in json that is not white space.
function space(json: string, i: i32): i32 {
  while (i < json.length) {
    const c = json.charCodeAt(i);
    if (c != 0x20 && c != 0x0a && c != 0x0d && c != 0x09) {
      break;
    }
    i++;
  }
  return i;
}

// valueEnd is the index just past the JSON value that starts at i in json.
function valueEnd(json: string, i: i32): i32 {
  let depth = 0;
  let inString = false;
  for (; i < json.length; i++) {
    const c = json.charCodeAt(i);
    if (inString) {
      if (c == 0x5c) { // a backslash: the next byte is escaped
        i++;
      } else if (c == 0x22) {
        inString = false;
        if (depth == 0) {
          return i + 1;
        }
      }
      continue;
    }
    if (c == 0x22) {
      inString = true;
    } else if (c == 0x7b || c == 0x5b) { // { [
      depth++;
    } else if (c == 0x7d || c == 0x5d) { // } ]
      if (depth == 0) {
        return i;
      }
      depth--;
      if (depth == 0) {
        return i + 1;
      }
    } else if (depth == 0 && (c == 0x2c || c == 0x20 || c == 0x0a || c == 0x0d || c == 0x09)) { // , or space
      return i;
    }
  }
  return i;
}

// unquote is the text of a JSON string without escapes.
export function unquote(s: string): string {
  return s.length >= 2 && s.charAt(0) == '"' ? s.substring(1, s.length - 1) : s;
}
