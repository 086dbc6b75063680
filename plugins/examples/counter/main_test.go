package main

import (
	"testing"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/guest-sdk/fleettest"
	"github.com/fleethost/fleet/plugins/examples/contracts"
)

func TestCounter(t *testing.T) {
	h := fleettest.New(t)
	if d := h.Describe(); d.Type != "counter" || d.Consumes.Name != "count" {
		t.Fatalf("Describe() = %+v", d)
	}
	for i := 0; i < 3; i++ {
		if res := h.Handle(contracts.CountTask{}); res.Outcome != abi.OutcomeDone {
			t.Fatalf("handle = %+v, want done", res)
		}
	}
	if n := h.CounterValue(DoneCounter); n != 3 {
		t.Fatalf("%s = %d after 3 tasks, want 3", DoneCounter, n)
	}

	h.Fail(abi.OpCounterIncr, abi.Unavailable, "backend down")
	if res := h.Handle(contracts.CountTask{}); res.Outcome != abi.OutcomeFail || res.Reason != "fleet: counter_incr: Unavailable: backend down" {
		t.Fatalf("handle with the backend down = %+v, want fail with the host's message", res)
	}
}
