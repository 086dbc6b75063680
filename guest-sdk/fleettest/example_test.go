package fleettest_test

import (
	"testing"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/guest-sdk/fleettest"
)

// A plugin's test scripts the host's answers, runs one task through fleet_handle and
// checks the outcome and the calls. The plugin registered itself from its init, as it does
// in wasm.
func ExampleNew() {
	var t *testing.T // the test's *testing.T
	h := fleettest.New(t)
	h.Reply(abi.OpPoolClaim, abi.PoolClaimReply{Found: false})
	h.Reply(abi.OpSubmit, abi.SubmitReply{TaskID: "t1"})

	res := h.Handle(map[string]string{"url": "http://127.0.0.1:8080/page"})
	if res.Outcome != abi.OutcomeRetry {
		t.Fatalf("handle = %+v, want retry", res)
	}
	subs := fleettest.Requests[abi.SubmitRequest](h, abi.OpSubmit)
	if len(subs) != 1 || subs[0].Queue != "harvest" {
		t.Fatalf("submits = %+v, want one harvest request", subs)
	}
}
