package native

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/fleethost/fleet/host/internal/hostfn"
	"github.com/fleethost/fleet/host/internal/validate"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives/memory"
)

// imageWAT is a guest with data in both of its initial pages.
const imageWAT = `(module
  (memory (export "memory") 2)
  (data (i32.const 1024) "abcd")
  (data (i32.const 65636) "efgh")
  (func (export "fleet_abi_version") (result i32) (i32.const 1))
  (func (export "fleet_input") (param i32) (result i32) (i32.const 8192))
  (func (export "fleet_describe") (result i64) (i64.const 0)))`

// TestImageIsCopyOnWrite: every instance starts from the module's data, and what one
// instance writes over it, no other instance sees, whether it lives beside the writer or
// comes after it.
func TestImageIsCopyOnWrite(t *testing.T) {
	rt := newTestRuntime(t, readFile(t, testutil.WAT(t, imageWAT)), Params{MemoryLimitPages: 16})
	if rt.image == nil {
		t.Fatal("the module has no memory image; the test's premise is one")
	}
	a, b := newTestInstanceOf(t, rt, "a"), newTestInstanceOf(t, rt, "b")
	for _, in := range []*Instance{a, b} {
		assertMemory(t, in, 1024, "abcd")
		assertMemory(t, in, 65636, "efgh")
		assertMemory(t, in, 2000, "\x00\x00\x00\x00")
	}
	a.mod.Memory().Write(1024, []byte("XY"))
	a.mod.Memory().Write(65636, []byte("Z"))
	assertMemory(t, a, 1024, "XYcd")
	assertMemory(t, b, 1024, "abcd")
	assertMemory(t, b, 65636, "efgh")
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := newTestInstanceOf(t, rt, "c")
	assertMemory(t, c, 1024, "abcd")
	assertMemory(t, c, 65636, "efgh")
	if _, ok := c.mod.Memory().Grow(3); !ok {
		t.Fatal("grow under the limit failed")
	}
	assertMemory(t, c, 3*wasmPage, "\x00\x00\x00\x00")
}

// TestSplitDataKeepsWhatItCannotLayOut: a module whose segments wazero must apply itself
// keeps them.
func TestSplitDataKeepsWhatItCannotLayOut(t *testing.T) {
	tests := map[string]string{
		"passive segment":       `(memory 1) (data "x") (func (memory.init 0 (i32.const 0) (i32.const 0) (i32.const 1)))`,
		"offset from an import": `(import "m" "g" (global i32)) (memory 1) (data (global.get 0) "x")`,
		"past the initial page": `(memory 1 2) (data (i32.const 65535) "xy")`,
		"no memory":             `(func)`,
	}
	for name, body := range tests {
		t.Run(name, func(t *testing.T) {
			if _, _, ok := splitData(readFile(t, testutil.WAT(t, "(module "+body+")"))); ok {
				t.Fatal("splitData laid the segments out")
			}
		})
	}
}

func assertMemory(t *testing.T, in *Instance, at uint32, want string) {
	t.Helper()
	got, ok := in.mod.Memory().Read(at, uint32(len(want)))
	if !ok || string(got) != want {
		t.Errorf("%s: memory at %d = %q, want %q", in.caller.Slot, at, got, want)
	}
}

func readFile(tb testing.TB, path string) []byte {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// newTestRuntime compiles wasm in a runtime of its own over a memory backend, closed
// when the test ends.
func newTestRuntime(tb testing.TB, wasm []byte, p Params) *Runtime {
	tb.Helper()
	be := memory.New(memory.Options{})
	tb.Cleanup(func() { be.Close() })
	p.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	p.Core = hostfn.NewCore(be, validate.NewRegistry(nil), nil, p.Log)
	ctx := context.Background()
	rt, err := NewRuntime(ctx, p, wasm)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { rt.Close(ctx) })
	return rt
}

// newTestInstanceOf instantiates a plugin of rt in slot name, with no grant.
func newTestInstanceOf(tb testing.TB, rt *Runtime, name string) *Instance {
	tb.Helper()
	plugin := hostfn.NewGrantee("test", hostfn.Access{}, json.RawMessage(`{}`), hostfn.Limits{MaxPayload: 1024, MaxHostCalls: hostfn.DefaultMaxHostCalls, MaxReply: hostfn.DefaultMaxReply, MaxPoolList: hostfn.DefaultMaxPoolList}, nil)
	in, err := rt.Instantiate(context.Background(), name, &hostfn.Caller{Plugin: plugin, Slot: name}, nil)
	if err != nil {
		tb.Fatal(fmt.Errorf("instantiate %s: %w", name, err))
	}
	return in
}

// writeSpinWAT is a guest whose fleet_handle marks its start at address 0, then writes
// to its memory in a loop until it is stopped.
const writeSpinWAT = `(module
  (memory (export "memory") 1)
  (func (export "fleet_abi_version") (result i32) (i32.const 1))
  (func (export "fleet_input") (param i32) (result i32) (i32.const 8192))
  (func (export "fleet_describe") (result i64) (i64.const 0))
  (func (export "fleet_handle") (param i32) (result i64)
    (i32.store8 (i32.const 0) (i32.const 1))
    (loop $spin (i32.store (i32.const 4096) (i32.const 7)) (br $spin))
    (i64.const 0)))`

// TestRuntimeCloseDuringACall: a runtime closed while an instance's call still runs (a
// drain past its grace period) leaves that call memory to write until it stops, and the
// instance's own Close releases the memory. Were the runtime's close to unmap it, the
// guest's next store would fault the whole process.
func TestRuntimeCloseDuringACall(t *testing.T) {
	rt := newTestRuntime(t, readFile(t, testutil.WAT(t, writeSpinWAT)), Params{MemoryLimitPages: 16})
	in := newTestInstanceOf(t, rt, "a")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := handleAsync(ctx, in)
	testutil.WaitFor(t, 10*time.Second, "the guest's call to start", func() bool {
		b, _ := in.mod.Memory().ReadByte(0)
		return b == 1
	})
	if err := rt.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; !errors.Is(err, errStopped) {
		t.Fatalf("Handle = %v, want the stop", err)
	}
	if err := in.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if in.mem.mapped != nil {
		t.Fatal("the instance's memory is still mapped after its Close")
	}
}
