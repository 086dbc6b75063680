package host_test

import (
	"context"
	"testing"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
)

// TestCounterExample: the guest SDK's counter example, 4 slots × 200 tasks: the fleet
// counter ends at exactly 200 and every task is acked.
func TestCounterExample(t *testing.T) {
	counterExample(t, newRig(t))
}

// TestCounterExampleRedis is TestCounterExample on a real Redis.
func TestCounterExampleRedis(t *testing.T) {
	counterExample(t, newRedisRig(t))
}

func counterExample(t *testing.T, r *rig) {
	goPlugin(t, "plugins/examples/counter", r.dir, "counter")
	r.grant("counter", consumer("count"))
	r.cfg.Slots = 4
	h, stop := r.start()
	for range 200 {
		if _, err := h.Submit(context.Background(), "count", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "200 iterations", func() bool { return len(r.events.Finished("")) >= 200 })
	stop()
	if got := testutil.Counter(t, r.backend, "counter:done"); got != 200 {
		t.Errorf("counter:done = %d, want 200", got)
	}
	if got := r.events.Outcomes(""); got["done"] != 200 || len(got) != 1 {
		t.Errorf("outcomes = %v, want 200 done", got)
	}
	if s := testutil.QueueStats(t, r.backend, "count"); s != (primitives.QueueStats{}) {
		t.Errorf("stats = %+v, want every task acked", s)
	}
}

// TestExampleContractConflict: a Go plugin declaring the counter's queue with another
// payload type is refused, naming the contract and where the schemas differ.
func TestExampleContractConflict(t *testing.T) {
	r := newRig(t)
	goPlugin(t, "plugins/examples/counter", r.dir, "a-counter")
	goPlugin(t, "host/testdata/rival", r.dir, "b-rival")
	r.grant("counter", consumer("count"))
	r.grant("rival", consumer("count"))
	r.cfg.PluginsDir = r.dir
	_, err := host.New(context.Background(), r.cfg)
	if err == nil {
		t.Fatal("host.New loaded a plugin whose contract conflicts with a loaded one")
	}
	wantRefusal(t, err, "b-rival.wasm", `plugin "rival"`, `queue "count"`, "payload schema", `plugin "counter"`, "/properties")
}
