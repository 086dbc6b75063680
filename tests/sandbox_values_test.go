package tests

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/testutil"
)

// valuesDescribe is the hostile guest's describe: a batch plugin of type "values" that
// consumes queue "values".
var valuesDescribe = abi.Describe{ABIVersion: abi.Version, Type: "values", Mode: abi.ModeBatch,
	Consumes: &abi.QueueContract{Name: "values", Payload: json.RawMessage(`{"type":"object"}`)}}

// valuesPlugin is a batch guest of type "values" on queue "values" whose fleet_handle
// calls its own function $<fn> (its name kept in the name section, where wazero's stack
// traces read it), which runs body, and then returns result.
func valuesPlugin(t *testing.T, fn, body, result string) string {
	t.Helper()
	return testutil.WATNamed(t, testutil.GuestWAT{
		Describe: valuesDescribe,
		Result:   result,
		Imports:  `(import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))`,
		Funcs:    fmt.Sprintf("(func $%s %s)", fn, body),
		Handle:   "(call $" + fn + ")",
	}.Source(t))
}

// TestSandboxValues: a guest's values mean what they say, beside an honest plugin that
// keeps completing its tasks. A retry_after_ms of the int64 maximum (once a negative
// delay that stranded the task until its lease expired) is a malformed result: the
// instance dies of a bad result and the task parks once its attempts are spent. A trap
// in a function named $call_ran_past_its_deadline is a trap, and a proc_exit with
// wazero's deadline exit code is an exit: the death reason comes from the error's type.
func TestSandboxValues(t *testing.T) {
	const done = `{"outcome":"done"}`
	tests := []struct {
		name, fn, body, result string
		death                  string
		lastError              string // in the parked task's last error
	}{
		{"retry after MaxInt64 ms", "retry", "", `{"outcome":"retry","retry_after_ms":9223372036854775807}`, "bad_result", "retry_after_ms is 9223372036854775807, want 0..2592000000"},
		{"retry after 18446744073710 ms", "retry", "", `{"outcome":"retry","retry_after_ms":18446744073710}`, "bad_result", "retry_after_ms is 18446744073710"},
		{"trap named deadline", "call_ran_past_its_deadline", "unreachable", done, "trap", "call_ran_past_its_deadline"},
		{"trap named memory", "out_of_memory_limit", "unreachable", done, "trap", "out_of_memory_limit"},
		{"exit with the deadline code", "deadline", "(call $proc_exit (i32.const 0xefffffff))", done, "exit", "the guest called proc_exit(4026531839)"},
	}
	for _, kind := range backendKinds {
		for _, tt := range tests {
			t.Run(kind+"/"+tt.name, func(t *testing.T) {
				r := newSandbox(t, kind)
				r.install(t, valuesPlugin(t, tt.fn, tt.body, tt.result), "values")
				r.grants["values"] = host.Grant{Queues: map[string][]string{"values": {"consume"}}}
				r.cfg.MaxAttempts = 2
				r.start(t)
				if _, err := r.h.Submit(t.Context(), "values", []byte(`{}`)); err != nil {
					t.Fatal(err)
				}
				r.honestCompletes(t, 50)
				waitFor(t, "the hostile task to park", func() bool {
					return testutil.QueueStats(t, r.b, "values").Parked == 1 && len(r.ev.finished("values")) == 2
				})
				fin := r.ev.finished("values")
				if len(fin) != 2 {
					t.Fatalf("hostile iterations = %+v, want 2 (one per attempt)", fin)
				}
				for _, ev := range fin {
					if ev.Outcome != "dead" || ev.Death != tt.death {
						t.Errorf("hostile iteration = %+v, want dead of %s", ev, tt.death)
					}
				}
				parked, err := r.b.QueueParked(t.Context(), "values", 1)
				if err != nil || len(parked) != 1 || !strings.Contains(parked[0].LastError, tt.lastError) {
					t.Errorf("QueueParked = %+v, %v; want the task with %q in its last error", parked, err, tt.lastError)
				}
			})
		}
	}
}

// TestSandboxMillis: a guest's millisecond fields past abi.MaxMillis are refused, beside
// an honest plugin that keeps completing its tasks. A hold_ms of 18446744073710 once
// wrapped to half a millisecond and was answered ok. The guest makes the call, then
// stores the envelope it got in its KV (key "reply"), where the test reads its kind; the
// lock it asked for is not held.
func TestSandboxMillis(t *testing.T) {
	tests := []struct{ name, op, req string }{
		{"lock hold wraps", "lock_acquire", `{"name":"values:lock","hold_ms":18446744073710}`},
		{"lock hold past max", "lock_acquire", `{"name":"values:lock","hold_ms":2592000001}`},
		{"lock wait is MaxInt64", "lock_acquire", `{"name":"values:lock","hold_ms":1000,"wait_ms":9223372036854775807}`},
		{"kv ttl wraps", "kv_set", `{"namespace":"values:kv","key":"k","value":1,"ttl_ms":18446744073710}`},
	}
	// Memory: the KV request's head at 12288 runs straight into the probe's reply buffer,
	// and a '}' after the reply closes it; the probe request at 20480, kv_set's reply at
	// 24576.
	const head = `{"namespace":"values:kv","key":"reply","value":`
	esc := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	for _, kind := range backendKinds {
		for _, tt := range tests {
			t.Run(kind+"/"+tt.name, func(t *testing.T) {
				reply := 12288 + len(head)
				wasm := testutil.WAT(t, testutil.GuestWAT{
					Describe: valuesDescribe,
					Result:   `{"outcome":"done"}`,
					Imports: fmt.Sprintf(`(import "fleet" %q (func $probe (param i32 i32 i32 i32) (result i32)))
  (import "fleet" "kv_set" (func $kv_set (param i32 i32 i32 i32) (result i32)))`, tt.op),
					Funcs: fmt.Sprintf(`(data (i32.const 12288) "%s") (data (i32.const 20480) "%s")`, esc.Replace(head), esc.Replace(tt.req)),
					Handle: fmt.Sprintf(`(local $n i32)
    (local.set $n (call $probe (i32.const 20480) (i32.const %d) (i32.const %d) (i32.const 2048)))
    (i32.store8 (i32.add (i32.const %d) (local.get $n)) (i32.const 125))
    (drop (call $kv_set (i32.const 12288) (i32.add (i32.const %d) (local.get $n)) (i32.const 24576) (i32.const 256)))`,
						len(tt.req), reply, reply, len(head)+1),
				}.Source(t))
				r := newSandbox(t, kind)
				r.install(t, wasm, "values")
				r.grants["values"] = host.Grant{Queues: map[string][]string{"values": {"consume"}}}
				r.start(t)
				if _, err := r.h.Submit(t.Context(), "values", []byte(`{}`)); err != nil {
					t.Fatal(err)
				}
				r.honestCompletes(t, 50)
				waitFor(t, "the guest's task", func() bool { return len(r.ev.finished("values")) == 1 })
				if fin := r.ev.finished("values"); fin[0].Outcome != "checkpoint" {
					t.Fatalf("the guest's iteration = %+v, want a checkpoint (the probe answered, the guest went on)", fin[0])
				}
				b, ok, err := r.b.KVGet(t.Context(), "values:kv", "reply")
				var env struct{ Error *abi.Error }
				if err != nil || !ok || json.Unmarshal(b, &env) != nil || env.Error == nil || env.Error.Kind != abi.ValueError {
					t.Fatalf("%s(%s) answered %s (%v, %v), want a ValueError", tt.op, tt.req, b, ok, err)
				}
				if !strings.Contains(env.Error.Message, "30 days") {
					t.Errorf("%s(%s) answered %q, want the range named", tt.op, tt.req, env.Error.Message)
				}
				if l, held, err := r.b.LockAcquire(t.Context(), "values:lock", time.Second, 0); err != nil || !held {
					t.Errorf("LockAcquire(values:lock) = %+v, %v, %v; want it free: the refused request took nothing", l, held, err)
				}
			})
		}
	}
}
