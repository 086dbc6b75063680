package tests

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
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
		death                  slotstate.Death
		lastError              string // in the parked task's last error
	}{
		{"retry after MaxInt64 ms", "retry", "", `{"outcome":"retry","retry_after_ms":9223372036854775807}`, "bad_result", "retry_after_ms is 9223372036854775807, want 0..2592000000"},
		{"retry after 18446744073710 ms", "retry", "", `{"outcome":"retry","retry_after_ms":18446744073710}`, "bad_result", "retry_after_ms is 18446744073710"},
		{"trap named deadline", "call_ran_past_its_deadline", "unreachable", done, "trap", "call_ran_past_its_deadline"},
		{"trap named memory", "out_of_memory_limit", "unreachable", done, "trap", "out_of_memory_limit"},
		{"exit with the deadline code", "deadline", "(call $proc_exit (i32.const 0xefffffff))", done, "exit", "the guest called proc_exit(4026531839)"},
	}
	for _, kind := range sandboxKinds {
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
					return testutil.QueueStats(t, r.b, "values").Parked == 1 && len(r.ev.Finished("values")) == 2
				})
				fin := r.ev.Finished("values")
				if len(fin) != 2 {
					t.Fatalf("hostile iterations = %+v, want 2 (one per attempt)", fin)
				}
				for _, ev := range fin {
					if ev.Outcome != "died" || ev.Death != tt.death {
						t.Errorf("hostile iteration = %+v, want died of %s", ev, tt.death)
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
// wrapped to half a millisecond and was answered ok. The lock the guest asked for is not
// held.
func TestSandboxMillis(t *testing.T) {
	tests := []struct{ name, op, req string }{
		{"lock hold wraps", "lock_acquire", `{"name":"values:lock","hold_ms":18446744073710}`},
		{"lock hold past max", "lock_acquire", `{"name":"values:lock","hold_ms":2592000001}`},
		{"lock wait is MaxInt64", "lock_acquire", `{"name":"values:lock","hold_ms":1000,"wait_ms":9223372036854775807}`},
		{"kv ttl wraps", "kv_set", `{"namespace":"values:kv","key":"k","value":1,"ttl_ms":18446744073710}`},
	}
	for _, kind := range sandboxKinds {
		for _, tt := range tests {
			t.Run(kind+"/"+tt.name, func(t *testing.T) {
				r := newSandbox(t, kind)
				e := r.probe(t, valuesDescribe, tt.op, tt.req, host.Grant{})
				if e == nil || e.Kind != abi.ValueError {
					t.Fatalf("%s(%s) answered %v, want a ValueError", tt.op, tt.req, e)
				}
				if !strings.Contains(e.Message, "30 days") {
					t.Errorf("%s(%s) answered %q, want the range named", tt.op, tt.req, e.Message)
				}
				if l, held, err := r.b.LockAcquire(t.Context(), "values:lock", time.Second, 0, primitives.NameQuota{}); err != nil || !held {
					t.Errorf("LockAcquire(values:lock) = %+v, %v, %v; want it free: the refused request took nothing", l, held, err)
				}
			})
		}
	}
}

// TestSandboxSubmitNumbers: a guest's submit or pool put of a number the Go type on the
// other side cannot decode (an int64 field, as the guest SDK writes its schema) is
// refused with a ValueError naming the field, and nothing is stored; 1.0e0 for a float
// field is fine.
func TestSandboxSubmitNumbers(t *testing.T) {
	const int64Field = `{"type":"integer","minimum":-9223372036854775808,"maximum":9223372036854775807}`
	schema := json.RawMessage(`{"type":"object","properties":{"n":` + int64Field + `,"f":{"type":"number"}}}`)
	d := valuesDescribe
	d.Submits = []abi.QueueContract{{Name: "nums", Payload: schema}}
	d.Pools = []abi.PoolContract{{Name: "nums", Payload: schema, Tags: json.RawMessage(`{"type":"object","properties":{"k":` + int64Field + `}}`)}}
	grant := host.Grant{Queues: map[string][]string{"nums": {"submit"}}, Pools: map[string][]string{"nums": {"put"}}}
	tests := []struct {
		op, req string
		at      string // the refused field's pointer; "" accepted
	}{
		{"submit", `{"queue":"nums","payload":{"n":1e400}}`, "/n"},
		{"submit", `{"queue":"nums","payload":{"n":9223372036854775808}}`, "/n"},
		{"submit", `{"queue":"nums","payload":{"n":1.0}}`, "/n"},
		{"submit", `{"queue":"nums","payload":{"n":-9223372036854775808,"f":1.0e0}}`, ""},
		{"pool_put", `{"pool":"nums","payload":{"n":1e400}}`, "/n"},
		{"pool_put", `{"pool":"nums","payload":{"n":1},"tags":{"k":1.0}}`, "/k"},
		{"pool_put", `{"pool":"nums","payload":{"n":1},"tags":{"k":9223372036854775807}}`, ""},
	}
	// The host validates before it calls the backend, so one backend shows it.
	for _, tt := range tests {
		t.Run(tt.req, func(t *testing.T) {
			r := newSandbox(t, "memory")
			e := r.probe(t, d, tt.op, tt.req, grant)
			stored := testutil.QueueStats(t, r.b, "nums").Depth
			if ps, err := r.b.PoolStats(t.Context(), "nums"); err != nil {
				t.Fatal(err)
			} else {
				stored += ps.Size
			}
			if tt.at == "" {
				if e != nil || stored != 1 {
					t.Fatalf("%s(%s) answered %v, %d stored; want it stored", tt.op, tt.req, e, stored)
				}
				return
			}
			if e == nil || e.Kind != abi.ValueError || !strings.Contains(e.Message, "at "+tt.at+":") {
				t.Errorf("%s(%s) answered %v, want a ValueError at %s", tt.op, tt.req, e, tt.at)
			}
			if stored != 0 {
				t.Errorf("%d stored after a refused %s, want 0", stored, tt.op)
			}
		})
	}
}

// probe runs a guest, described by d, whose one task makes the host call op with the
// request req and stores the envelope it gets in its KV (key "reply"), beside an honest
// plugin that keeps completing its tasks; it returns the envelope's error, nil for an
// answer. The guest is granted g, and to consume the queue "values".
func (r *sandbox) probe(t *testing.T, d abi.Describe, op, req string, g host.Grant) *abi.Error {
	t.Helper()
	// Memory: the KV request's head at 12288 runs straight into the probe's reply buffer,
	// and a '}' after the reply closes it; the probe request at 20480, kv_set's reply at
	// 24576.
	const head = `{"namespace":"values:kv","key":"reply","value":`
	esc := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	reply := 12288 + len(head)
	wasm := testutil.WAT(t, testutil.GuestWAT{
		Describe: d,
		Result:   `{"outcome":"done"}`,
		Imports: fmt.Sprintf(`(import "fleet" %q (func $probe (param i32 i32 i32 i32) (result i32)))
  (import "fleet" "kv_set" (func $kv_set (param i32 i32 i32 i32) (result i32)))`, op),
		Funcs: fmt.Sprintf(`(data (i32.const 12288) "%s") (data (i32.const 20480) "%s")`, esc.Replace(head), esc.Replace(req)),
		Handle: fmt.Sprintf(`(local $n i32)
    (local.set $n (call $probe (i32.const 20480) (i32.const %d) (i32.const %d) (i32.const 2048)))
    (i32.store8 (i32.add (i32.const %d) (local.get $n)) (i32.const 125))
    (drop (call $kv_set (i32.const 12288) (i32.add (i32.const %d) (local.get $n)) (i32.const 24576) (i32.const 256)))`,
			len(req), reply, reply, len(head)+1),
	}.Source(t))
	r.install(t, wasm, "values")
	g.Queues = maps.Clone(g.Queues)
	if g.Queues == nil {
		g.Queues = map[string][]string{}
	}
	g.Queues["values"] = []string{"consume"}
	r.grants["values"] = g
	r.start(t)
	if _, err := r.h.Submit(t.Context(), "values", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	r.honestCompletes(t, 50)
	waitFor(t, "the guest's task", func() bool { return len(r.ev.Finished("values")) == 1 })
	if fin := r.ev.Finished("values"); fin[0].Outcome != "done" {
		t.Fatalf("the guest's iteration = %+v, want done (the probe answered, the guest went on)", fin[0])
	}
	b, ok, err := r.b.KVGet(t.Context(), "values:kv", "reply")
	var env struct{ Error *abi.Error }
	if err != nil || !ok || json.Unmarshal(b, &env) != nil {
		t.Fatalf("%s(%s) stored %s (%v, %v), want its reply envelope", op, req, b, ok, err)
	}
	return env.Error
}
