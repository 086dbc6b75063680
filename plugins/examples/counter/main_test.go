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
	h.Reply(abi.OpCounterIncr, abi.CounterReply{Value: 1})
	for i := 0; i < 3; i++ {
		if res := h.Handle(contracts.CountTask{}); res.Outcome != abi.OutcomeDone {
			t.Fatalf("handle = %+v, want done", res)
		}
	}
	incrs := fleettest.Requests[abi.CounterIncrRequest](h, abi.OpCounterIncr)
	if len(incrs) != 3 || incrs[0] != (abi.CounterIncrRequest{Name: DoneCounter, Delta: 1}) {
		t.Fatalf("counter_incr requests = %+v, want 3 of +1 on %s", incrs, DoneCounter)
	}

	h.Fail(abi.OpCounterIncr, abi.Unavailable, "backend down")
	if res := h.Handle(contracts.CountTask{}); res.Outcome != abi.OutcomeFail || res.Reason != "fleet: counter_incr: Unavailable: backend down" {
		t.Fatalf("handle with the backend down = %+v, want fail with the host's message", res)
	}
}
