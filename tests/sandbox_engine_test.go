package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/internal/testutil"
)

// engineWASM is a batch guest of type typ, consuming queue typ, whose fleet_handle runs
// handle and then answers done; funcs are more module fields (functions, a table).
func engineWASM(t testing.TB, typ, handle, funcs string) string {
	t.Helper()
	return testutil.WAT(t, testutil.GuestWAT{
		Describe: abi.Describe{ABIVersion: abi.Version, Type: typ, Version: "1.0.0", Mode: abi.ModeBatch,
			Consumes: &abi.QueueContract{Name: typ, Payload: json.RawMessage(`{"type":"object"}`)}},
		Result: `{"outcome":"done"}`,
		Funcs:  funcs,
		Handle: handle,
	}.Source(t))
}

// callTree is issue 10's guest: $f0 calls $f1 twice, each $fi calls $f(i+1) twice, 48
// levels, 2^48 calls and no loop.
func callTree() string {
	var b strings.Builder
	for i := range 48 {
		fmt.Fprintf(&b, "(func $f%d (call $f%d) (call $f%d))\n", i, i+1, i+1)
	}
	b.WriteString("(func $f48)")
	return b.String()
}

// TestSandboxWasm runs guests that outlive their deadline without a loop, overflow their
// stack, or grow their table, each beside the honest plugin, on memory and (for the
// deadline, the case that holds a slot longest) on Redis. Each hostile task's first
// iteration must end with the outcome and death reason it names, and the honest plugin
// must complete its 50 tasks.
func TestSandboxWasm(t *testing.T) {
	tests := []struct {
		name, handle, funcs string
		kinds               []string
		outcome             slotstate.Outcome // the first iteration's outcome
		death               slotstate.Death   // and its death reason
	}{
		{
			name: "call-tree", handle: "(call $f0)", funcs: callTree(),
			kinds: sandboxKinds, outcome: "died", death: "deadline",
		},
		{
			// $r(d) calls $r(d-1) twice: 2^40 calls.
			name: "double-recursion", handle: "(call $r (i32.const 40))",
			funcs: `(func $r (param $d i32) (if (local.get $d) (then
			  (call $r (i32.sub (local.get $d) (i32.const 1)))
			  (call $r (i32.sub (local.get $d) (i32.const 1))))))`,
			kinds: []string{"memory"}, outcome: "died", death: "deadline",
		},
		{
			name: "unbounded-recursion", handle: "(call $r)", funcs: "(func $r (call $r))",
			kinds: []string{"memory", "process"}, outcome: "died", death: "stack",
		},
		{
			// Each grow must fail (-1); a grow that succeeds traps, and the task dies.
			name: "table-grow", handle: `
			  (if (i32.ne (table.grow $t (ref.null func) (i32.const 33554432)) (i32.const -1)) (then unreachable))
			  (if (i32.ne (table.grow $t (ref.null func) (i32.const 268435456)) (i32.const -1)) (then unreachable))`,
			funcs: "(table $t 1 funcref)",
			kinds: []string{"memory"}, outcome: "done",
		},
	}
	for _, tt := range tests {
		for _, kind := range tt.kinds {
			t.Run(tt.name+"/"+kind, func(t *testing.T) {
				r := newSandbox(t, kind)
				r.install(t, engineWASM(t, tt.name, tt.handle, tt.funcs), tt.name)
				r.grants[tt.name] = host.Grant{
					CallTimeout: 300 * time.Millisecond,
					Queues:      map[string][]string{tt.name: {"consume"}},
				}
				r.start(t)
				if _, err := r.h.Submit(context.Background(), tt.name, []byte(`{}`)); err != nil {
					t.Fatal(err)
				}
				r.honestCompletes(t, 50)
				waitFor(t, "the hostile task's first iteration", func() bool { return len(r.ev.Finished(tt.name)) > 0 })
				ev := r.ev.Finished(tt.name)[0]
				if ev.Outcome != tt.outcome || ev.Death != tt.death {
					t.Fatalf("hostile iteration = %s, death %q (%s), want %s, death %q", ev.Outcome, ev.Death, ev.Reason, tt.outcome, tt.death)
				}
			})
		}
	}
}

// TestSandboxWasmRefusedAtLoad: a plugin with a table of 2^27 elements is refused before
// any instance is made, and the error names the file and the limit.
func TestSandboxWasmRefusedAtLoad(t *testing.T) {
	r := newSandbox(t, "memory")
	r.install(t, engineWASM(t, "big-table", "", "(table 134217728 funcref)"), "big-table")
	_, err := host.New(context.Background(), r.cfg)
	want := "host: plugin big-table.wasm: native: the table starts with 134217728 elements; the limit is 262144"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("host.New = %v, want an error with %q", err, want)
	}
}
