package main

import (
	"testing"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/guest-sdk/fleettest"
	"github.com/fleethost/fleet/plugins/examples/contracts"
)

func TestNoop(t *testing.T) {
	h := fleettest.New(t)
	if d := h.Describe(); d.Type != "noop" || d.Consumes.Name != "noop" {
		t.Fatalf("Describe() = %+v", d)
	}
	if res := h.Handle(contracts.NoopTask{}); res != (abi.HandleResult{Outcome: abi.OutcomeDone}) {
		t.Fatalf("handle = %+v, want done", res)
	}
	if len(h.Calls()) != 0 {
		t.Fatalf("noop called the host: %v", h.Ops())
	}
}
