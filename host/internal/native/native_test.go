package native

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/hostfn"
	"github.com/fleethost/fleet/host/internal/validate"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/primitives/memory"
)

// callsWAT is a guest whose fleet_handle makes {{N}} config_get calls, then returns done.
// Memory: 4096 the done result, 4300 the request `{}`, 16384 the reply buffer.
const callsWAT = `(module
  (import "fleet" "config_get" (func $config (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 4096) "{\"outcome\":\"done\"}")
  (data (i32.const 4300) "{}")
  (func (export "fleet_abi_version") (result i32) (i32.const 1))
  (func (export "fleet_input") (param i32) (result i32) (i32.const 8192))
  (func (export "fleet_describe") (result i64) (i64.const 0))
  (func (export "fleet_handle") (param i32) (result i64)
    (local $i i32)
    (block $out (loop $more
      (br_if $out (i32.ge_u (local.get $i) (i32.const %d)))
      (drop (call $config (i32.const 4300) (i32.const 2) (i32.const 16384) (i32.const 256)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $more)))
    (i64.const %d))
)`

func newInstance(tb testing.TB, calls int) *Instance {
	tb.Helper()
	return instantiate(tb, testutil.WAT(tb, fmt.Sprintf(callsWAT, calls, abi.Packed(4096, 18))), 16)
}

// instantiate makes an instance of the wasm file at path, under a memory limit of
// limitPages, on a memory backend.
func instantiate(tb testing.TB, path string, limitPages uint32) *Instance {
	tb.Helper()
	wasm, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return newTestInstance(tb, wasm, Params{MemoryLimitPages: limitPages})
}

// newTestInstance instantiates wasm in a runtime of its own over a memory backend, with
// p's fields filled where zero.
func newTestInstance(tb testing.TB, wasm []byte, p Params) *Instance {
	tb.Helper()
	b := memory.New(memory.Options{})
	tb.Cleanup(func() { b.Close() })
	return newTestInstanceOn(tb, wasm, p, b, hostfn.Access{})
}

// newTestInstanceOn is newTestInstance over backend b, for a plugin granted g.
func newTestInstanceOn(tb testing.TB, wasm []byte, p Params, b primitives.Backend, g hostfn.Access) *Instance {
	tb.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	core := hostfn.NewCore(b, validate.NewRegistry(nil), nil, log)
	ctx := context.Background()
	p.MemoryLimitPages = cmp.Or(p.MemoryLimitPages, 16)
	p.Core, p.Log = core, log
	rt, err := NewRuntime(ctx, p, wasm)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { rt.Close(ctx) })
	plugin := hostfn.NewGrantee("bench", g, json.RawMessage(`{"k":"v"}`), hostfn.Limits{MaxPayload: 1024, MaxHostCalls: hostfn.DefaultMaxHostCalls, MaxReply: hostfn.DefaultMaxReply, MaxPoolList: hostfn.DefaultMaxPoolList}, nil)
	in, err := rt.Instantiate(ctx, "bench/0", &hostfn.Caller{Plugin: plugin, Slot: "bench/0"}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return in
}

func TestHandleWithHostCalls(t *testing.T) {
	in := newInstance(t, 3)
	out, err := in.Handle(context.Background(), []byte(`{"task":{}}`))
	if err != nil || string(out) != `{"outcome":"done"}` {
		t.Fatalf("Handle = %s, %v", out, err)
	}
	if !strings.Contains(string(in.caller.Plugin.Config), "k") {
		t.Fatal("the caller is not the instance's")
	}
}

// BenchmarkHandle is one fleet_handle call with nothing in it: fleet_input, writing the
// input, the export call, reading the result.
func BenchmarkHandle(b *testing.B) {
	in := newInstance(b, 0)
	input := []byte(`{"task":{"id":"t","payload":{},"attempts":1,"enqueued_at_ms":1},"iteration":1}`)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := in.Handle(ctx, input); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHandleDeadline is BenchmarkHandle as a slot calls it, each call under a
// context of its own with a deadline, so that arming the stop flag is in it.
func BenchmarkHandleDeadline(b *testing.B) {
	in := newInstance(b, 0)
	input := []byte(`{"task":{"id":"t","payload":{},"attempts":1,"enqueued_at_ms":1},"iteration":1}`)
	hard := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		ctx, cancel := context.WithTimeout(hard, time.Minute)
		_, err := in.Handle(ctx, input)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHostCall is one guest->host call through the native ABI (config_get: the
// core's cheapest op, no backend): the fleet_handle of 1000 calls, reported per call.
func BenchmarkHostCall(b *testing.B) {
	const calls = 1000
	in := newInstance(b, calls)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := in.Handle(ctx, []byte(`{}`)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*calls), "ns/hostcall")
}

// A module that its exports refuse is refused before the compile: this one, a command
// (it exports _start and no _initialize) whose one function would fail wazero's
// validation (it leaves an i32 on the stack of a function that returns nothing), is
// refused as a command, the compile never reached. A module of megabytes that is no
// fleet guest so costs no compile.
func TestRefusedByExportsBeforeCompile(t *testing.T) {
	wasm := []byte{
		0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version
		0x01, 0x04, 0x01, 0x60, 0x00, 0x00, // types: () -> ()
		0x03, 0x02, 0x01, 0x00, // functions: one of type 0
		0x07, 0x0a, 0x01, 0x06, '_', 's', 't', 'a', 'r', 't', 0x00, 0x00, // exports: _start, func 0
		0x0a, 0x06, 0x01, 0x04, 0x00, 0x41, 0x00, 0x0b, // code: i32.const 0, end
	}
	names, ok := FuncExports(wasm)
	if !ok || len(names) != 1 || !names["_start"] {
		t.Fatalf("FuncExports = %v, %v; want _start", names, ok)
	}
	_, err := NewRuntime(context.Background(), Params{Log: slog.New(slog.DiscardHandler)}, wasm)
	if err == nil || !strings.Contains(err.Error(), "built as a command") {
		t.Fatalf("NewRuntime = %v, want the refusal of a command, before the compile", err)
	}
	if _, ok := FuncExports([]byte("\x00asm\x01\x00\x00\x00\x07\xff")); ok {
		t.Fatal("FuncExports of a cut section = ok, want not readable")
	}
}
