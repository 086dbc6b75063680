package host_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/testutil"
)

// TestDrainAbandonsAStuckSlot: a call that nothing stops (host.StickCalls: the guest call
// blocks whatever its context says) does not hold the drain past DrainTimeout +
// AbandonMargin. Run returns ErrDrainIncomplete naming the slot, logs it with its task,
// leaves the task leased (it comes back by its lease), and the other slot stops as usual;
// Close leaves the stuck plugin's runtime open. Released afterwards, the stuck slot ends
// without reporting anything more.
func TestDrainAbandonsAStuckSlot(t *testing.T) {
	r := newRig(t)
	r.goGuest()
	r.cfg.PluginsDir = r.dir
	r.cfg.Slots = 2
	r.cfg.DrainTimeout = 100 * time.Millisecond
	// A lease that outlasts the drain and its AbandonMargin, so that the task is seen
	// left to it, not released.
	r.cfg.TaskLease = time.Minute
	h, err := host.New(context.Background(), r.cfg)
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	host.StickCalls(h, release)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- h.Run(ctx) }()

	id, err := h.Submit(context.Background(), goQueue, []byte(`{"op":"incr"}`))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a slot stuck in its call", func() bool { return r.events.Count("working") > 0 })
	cancel()
	select {
	case err = <-ran:
	case <-time.After(time.Minute):
		t.Fatal("Run did not return within a minute of the drain: it waits for a call that never ends")
	}
	if !errors.Is(err, host.ErrDrainIncomplete) || !strings.Contains(err.Error(), "goguest/") {
		t.Errorf("Run = %v, want ErrDrainIncomplete naming the slot", err)
	}
	if logs := r.logs.String(); !strings.Contains(logs, "host: slot abandoned") || !strings.Contains(logs, id) {
		t.Errorf("no abandonment logged with the task %s", id)
	}
	if s := testutil.QueueStats(t, r.backend, goQueue); s.InFlight != 1 {
		t.Errorf("stats = %+v, want the abandoned slot's task still leased", s)
	}
	if n := r.events.Count("stopped"); n != 1 {
		t.Errorf("stopped events = %d, want 1 (the other slot's)", n)
	}
	if err := h.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
	if !strings.Contains(r.logs.String(), "host: plugin runtime left open") {
		t.Errorf("Close did not say it left the stuck plugin's runtime open")
	}
	seen := len(r.events.All())
	close(release) // the stuck call now runs, cut; its slot ends (CheckGoroutines waits)
	waitFor(t, "the released slot to hand its task back", func() bool {
		return testutil.QueueStats(t, r.backend, goQueue).InFlight == 0
	})
	if len(r.events.All()) != seen {
		t.Errorf("the abandoned slot reported %v after its abandonment, want nothing", r.events.All()[seen:])
	}
}
