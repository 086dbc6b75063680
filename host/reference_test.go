package host_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/internal/testutil"
)

// TestReferencePluginRuns: the WAT plugin that abi/REFERENCE.md writes from the page
// alone (no _initialize, no WASI, a describe document whose schema is true) loads with
// the grant the page names and counts every task.
func TestReferencePluginRuns(t *testing.T) {
	blocks := testutil.LoadReference(t).Blocks("wat plugin")
	if len(blocks) != 1 {
		t.Fatalf("abi/REFERENCE.md has %d wat plugin blocks, want 1", len(blocks))
	}
	r := newRig(t)
	r.grant("tiny", consumer("tiny-jobs"))
	copyPlugin(t, testutil.WAT(t, blocks[0]), r.dir, "tiny")
	r.cfg.PluginsDir = r.dir
	h, stop := r.start()
	for range 3 {
		if _, err := h.Submit(context.Background(), "tiny-jobs", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "3 tasks counted", func() bool { return testutil.Counter(t, r.backend, "tiny:done") == 3 })
	stop()
	if got := r.events.Outcomes(""); got["done"] != 3 || len(got) != 1 {
		t.Errorf("outcomes = %v, want 3 done", got)
	}
}

// TestReferenceSmallestDescribeLoads: the smallest describe document of abi/REFERENCE.md
// passes the host's whole describe check (abi's, the type's, the contracts', the grant's)
// with nothing granted.
func TestReferenceSmallestDescribeLoads(t *testing.T) {
	var d abi.Describe
	if err := json.Unmarshal([]byte(testutil.LoadReference(t).Blocks("json describe")[0]), &d); err != nil {
		t.Fatal(err)
	}
	r := newRig(t)
	watPlugin(t, r.dir, "done", "tiny", d) // done.wat exports fleet_tick
	r.cfg.PluginsDir = r.dir
	h, stop := r.start()
	defer stop()
	if ps := h.Plugins(); len(ps) != 1 || ps[0].Type != "tiny" || ps[0].Mode != abi.ModeLoop {
		t.Errorf("Plugins() = %+v, want the loop plugin tiny", ps)
	}
}
