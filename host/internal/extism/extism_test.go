package extism

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/hostfn"
	"github.com/fleethost/fleet/host/internal/slot"
	"github.com/fleethost/fleet/host/internal/validate"
	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives/memory"
)

// guestWAT is an Extism guest written against the kernel's functions, as a PDK is:
// $input copies the call's input into a new block, $out makes a block the output.
// fleet_describe outputs its input; fleet_handle is the test's (the second %s), with the
// imports it needs (the first).
const guestWAT = `(module
  (import "extism:host/env" "input_length" (func $input_length (result i64)))
  (import "extism:host/env" "input_load_u8" (func $input_load_u8 (param i64) (result i32)))
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "store_u8" (func $store_u8 (param i64 i32)))
  (import "extism:host/env" "length" (func $length (param i64) (result i64)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))
  (import "extism:host/env" "error_set" (func $error_set (param i64)))
  %s
  (memory (export "memory") 1)
  (func $input (result i64) (local $n i64) (local $b i64) (local $i i64)
    (local.set $n (call $input_length))
    (local.set $b (call $alloc (local.get $n)))
    (block $done (loop $more
      (br_if $done (i64.ge_u (local.get $i) (local.get $n)))
      (call $store_u8 (i64.add (local.get $b) (local.get $i)) (call $input_load_u8 (local.get $i)))
      (local.set $i (i64.add (local.get $i) (i64.const 1)))
      (br $more)))
    (local.get $b))
  (func $out (param $b i64) (call $output_set (local.get $b) (call $length (local.get $b))))
  (func (export "fleet_describe") (result i32) (call $out (call $input)) (i32.const 0))
  (func (export "fleet_handle") (result i32) %s)
)`

const kvImport = `(import "extism:host/user" "kv_get" (func $kv_get (param i64) (result i64)))`

// guest instantiates the guestWAT with imports and the handle body, under a memory
// limit of pages, for a plugin "t" granted the KV namespaces t:*, with configuration
// config, over a memory backend.
func guest(t *testing.T, imports, handle string, pages uint32, config string) *Instance {
	t.Helper()
	return newGuest(t, imports, handle, pages, config, nil)
}

// guestOut is guest with its log to out, under 16 pages and no configuration.
func guestOut(t *testing.T, imports, handle string, out io.Writer) *Instance {
	t.Helper()
	return newGuest(t, imports, handle, 16, "", out)
}

func newGuest(t *testing.T, imports, handle string, pages uint32, config string, out io.Writer) *Instance {
	t.Helper()
	wasm, err := os.ReadFile(testutil.WAT(t, fmt.Sprintf(guestWAT, imports, handle)))
	if err != nil {
		t.Fatal(err)
	}
	b := memory.New(memory.Options{})
	t.Cleanup(func() { b.Close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	rt, err := NewRuntime(ctx, Params{
		MemoryLimitPages: pages, Core: hostfn.NewCore(b, validate.NewRegistry(nil), nil, log), Log: log,
		Config: json.RawMessage(config),
	}, wasm)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close(ctx) })
	plugin := hostfn.NewGrantee("t", hostfn.Access{KV: hostfn.Patterns{"t:*"}}, json.RawMessage(config), hostfn.Limits{
		MaxPayload: 1024, MaxHostCalls: hostfn.DefaultMaxHostCalls, MaxReply: hostfn.DefaultMaxReply, MaxPoolList: hostfn.DefaultMaxPoolList,
	}, nil)
	in, err := rt.Instantiate(ctx, "t/0", &hostfn.Caller{Plugin: plugin, Slot: "t/0"}, out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(ctx) })
	return in
}

func handle(t *testing.T, in *Instance, input string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := in.Handle(ctx, []byte(input))
	return string(out), err
}

