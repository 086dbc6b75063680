package testutil

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/fleethost/fleet/abi"
)

// GuestWAT is a hand-written guest of the native ABI, put together from parts, with the
// memory layout of host/testdata's templates: the describe document at 0, the result at
// 4096, fleet_input's buffer at 8192. A loop plugin (Describe.Mode abi.ModeLoop) exports
// the same function as fleet_tick too.
//
//	path := testutil.WAT(t, testutil.GuestWAT{Describe: d, Result: `{"outcome":"done"}`,
//		Funcs: `(func $spin (loop $l (br $l)))`, Handle: `(call $spin)`}.Source(t))
type GuestWAT struct {
	Describe abi.Describe // what fleet_describe returns (at most 4 KiB of JSON)
	Result   string       // what fleet_handle returns, after Handle has run
	Imports  string       // import declarations, e.g. WASI's proc_exit as $proc_exit
	Funcs    string       // function definitions for Handle to call, and data segments
	Handle   string       // the instructions fleet_handle runs before it returns Result
}

// Source is the module's WebAssembly text.
func (g GuestWAT) Source(tb testing.TB) string {
	tb.Helper()
	doc, tick := guestParts(tb, g.Describe, g.Result)
	return fmt.Sprintf(`(module
  %s
  (memory (export "memory") 1)
  (data (i32.const 0) "%s")
  (data (i32.const 4096) "%s")
  (func (export "fleet_abi_version") (result i32) (i32.const %d))
  (func (export "fleet_input") (param i32) (result i32) (i32.const 8192))
  (func (export "fleet_describe") (result i64) (i64.const %d))
  %s
  (func (export "fleet_handle")%s (param i32) (result i64)
    %s
    (i64.const %d))
)`, g.Imports, watString(string(doc)), watString(g.Result), abi.Version, abi.Packed(0, uint32(len(doc))),
		g.Funcs, tick, g.Handle, abi.Packed(4096, uint32(len(g.Result))))
}

// ExtismGuestWAT is a hand-written guest of the Extism transport (abi/EXTISM.md), put
// together from parts as GuestWAT is: it imports Extism's kernel as a PDK does, keeps the
// describe document at 0 and the result at 4096 of its own memory, and moves bytes
// through kernel blocks with the helpers every instance of it has:
//
//	(call $block (i32.const ptr) (i32.const len)) -> i64  a new block holding [ptr, ptr+len)
//	(call $starts (i64 block) (i32.const ptr) (i32.const len)) -> i32  whether the block starts with those bytes
//	(call $output (i32.const ptr) (i32.const len))       sets the call's output to those bytes
//
// fleet_handle (and fleet_tick for a loop plugin) runs Handle and then outputs Result.
// Data that Handle uses goes at 8192 and above, in Funcs.
type ExtismGuestWAT struct {
	Describe abi.Describe // what fleet_describe outputs (at most 4 KiB of JSON)
	Result   string       // what fleet_handle outputs, after Handle has run
	Imports  string       // import declarations beyond the kernel's alloc, store_u8, load_u8, length, output_set and error_set
	Funcs    string       // function definitions and data segments for Handle
	Handle   string       // the instructions fleet_handle runs before it outputs Result and returns 0
}

// Source is the module's WebAssembly text.
func (g ExtismGuestWAT) Source(tb testing.TB) string {
	tb.Helper()
	doc, tick := guestParts(tb, g.Describe, g.Result)
	return fmt.Sprintf(`(module
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "store_u8" (func $store_u8 (param i64 i32)))
  (import "extism:host/env" "load_u8" (func $load_u8 (param i64) (result i32)))
  (import "extism:host/env" "length" (func $length (param i64) (result i64)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))
  (import "extism:host/env" "error_set" (func $error_set (param i64)))
  %s
  (memory (export "memory") 1)
  (data (i32.const 0) "%s")
  (data (i32.const 4096) "%s")
  (func $block (param $p i32) (param $n i32) (result i64) (local $b i64) (local $i i32)
    (local.set $b (call $alloc (i64.extend_i32_u (local.get $n))))
    (block $done (loop $more
      (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
      (call $store_u8 (i64.add (local.get $b) (i64.extend_i32_u (local.get $i)))
        (i32.load8_u (i32.add (local.get $p) (local.get $i))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $more)))
    (local.get $b))
  (func $starts (param $b i64) (param $p i32) (param $n i32) (result i32) (local $i i32)
    (if (i64.lt_u (call $length (local.get $b)) (i64.extend_i32_u (local.get $n))) (then (return (i32.const 0))))
    (block $done (loop $more
      (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
      (if (i32.ne (call $load_u8 (i64.add (local.get $b) (i64.extend_i32_u (local.get $i))))
          (i32.load8_u (i32.add (local.get $p) (local.get $i))))
        (then (return (i32.const 0))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $more)))
    (i32.const 1))
  (func $output (param $p i32) (param $n i32)
    (call $output_set (call $block (local.get $p) (local.get $n)) (i64.extend_i32_u (local.get $n))))
  (func (export "fleet_describe") (result i32) (call $output (i32.const 0) (i32.const %d)) (i32.const 0))
  %s
  (func (export "fleet_handle")%s (result i32)
    %s
    (call $output (i32.const 4096) (i32.const %d))
    (i32.const 0))
)`, g.Imports, watString(string(doc)), watString(g.Result), len(doc), g.Funcs, tick, g.Handle, len(g.Result))
}

// ExtismKernelScribble is WAT for the body of an Extism guest's export (ExtismGuestWAT's
// Handle, or any with the kernel's alloc, store_u8 and store_u64 imported as $alloc,
// $store_u8 and $store_u64) that writes where the Extism Go SDK's kernel kept a block's
// header, then runs then. It allocates a block $b, runs setup, and writes the 12 bytes
// before the block's data (that kernel's status, size and used) as an unused block whose
// size wraps the next header's address round to its own, which made every function of
// that kernel that looks a block up (length, free) loop for ever. The host's kernel
// keeps its bookkeeping out of the guest's reach, so to it they are plain writes.
func ExtismKernelScribble(setup, then string) string {
	return `(local $b i64)
    (local.set $b (call $alloc (i64.const 16)))
    ` + setup + `
    (call $store_u8 (i64.sub (local.get $b) (i64.const 12)) (i32.const 0))
    (call $store_u64 (i64.sub (local.get $b) (i64.const 8)) (i64.const 0xfffffff4))
    ` + then
}

// guestParts are what both kinds of WAT guest are made of: the describe document d as
// JSON, and the fleet_tick export of a loop plugin's handle function ("" for a batch
// plugin). It fails tb if the document or result is over the 4 KiB each has.
func guestParts(tb testing.TB, d abi.Describe, result string) (doc []byte, tick string) {
	tb.Helper()
	doc, err := json.Marshal(d)
	if err != nil {
		tb.Fatal(err)
	}
	if len(doc) > 4096 || len(result) > 4096 {
		tb.Fatalf("testutil: describe (%d bytes) or result (%d bytes) over 4 KiB", len(doc), len(result))
	}
	if d.Mode == abi.ModeLoop {
		tick = ` (export "fleet_tick")`
	}
	return doc, tick
}

// watString escapes s for a WAT string literal.
var watString = strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace
