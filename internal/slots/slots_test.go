package slots

import (
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/host/slotstate"
)

// TestObserveRollOver: while a reload rolls a slot over, the old and the new version's
// slot share its name; once the new one has come up, the old one's last iteration and
// its stop do not make the slot look working or stopped.
func TestObserveRollOver(t *testing.T) {
	slots := NewTable()
	slots.Register(map[string]int{"w": 1})
	for _, e := range []slotstate.Event{
		{Plugin: "w", Slot: "w/0", ConfigIdentity: "old", Kind: "working", N: 7, TaskID: "t7", Phase: "handle"},
		{Plugin: "w", Slot: "w/0", ConfigIdentity: "new", Kind: "idle"},
		{Plugin: "w", Slot: "w/0", ConfigIdentity: "old", Kind: "finished", N: 7, TaskID: "t7", Iteration: &slotstate.Iteration{Outcome: "done"}},
		{Plugin: "w", Slot: "w/0", ConfigIdentity: "old", Kind: "draining"},
		{Plugin: "w", Slot: "w/0", ConfigIdentity: "old", Kind: "stopped"},
	} {
		slots.Observe(e)
	}
	if snap := slots.Snapshot(); len(snap) != 1 || snap[0].State != slotstate.Idle || snap[0].N != 0 {
		t.Fatalf("slots = %+v, want w/0 idle: the new version's state, not the old one's stop", snap)
	}
	slots.Observe(slotstate.Event{Plugin: "w", Slot: "w/0", ConfigIdentity: "new", Kind: "working", N: 1, TaskID: "t8", Phase: "handle"})
	if snap := slots.Snapshot(); snap[0].State != slotstate.Working || snap[0].TaskID != "t8" {
		t.Errorf("slots = %+v, want w/0 working on t8", snap)
	}
}

// TestRecentIterations: a slot keeps its last RecentIterations iterations, newest first,
// each with its outcome, duration and clipped reason; older ones are dropped, and other
// types' slots are not listed.
func TestRecentIterations(t *testing.T) {
	slots := NewTable()
	slots.Register(map[string]int{"w": 1, "v": 1})
	total := RecentIterations + 5
	for n := 1; n <= total; n++ {
		slots.Observe(slotstate.Event{Plugin: "w", Slot: "w/0", Kind: "working", N: n, TaskID: "t", Phase: "handle"})
		slots.Observe(slotstate.Event{Plugin: "w", Slot: "w/0", Kind: "finished", N: n, TaskID: "t", Iteration: &slotstate.Iteration{Outcome: "failed", Reason: strings.Repeat("x", 10*MaxReason), Duration: time.Duration(n) * time.Millisecond, Backoff: time.Duration(n) * time.Second}})
	}
	d := slots.Details("w")
	if len(d) != 1 || d[0].Slot != "w/0" || d[0].State != slotstate.Idle {
		t.Fatalf("details = %+v; want w/0 idle", d)
	}
	rec := d[0].Recent
	if len(rec) != RecentIterations {
		t.Fatalf("%d recent iterations kept; want %d", len(rec), RecentIterations)
	}
	for i, it := range rec {
		n := total - i
		if it.N != n || it.Outcome != "failed" || it.DurationMs != float64(n) || it.BackoffMs != float64(n)*1000 || it.EndedAt.IsZero() {
			t.Errorf("recent[%d] = %+v; want iteration %d, failed, %d ms, a %d s backoff", i, it, n, n, n)
		}
		if len(it.Reason) > MaxReason+32 {
			t.Errorf("recent[%d].Reason is %d bytes; want it clipped to about %d", i, len(it.Reason), MaxReason)
		}
	}
	if v := slots.Details("v"); len(v) != 1 || len(v[0].Recent) != 0 {
		t.Errorf("details of v = %+v; want its one slot with no iteration", v)
	}
}
