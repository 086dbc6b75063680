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

export function kvSet(ns: string, key: string, value: string): string | null {
  return ok(reply(kv_set(block('{"namespace":' + quote(ns) + ',"key":' + quote(key) + ',"value":' + value + "}"))));
}

export function kvGet(ns: string, key: string): string | null {
  return ok(reply(kv_get(block('{"namespace":' + quote(ns) + ',"key":' + quote(key) + "}"))));
}

export function counterIncr(name: string, delta: i64): string | null {
  return ok(reply(counter_incr(block('{"name":' + quote(name) + ',"delta":' + delta.toString() + "}"))));
}

export function submitTask(queue: string, payload: string): string | null {
  return ok(reply(submit(block('{"queue":' + quote(queue) + ',"payload":' + payload + "}"))));
}

export function output(s: string): i32 {
  Host.output(Uint8Array.wrap(String.UTF8.encode(s)));
  return 0;
}

export function done(): i32 {
  return output('{"outcome":"done"}');
}

export function fail(reason: string): i32 {
  return output('{"outcome":"fail","reason":' + quote(reason) + "}");
}

// field returns the JSON text of the member name of the object in json (searched at any
// depth, first match), or null. Enough for the host's replies and the tasks here.
export function field(json: string, name: string): string | null {
  const at = json.indexOf(quote(name) + ":");
  if (at < 0) {
    return null;
  }
  const start = at + name.length + 3;
  let depth = 0;
  let inString = false;
  for (let i = start; i < json.length; i++) {
    const c = json.charAt(i);
    if (inString) {
      if (c == "\\") {
        i++;
      } else if (c == '"') {
        inString = false;
        if (depth == 0) {
          return json.substring(start, i + 1);
        }
      }
      continue;
    }
    if (c == '"') {
      inString = true;
    } else if (c == "{" || c == "[") {
      depth++;
    } else if (c == "}" || c == "]") {
      if (depth == 0) {
        return json.substring(start, i);
      }
      depth--;
      if (depth == 0) {
        return json.substring(start, i + 1);
      }
    } else if (c == "," && depth == 0) {
      return json.substring(start, i);
    }
  }
  return null;
}

// unquote is the text of a JSON string without escapes.
export function unquote(s: string): string {
  return s.length >= 2 && s.charAt(0) == '"' ? s.substring(1, s.length - 1) : s;
}
