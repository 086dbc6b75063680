// fleet-sdk is the AssemblyScript side of fleet-host's Extism transport (abi/EXTISM.md in
// the fleet-host repository): each fleet operation is a host function of extism:host/user
// that takes the request JSON in an Extism memory block and returns the reply envelope,
// {"ok":...} or {"error":...}, in another. AssemblyScript has no JSON in its standard
// library: requests are built as text and replies read with field(). Its home is
// guest-sdk/assemblyscript/index.ts; fleet-host new writes it into a project as
// fleet-sdk/index.ts, and the repository's Extism tests import it from there.
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
@external("extism:host/user", "http")
declare function http(req: u64): u64;

// myAbort is the module's abort (asc --use abort=~lib/fleet-sdk/index/myAbort in a
// project, abort=../../guest-sdk/assemblyscript/index/myAbort in the tests): it tells
// the host why through Extism's error, and the call ends at the trap that follows it.
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
// "The helpers of fleet-sdk").
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
// without spending an attempt; reason ("": none) is why, in the host's event and log.
export function retry(afterMs: i64, reason: string = ""): i32 {
  let out = '{"outcome":"retry"';
  if (afterMs != 0) {
    out += ',"retry_after_ms":' + afterMs.toString();
  }
  if (reason != "") {
    out += ',"reason":' + quote(reason);
  }
  return output(out + "}");
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

// HttpResponse is an answer of httpRequest: a response (status > 0), or a failure after
// the first host was allowed (status 0, error and errorCode set: timeout, dns, refused,
// redirect_denied, too_many_redirects, body_too_large, transport).
export class HttpResponse {
  status: i32 = 0;
  headers: string = "{}"; // JSON object of arrays: {"Content-Type":["text/html"]}
  body: string = ""; // the body's bytes as UTF-8 text
  finalUrl: string = "";
  error: string = "";
  errorCode: string = "";
}

// httpRequest sends one request through the host, which checks the URL (and every
// redirect hop) against the plugin's http_hosts grant. headers is a JSON object of arrays
// or ""; timeoutMs 0 is the grant's http_timeout. It returns null with the envelope in
// lastError when the host refused the request (PermissionDenied: a host not granted;
// RateLimited: the site's egress rate did not admit it in time, nothing sent: retry after
// lastWaitMs()).
export function httpRequest(method: string, url: string, headers: string = "", body: string = "", timeoutMs: i64 = 0): HttpResponse | null {
  let req = '{"method":' + quote(method) + ',"url":' + quote(url);
  if (headers != "") {
    req += ',"headers":' + headers;
  }
  if (body != "") {
    req += ',"body":' + quote(base64Encode(Uint8Array.wrap(String.UTF8.encode(body))));
  }
  if (timeoutMs != 0) {
    req += ',"timeout_ms":' + timeoutMs.toString();
  }
  const v = ok(reply(http(block(req + "}"))));
  if (v === null) {
    return null;
  }
  const r = new HttpResponse();
  const status = field(v, "status");
  if (status !== null) {
    r.status = I32.parseInt(status);
  }
  const h = field(v, "headers");
  if (h !== null) {
    r.headers = h;
  }
  const b = field(v, "body");
  if (b !== null) {
    r.body = String.UTF8.decode(base64Decode(unquote(b)).buffer);
  }
  const finalUrl = field(v, "final_url");
  if (finalUrl !== null) {
    r.finalUrl = unquote(finalUrl);
  }
  const e = field(v, "error");
  if (e !== null) {
    r.error = unquote(e);
  }
  const code = field(v, "error_code");
  if (code !== null) {
    r.errorCode = unquote(code);
  }
  return r;
}

const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// base64Encode is bytes in standard base64, with padding (what the host's JSON holds).
export function base64Encode(bytes: Uint8Array): string {
  let out = "";
  let i = 0;
  for (; i + 2 < bytes.length; i += 3) {
    const n = (<u32>bytes[i] << 16) | (<u32>bytes[i + 1] << 8) | <u32>bytes[i + 2];
    out += alphabet.charAt((n >> 18) & 63) + alphabet.charAt((n >> 12) & 63) + alphabet.charAt((n >> 6) & 63) + alphabet.charAt(n & 63);
  }
  const rest = bytes.length - i;
  if (rest == 1) {
    const n = <u32>bytes[i] << 16;
    out += alphabet.charAt((n >> 18) & 63) + alphabet.charAt((n >> 12) & 63) + "==";
  } else if (rest == 2) {
    const n = (<u32>bytes[i] << 16) | (<u32>bytes[i + 1] << 8);
    out += alphabet.charAt((n >> 18) & 63) + alphabet.charAt((n >> 12) & 63) + alphabet.charAt((n >> 6) & 63) + "=";
  }
  return out;
}

// base64Decode is the bytes of standard base64 text; padding and bytes outside the
// alphabet are skipped.
export function base64Decode(s: string): Uint8Array {
  const out = new Uint8Array((s.length * 3) / 4 + 3);
  let n: u32 = 0;
  let bits = 0;
  let o = 0;
  for (let i = 0; i < s.length; i++) {
    const v = alphabet.indexOf(s.charAt(i));
    if (v < 0) {
      continue;
    }
    n = (n << 6) | <u32>v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[o++] = <u8>((n >> bits) & 0xff);
    }
  }
  return out.subarray(0, o);
}
