package host_test

import (
	"testing"
	"time"

	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
)

// TestDrainFinishesInFlight: Run's ctx is cancelled while a slot is mid-call; the call
// finishes within the grace period and its task is acked.
func TestDrainFinishesInFlight(t *testing.T) {
	r := newRig(t)
	r.goGuest()
	r.cfg.DrainTimeout = time.Minute
	h, stop := r.start()
	submitN(t, h, 1, `{"op":"sleep_ms","n":300}`)
	waitFor(t, "the slot to start the call", func() bool { return r.events.Count("working") > 0 })
	stop()
	if got := r.events.Outcomes(""); got["done"] != 1 {
		t.Fatalf("outcomes = %v, want the call in flight finished", got)
	}
	if got := testutil.Counter(t, r.backend, "goguest:count"); got != 1 {
		t.Errorf("counter = %d, want 1", got)
	}
	if s := testutil.QueueStats(t, r.backend, goQueue); s != (primitives.QueueStats{}) {
		t.Errorf("stats = %+v, want the task acked", s)
	}
}

// TestDrainCutsAtTimeout: a call still running at the drain deadline is cut, and its task
// goes straight back to the queue (not parked, not left leased); tasks never claimed stay.
func TestDrainCutsAtTimeout(t *testing.T) {
	r := newRig(t)
	r.goGuest()
	r.cfg.Slots = 2
	r.cfg.DrainTimeout = 200 * time.Millisecond
	r.cfg.CallTimeout = 10 * time.Minute
	r.cfg.MaxAttempts = 1 // a cut must not park even a task on its last attempt
	h, stop := r.start()
	submitN(t, h, 2, `{"op":"spin"}`)
	waitFor(t, "both slots mid-call", func() bool { return testutil.QueueStats(t, r.backend, goQueue).InFlight == 2 })
	submitN(t, h, 3, `{"op":"incr"}`)
	stop()
	if s := testutil.QueueStats(t, r.backend, goQueue); s != (primitives.QueueStats{Depth: 5}) {
		t.Fatalf("stats = %+v, want depth restored to 5, nothing in flight or parked", s)
	}
	for _, ev := range r.events.Finished("") {
		if ev.Outcome != "cut" || ev.Reason != "host draining: call cut at the drain deadline" {
			t.Errorf("iteration = %+v, want released by the drain", ev)
		}
	}
	if n := r.events.Count("stopped"); n != 2 {
		t.Errorf("stopped events = %d, want 2", n)
	}
}
