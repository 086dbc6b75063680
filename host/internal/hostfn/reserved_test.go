package hostfn

import (
	"encoding/json"
	"testing"

	"github.com/fleethost/fleet/abi"
)

// TestReservedWhateverTheGrant: a plugin granted every KV namespace and lock name ("*")
// still reaches neither the fleet's contracts nor its desired state (the operator's
// pauses): it can neither read nor forge them, nor hold up a writer by their lock.
func TestReservedWhateverTheGrant(t *testing.T) {
	f := newFixture(t)
	f.caller.Plugin = NewPlugin("scraper", Access{KV: Patterns{"*"}, Locks: Patterns{"*"}}, json.RawMessage(`{}`), testLimits, nil)
	for _, ns := range []string{ContractsNamespace, "fleet-desired"} {
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
