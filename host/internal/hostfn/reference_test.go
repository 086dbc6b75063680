package hostfn

import (
	"encoding/json"
	"testing"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/internal/testutil"
)

// TestReferenceRequestsAreAccepted sends every request example of abi/REFERENCE.md
// through the dispatch core, as the plugin the examples are written for (the fixture's
// scraper, which also submits to harvest): none is refused as malformed (TypeError,
// ValueError), so that an author copying one gets a request the host reads. Those that
// name an item that does not exist answer NotFound; http answers Unavailable, this core
// having no client.
func TestReferenceRequestsAreAccepted(t *testing.T) {
	f := newFixture(t)
	harvest := &abi.Describe{ABIVersion: abi.Version, Type: "harvester", Mode: abi.ModeBatch,
		Consumes: &abi.QueueContract{Name: "harvest", Payload: json.RawMessage(`{"type":"object"}`)}}
	if _, err := f.core.contracts.Register(harvest); err != nil {
		t.Fatal(err)
	}
	f.caller.Plugin.Access.Queues["harvest"] = RoleSubmit
	ref := testutil.LoadReference(t)
	for _, op := range abi.Ops {
		reqs := ref.Blocks("json request " + string(op))
		if len(reqs) == 0 && op != abi.OpReplyFetch { // reply_fetch takes no request
			t.Errorf("%s: no request example", op)
		}
		for _, req := range reqs {
			if e := f.call(t, op, req, nil); e != nil && (e.Kind == abi.TypeError || e.Kind == abi.ValueError) {
				t.Errorf("%s %s = %v, want it read", op, req, e)
			}
		}
	}
}
