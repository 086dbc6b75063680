package host_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/primitives/memory"
)

// fleetRigs are n rigs of one plugin "p" (consuming p-q) on one backend b, each host
// named h<i>.
func fleetRigs(t *testing.T, b primitives.Backend, n int) []*rig {
	var rs []*rig
	for i := range n {
		r := rigOn(t, b)
		r.cfg.Instance = "h" + string(rune('0'+i))
		r.wat("done", "p", batchDescribe("p", "p-q", anyObject))
		rs = append(rs, r)
	}
	return rs
}

// pausedBy returns the pauses that hold p on h.
func pausedBy(h *host.Host) []host.Pause {
	for _, p := range h.Plugins() {
		if p.Type == "p" {
			return p.Pauses
		}
	}
	return nil
}

// TestPauseFleet: a fleet-wide pause asked of one host pauses the type on every host of
// the backend within about a poll, each says who paused it, and tasks submitted stay
// queued; a local resume leaves it paused; a host that starts while it is paused never
// claims; the fleet-wide resume has every host work the queue.
func TestPauseFleet(t *testing.T) {
	testutil.CheckGoroutines(t)
	b := memory.New(memory.Options{})
	t.Cleanup(func() { b.Close() })
	rs := fleetRigs(t, b, 3)
	h0, stop0 := rs[0].start()
	defer stop0()
	h1, stop1 := rs[1].start()
	defer stop1()
	waitFor(t, "both hosts idle", func() bool { return rs[0].events.Count(slotstate.Idle) > 0 && rs[1].events.Count(slotstate.Idle) > 0 })

	asked := time.Now()
	if err := h0.PauseFleet(context.Background(), "p", true); err != nil {
		t.Fatal(err)
	}
	for i, h := range []*host.Host{h0, h1} {
		testutil.WaitFor(t, 2*time.Second, "the slot of h"+string(rune('0'+i))+" to say paused", func() bool { return rs[i].events.Count(slotstate.Paused) > 0 })
		ps := pausedBy(h)
		if len(ps) != 1 || ps[0].Scope != host.ScopeFleet || ps[0].By != "h0" || ps[0].At.Before(asked.Add(-time.Second)) || ps[0].Queue != "" {
			t.Errorf("h%d: pauses of p = %+v, want one, fleet, by h0, at about %v", i, ps, asked)
		}
	}
	if time.Since(asked) > 2*time.Second {
		t.Errorf("the pause took %v to reach both hosts, want under 2s", time.Since(asked))
	}
	// A local resume is the local layer's: the fleet's pause stays in force.
	if err := h1.Resume("p"); err != nil {
		t.Fatal(err)
	}
	h2, stop2 := rs[2].start()
	defer stop2()
	waitFor(t, "the late host's slot to say paused", func() bool { return rs[2].events.Count(slotstate.Paused) > 0 })
	for range 4 {
		if _, err := h0.Submit(context.Background(), "p-q", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	// Every slot goes round its paused loop again after the submits, then the queue is
	// still whole: none claimed.
	counts := []int{rs[0].events.Count(slotstate.Paused), rs[1].events.Count(slotstate.Paused), rs[2].events.Count(slotstate.Paused)}
	waitFor(t, "every slot to poll paused again", func() bool {
		for i, r := range rs {
			if r.events.Count(slotstate.Paused) < counts[i]+2 {
				return false
			}
		}
		return true
	})
	if s := testutil.QueueStats(t, b, "p-q"); s.Depth != 4 || s.InFlight != 0 {
		t.Fatalf("a slot claimed while the type was paused fleet-wide: stats %+v", s)
	}
	if n := rs[2].events.Count(slotstate.Idle) + rs[2].events.Count(slotstate.Working); n != 0 {
		t.Errorf("the host started under the pause said idle or working %d times, want never", n)
	}

	if err := h2.PauseFleet(context.Background(), "p", false); err != nil {
		t.Fatal(err)
	}
	for i, h := range []*host.Host{h0, h1, h2} {
		testutil.WaitFor(t, 2*time.Second, "h"+string(rune('0'+i))+" to obey the resume", func() bool { return len(pausedBy(h)) == 0 })
	}
	waitFor(t, "the queue to be worked", func() bool {
		return len(rs[0].events.Finished(""))+len(rs[1].events.Finished(""))+len(rs[2].events.Finished("")) == 4
	})
}

// TestPauseQueue: a queue's pause is in force on every type consuming it, fleet-wide or on its
// host alone, and says the queue; a local and a fleet pause are two layers.
func TestPauseQueue(t *testing.T) {
	testutil.CheckGoroutines(t)
	b := memory.New(memory.Options{})
	t.Cleanup(func() { b.Close() })
	rs := fleetRigs(t, b, 2)
	h0, stop0 := rs[0].start()
	defer stop0()
	h1, stop1 := rs[1].start()
	defer stop1()
	ctx := context.Background()

	types, err := h0.PauseQueue(ctx, "p-q", true, true)
	if err != nil || len(types) != 1 || types[0] != "p" {
		t.Fatalf("PauseQueue(local) = %v, %v; want [p]", types, err)
	}
	if ps := pausedBy(h0); len(ps) != 1 || ps[0].Scope != host.ScopeLocal || ps[0].Queue != "p-q" {
		t.Errorf("h0 after a local queue pause: %+v, want one local pause of queue p-q", ps)
	}
	if _, err := h0.PauseQueue(ctx, "p-q", false, true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "h1 to obey the queue's fleet pause", func() bool { return len(pausedBy(h1)) == 1 })
	if ps := pausedBy(h1); ps[0].Scope != host.ScopeFleet || ps[0].Queue != "p-q" || ps[0].By != "h0" {
		t.Errorf("h1: %+v, want the fleet's pause of queue p-q by h0", ps)
	}
	if ps := pausedBy(h0); len(ps) != 2 || ps[0].Scope != host.ScopeFleet || ps[1].Scope != host.ScopeLocal {
		t.Errorf("h0: %+v, want the fleet's pause, then its own", ps)
	}
	if _, err := h1.PauseQueue(ctx, "p-q", false, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "h0 to obey the resume", func() bool { return len(pausedBy(h0)) == 1 })
	if ps := pausedBy(h0); ps[0].Scope != host.ScopeLocal {
		t.Errorf("h0 after the fleet's resume: %+v, want its local pause only", ps)
	}
}

// TestPauseNotHere: a pause of a type or a queue this host does not run is refused
// (ErrNotHere), so that a typo records nothing; a resume of one is refused unless its
// pause is recorded.
func TestPauseNotHere(t *testing.T) {
	rs := fleetRigs(t, memory.New(memory.Options{}), 1)
	h := rs[0].build()
	defer h.Close()
	ctx := context.Background()
	for _, err := range []error{
		h.PauseFleet(ctx, "pp", true),
		h.PauseFleet(ctx, "pp", false),
		func() error { _, err := h.PauseQueue(ctx, "nope", false, true); return err }(),
		func() error { _, err := h.PauseQueue(ctx, "nope", true, true); return err }(),
		func() error { _, err := h.PauseQueue(ctx, "nope", false, false); return err }(),
	} {
		if !errors.Is(err, host.ErrNotHere) {
			t.Errorf("act on what is not here = %v, want ErrNotHere", err)
		}
	}
}

// TestPauseFleetReload: a plugin that a reload loads while its queue is paused fleet-wide
// starts paused: its slot never says idle.
func TestPauseFleetReload(t *testing.T) {
	r := fleetRigs(t, memory.New(memory.Options{}), 1)[0]
	r.grant("p2", consumer("p-q"))
	h, stop := r.start()
	defer stop()
	if _, err := h.PauseQueue(context.Background(), "p-q", false, true); err != nil {
		t.Fatal(err)
	}
	watPlugin(t, r.dir, "done", "p2", batchDescribe("p2", "p-q", anyObject))
	if err := h.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	p2, ok := pluginOf(t, h, "p2")
	if !ok || len(p2.Pauses) != 1 || p2.Pauses[0].Scope != host.ScopeFleet || p2.Pauses[0].Queue != "p-q" {
		t.Fatalf("p2 after the reload = %+v (loaded %v), want it paused by the fleet's pause of p-q", p2.Pauses, ok)
	}
	waitFor(t, "p2's slot to say paused", func() bool {
		for _, e := range r.events.All() {
			if e.Plugin == "p2" && e.Kind == slotstate.Paused {
				return true
			}
		}
		return false
	})
	for _, e := range r.events.All() {
		if e.Plugin == "p2" && (e.Kind == slotstate.Idle || e.Kind == slotstate.Working) {
			t.Errorf("p2's slot said %s under the queue's pause", e.Kind)
		}
	}
}