// TestErrorsAreValues: every failure of a fleet host call is an envelope the guest
// reads, never a trap: a request outside the grant, malformed JSON, no block at all, an
// offset that is not a block; and a granted call is served.
func TestErrorsAreValues(t *testing.T) {
	for _, tt := range []struct {
		name, handle, input, want string
	}{
		{"granted", `(call $out (call $kv_get (call $input))) (i32.const 0)`, `{"namespace":"t:a","key":"k"}`, `{"ok":{"found":false}}`},
		{"denied", `(call $out (call $kv_get (call $input))) (i32.const 0)`, `{"namespace":"other:a","key":"k"}`, `"kind":"PermissionDenied"`},
		{"malformed", `(call $out (call $kv_get (call $input))) (i32.const 0)`, `{"namespace":`, `"kind":"ValueError"`},
		{"unknown field", `(call $out (call $kv_get (call $input))) (i32.const 0)`, `{"namespace":"t:a","key":"k","x":1}`, `"kind":"TypeError"`},
		{"no block", `(call $out (call $kv_get (i64.const 0))) (i32.const 0)`, ``, `"kind":"ValueError"`},
		{"not a block", `(call $out (call $kv_get (i64.const 99999999))) (i32.const 0)`, ``, `"kind":"ValueError"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := guest(t, kvImport, tt.handle, 16, "")
			out, err := handle(t, in, tt.input)
			if err != nil || !strings.Contains(out, tt.want) {
				t.Fatalf("Handle = %s, %v; want a reply containing %s", out, err, tt.want)
			}
		})
	}
}

// TestExtismOff: Extism's own HTTP (no allowed_hosts) and vars are off; a call of either
// kills the instance (the SDK traps), and var_get finds nothing.
func TestExtismOff(t *testing.T) {
	for _, tt := range []struct {
		name, imports, handle, input, want string
	}{
		{"http_request", `(import "extism:host/env" "http_request" (func $http (param i64 i64) (result i64)))`,
			`(drop (call $http (call $input) (i64.const 0))) (i32.const 0)`, `{"url":"http://127.0.0.1:1/"}`, "is not allowed"},
		{"var_set", `(import "extism:host/env" "var_set" (func $var_set (param i64 i64)))`,
			`(call $var_set (call $input) (call $input)) (i32.const 0)`, `v`, "Vars are disabled"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := guest(t, tt.imports, tt.handle, 16, "")
			_, err := handle(t, in, tt.input)
			var died *slot.Died
			if !errors.As(err, &died) || died.Death != slotstate.DeathTrap || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Handle = %v, want a trap saying %q", err, tt.want)
			}
		})
	}
	in := guest(t, `(import "extism:host/env" "var_get" (func $var_get (param i64) (result i64)))`,
		`(call $out (call $var_get (call $input))) (i32.const 0)`, 16, "")
	if out, err := handle(t, in, "v"); err != nil || out != "" {
		t.Fatalf("var_get = %q, %v; want nothing", out, err)
	}
}

// TestConfig: Extism's config_get reads the automation's configuration: a top-level
// string member as its text, any other value as its JSON; a missing key is nothing.
func TestConfig(t *testing.T) {
	in := guest(t, `(import "extism:host/env" "config_get" (func $config_get (param i64) (result i64)))`,
		`(call $out (call $config_get (call $input))) (i32.const 0)`, 16, `{"greeting":"hi","limits":{"n":2}}`)
	for key, want := range map[string]string{"greeting": "hi", "limits": `{"n":2}`, "missing": ""} {
		if out, err := handle(t, in, key); err != nil || out != want {
			t.Errorf("config_get(%q) = %q, %v; want %q", key, out, err, want)
		}
	}
}

// TestGuestError: a call the guest fails the Extism way (error_set, a non-zero return)
// fails the task with its message; the instance lives on.
func TestGuestError(t *testing.T) {
	in := guest(t, "", `(call $error_set (call $input)) (i32.const 1)`, 16, "")
	for range 2 {
		out, err := handle(t, in, "no such thing")
		r, derr := abi.DecodeHandleResult([]byte(out))
		if err != nil || derr != nil || r.Outcome != abi.OutcomeFail || !strings.Contains(r.Reason, "no such thing") {
			t.Fatalf("Handle = %s, %v (%v); want a fail with the guest's message", out, err, derr)
		}
	}
}

// TestMemoryLimit: the guest's memory stops at the runtime's limit (memory.grow answers
// -1, fleet_handle returns 0) and grows below it (returns 2, a fail).
func TestMemoryLimit(t *testing.T) {
	body := `(i32.add (memory.grow (i32.const 100)) (i32.const 1))`
	if out, err := handle(t, guest(t, "", body, 16, ""), ""); err != nil || out != "" {
		t.Fatalf("grow past a 16-page limit: Handle = %q, %v; want rc 0 (refused), nothing output", out, err)
	}
	out, err := handle(t, guest(t, "", body, 256, ""), "")
	if err != nil || !strings.Contains(out, "fleet_handle returned 2") {
		t.Fatalf("grow under a 256-page limit: Handle = %q, %v; want rc 2 (grown)", out, err)
	}
}

// TestDeadline: a guest that spins is cut at its call's deadline (the runtime closes on
// the context), and the instance is dead.
func TestDeadline(t *testing.T) {
	in := guest(t, "", `(loop $l (br $l)) (i32.const 0)`, 16, "")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := in.Handle(ctx, nil)
	var died *slot.Died
	if !errors.As(err, &died) || ctx.Err() == nil {
		t.Fatalf("Handle = %v with ctx %v; want a death at the deadline", err, ctx.Err())
	}
	if _, err := in.Handle(context.Background(), nil); err == nil {
		t.Fatal("the instance answered after its deadline closed it")
	}
}

// TestKernelFull: with the kernel's memory at its limit, a host call's reply cannot be
// allocated and is offset 0, which the guest reads as Unavailable: no trap, no write
// outside a block. The guest fills the kernel with 4 KiB blocks, then 1-byte ones,
// until alloc gives 0, then calls kv_get, and returns 7 when the reply is 0.
func TestKernelFull(t *testing.T) {
	in := guest(t, kvImport, `(local $req i64)
    (local.set $req (call $input))
    (block $full (loop $more
      (br_if $full (i64.eqz (call $alloc (i64.const 4096))))
      (br $more)))
    (block $full (loop $more
      (br_if $full (i64.eqz (call $alloc (i64.const 1))))
      (br $more)))
    (if (result i32) (i64.eqz (call $kv_get (local.get $req)))
      (then (i32.const 7)) (else (i32.const 0)))`, 16, "")
	out, err := handle(t, in, `{"namespace":"t:a","key":"k"}`)
	if err != nil || !strings.Contains(out, "fleet_handle returned 7") {
		t.Fatalf("Handle = %q, %v; want rc 7, the reply offset 0", out, err)
	}
}

// TestLog: Extism's log_info reaches the slot's guest log, with its level; log_debug is
// dropped.
func TestLog(t *testing.T) {
	var out testutil.LogBuffer
	in := guestOut(t, `(import "extism:host/env" "log_info" (func $info (param i64)))
  (import "extism:host/env" "log_debug" (func $debug (param i64)))`,
		`(call $info (call $input)) (call $debug (call $input)) (i32.const 0)`, &out)
	if _, err := handle(t, in, "hello from the guest"); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "extism INFO: hello from the guest\n" {
		t.Fatalf("guest log = %q, want one info line", got)
	}
}

// TestOutputCap: an output over 4 MiB (abi.MaxRequest) kills the instance as a bad
// result, as a native result past the cap does.
func TestOutputCap(t *testing.T) {
	in := guest(t, "", `(local $b i64)
    (local.set $b (call $alloc (i64.const 5242880)))
    (call $output_set (local.get $b) (i64.const 5242880)) (i32.const 0)`, 256, "")
	_, err := handle(t, in, "")
	var died *slot.Died
	if !errors.As(err, &died) || died.Death != slotstate.DeathBadResult || !strings.Contains(err.Error(), "limit 4194304") {
		t.Fatalf("Handle = %v, want a bad_result death naming the limit", err)
	}
}

// TestIsExtism: the transport is chosen by the import section alone: a module importing
// Extism's kernel is Extism's; one importing only fleet, or nothing, or that cannot be
// read, is not; no prefix of a module makes it panic.
func TestIsExtism(t *testing.T) {
	read := func(src string) []byte {
		b, err := os.ReadFile(testutil.WAT(t, src))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	extism := read(fmt.Sprintf(guestWAT, "", "(i32.const 0)"))
	native := read(`(module (import "fleet" "kv_get" (func (param i32 i32 i32 i32) (result i32))) (memory 1))`)
	for name, tt := range map[string]struct {
		wasm []byte
		want bool
	}{
		"extism": {extism, true}, "native": {native, false}, "empty": {read(`(module)`), false}, "garbage": {[]byte("not wasm"), false},
	} {
		if got := IsExtism(tt.wasm); got != tt.want {
			t.Errorf("IsExtism(%s) = %v, want %v", name, got, tt.want)
		}
	}
	// A prefix cut inside the import section is unreadable; one past it has read it all.
	seen := false
	for n := range len(extism) {
		got := IsExtism(extism[:n])
		if seen && !got {
			t.Fatalf("IsExtism of the first %d bytes = false after a shorter prefix was true", n)
		}
		seen = seen || got
	}
}

// TestDeaths: a dead call is told from the instance's state, as a native one is: a trap
// with the module's memory at its limit, or the kernel's, is a memory death; a trap of
// the rewriter's stack check a stack death; any other trap a trap, whatever the guest
// wrote first (its error message says "out of memory" and "stack").
func TestDeaths(t *testing.T) {
	for _, tt := range []struct {
		name, handle string
		want         slotstate.Death
	}{
		{"module memory", `(block $full (loop $more
		    (br_if $full (i32.eq (memory.grow (i32.const 1)) (i32.const -1)))
		    (br $more)))
		  unreachable`, slotstate.DeathMemory},
		{"kernel memory", `(block $full (loop $more
		    (br_if $full (i64.eqz (call $alloc (i64.const 65536))))
		    (br $more)))
		  unreachable`, slotstate.DeathMemory},
		{"stack", `(call $r) (i32.const 0)`, slotstate.DeathStack},
		{"trap", `(call $error_set (call $input)) unreachable`, slotstate.DeathTrap},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// $r recurses for ever; the rewriter's stack budget stops it. The kernel
			// begins at 16 pages: 64 leave it room to grow.
			in := guest(t, `(func $r (call $r))`, tt.handle, 64, "")
			_, err := handle(t, in, "out of memory: stack overflow")
			var died *slot.Died
			if !errors.As(err, &died) || died.Death != tt.want {
				t.Fatalf("Handle = %v (%s), want a %s death", err, died.Death, tt.want)
			}
		})
	}
}

// TestKernelOutOfReach: the kernel's bookkeeping is the host's, out of the guest's
// reach. The writes that broke the Extism SDK's kernel (a block's header rewritten so
// that its block walk loops, its allocator's root at 1 overwritten) are
// writes of Extism memory like any other: every kernel function that looks a block up
// afterwards returns, the call is done, and the instance answers the next one. A load or
// store past the memory in use traps.
func TestKernelOutOfReach(t *testing.T) {
	imports := `(import "extism:host/env" "store_u64" (func $store_u64 (param i64 i64)))
  (import "extism:host/env" "load_u64" (func $load_u64 (param i64) (result i64)))
  (import "extism:host/env" "log_info" (func $log_info (param i64)))
  (import "extism:host/env" "config_get" (func $config_get (param i64) (result i64)))
  (import "extism:host/env" "var_get" (func $var_get (param i64) (result i64)))
  (import "extism:host/env" "free" (func $free (param i64)))`
	broken := `(call $store_u64 (i64.const 1) (i64.const 0x7ffffff0))`
	for name, body := range map[string]string{
		"log_info":   testutil.ExtismKernelScribble(broken, `(call $log_info (local.get $b)) (call $out (call $input)) (i32.const 0)`),
		"config_get": testutil.ExtismKernelScribble(broken, `(drop (call $config_get (local.get $b))) (call $out (call $input)) (i32.const 0)`),
		"var_get":    testutil.ExtismKernelScribble(broken, `(drop (call $var_get (local.get $b))) (call $out (call $input)) (i32.const 0)`),
		"free":       testutil.ExtismKernelScribble(broken, `(call $free (local.get $b)) (call $out (call $input)) (i32.const 0)`),
	} {
		t.Run(name, func(t *testing.T) {
			in := guest(t, imports, body, 64, "")
			for range 2 {
				if out, err := handle(t, in, `{"outcome":"done"}`); err != nil || out != `{"outcome":"done"}` {
					t.Fatalf("Handle = %q, %v; want done", out, err)
				}
			}
		})
	}
	for name, body := range map[string]string{
		"store": `(call $store_u64 (i64.const 0x100000) (i64.const 1)) (i32.const 0)`,
		"load":  `(drop (call $load_u64 (i64.const 0xfffffffffffffffc))) (i32.const 0)`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := handle(t, guest(t, imports, body, 64, ""), "")
			var died *slot.Died
			if !errors.As(err, &died) || died.Death != slotstate.DeathTrap || !strings.Contains(err.Error(), "outside the kernel's memory") {
				t.Fatalf("Handle = %v, want a trap naming the kernel's memory", err)
			}
		})
	}
}

// TestKernelImportsChecked: a module that imports a function Extism's kernel does not
// have, or one of its functions with another signature, is refused at load, naming it.
func TestKernelImportsChecked(t *testing.T) {
	for imp, want := range map[string]string{
		`(import "extism:host/env" "nope" (func (param i64)))`:               "extism:host/env.nope, which is not a function of Extism's kernel",
		`(import "extism:host/env" "alloc" (func (param i32) (result i32)))`: "extism:host/env.alloc with the wrong signature; Extism's is (func (param i64) (result i64))",
	} {
		wasm, err := os.ReadFile(testutil.WAT(t, `(module `+imp+` (memory (export "memory") 1)
  (func (export "fleet_describe") (result i32) (i32.const 0)))`))
		if err != nil {
			t.Fatal(err)
		}
		_, err = NewRuntime(context.Background(), Params{MemoryLimitPages: 16}, wasm)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("NewRuntime = %v, want an error saying %q", err, want)
		}
	}
}

// TestStartDeadline: a module whose start function (an AssemblyScript module's top-level
// code) spins is cut at the deadline of its instantiation: the rewriter moved the start
// out of instantiation, and the host calls it under the stop global.
func TestStartDeadline(t *testing.T) {
	wasm, err := os.ReadFile(testutil.WAT(t, `(module
  (import "extism:host/env" "input_length" (func (result i64)))
  (memory (export "memory") 1)
  (func $spin (loop $l (br $l)))
  (start $spin)
  (func (export "fleet_describe") (result i32) (i32.const 0)))`))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rt, err := NewRuntime(ctx, Params{MemoryLimitPages: 16}, wasm)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	deadline, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	in, err := rt.Instantiate(deadline, "t/0", &hostfn.Caller{}, nil)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "start function") {
		if in != nil {
			in.Close(ctx)
		}
		t.Fatalf("Instantiate = %v; want the start function cut at the deadline", err)
	}
}
