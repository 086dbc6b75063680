package hostfn

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/contracts"
)

// The host's own KV namespaces (the contracts, the schedules' last fires) are beyond
// every grant, "*" too, and a refused call never reaches the backend; any other
// namespace "*" covers.
func TestHostNamespacesBeyondEveryGrant(t *testing.T) {
	f := newFixture(t)
	p := NewGrantee("greedy", Access{KV: Patterns{"*"}}, json.RawMessage(`{}`), testLimits, nil)
	f.caller = &Caller{Plugin: p, Slot: "greedy/0"}
	f.ctx = WithCaller(context.Background(), f.caller)
	for _, ns := range []string{contracts.Namespace, SchedulesNamespace} {
		for op, req := range map[abi.Op]string{
			abi.OpKVGet:    `{"namespace":"` + ns + `","key":"tick"}`,
			abi.OpKVSet:    `{"namespace":"` + ns + `","key":"tick","value":{"tick":1}}`,
			abi.OpKVDelete: `{"namespace":"` + ns + `","key":"tick"}`,
		} {
			if e := f.call(t, op, req, nil); e == nil || e.Kind != abi.PermissionDenied {
				t.Errorf("Call(%s, %s) with kv \"*\" = %v, want PermissionDenied", op, ns, e)
			}
		}
	}
	if n := f.spy.calls.Load(); n != 0 {
		t.Errorf("refused calls reached the backend %d times, want 0", n)
	}
	if e := f.call(t, abi.OpKVGet, `{"namespace":"fleet-other","key":"k"}`, nil); e != nil {
		t.Errorf("kv_get of fleet-other with kv \"*\" = %v, want allowed", e)
	}
}

// TestReservedWhateverTheGrant: a plugin granted every KV namespace and lock name ("*")
// still reaches neither the fleet's contracts nor its desired state (the operator's
// pauses), by KV or by lock: it can neither read nor forge them, nor hold up a writer
// by their lock.
func TestReservedWhateverTheGrant(t *testing.T) {
	f := newFixture(t)
	f.caller.Plugin = NewGrantee("scraper", Access{KV: Patterns{"*"}, Locks: Patterns{"*"}}, json.RawMessage(`{}`), testLimits, nil)
	for _, ns := range []string{contracts.Namespace, "fleet-desired"} {
		for _, c := range []struct {
			op  abi.Op
			req string
		}{
			{abi.OpKVGet, `{"namespace":"` + ns + `","key":"state"}`},
			{abi.OpKVSet, `{"namespace":"` + ns + `","key":"state","value":{}}`},
			{abi.OpKVDelete, `{"namespace":"` + ns + `","key":"state"}`},
			{abi.OpLockAcquire, `{"name":"` + ns + `","hold_ms":1000}`},
		} {
			if e := f.call(t, c.op, c.req, nil); e == nil || e.Kind != abi.PermissionDenied {
				t.Errorf("%s %s under a \"*\" grant = %v, want PermissionDenied", c.op, c.req, e)
			}
		}
	}
	if e := f.call(t, abi.OpKVGet, `{"namespace":"fleet-desired-not","key":"state"}`, nil); e != nil {
		t.Errorf("kv_get of a namespace that only starts like a reserved one = %v, want it granted", e)
	}
}
