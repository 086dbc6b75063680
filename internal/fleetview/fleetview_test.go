package fleetview

import (
	"testing"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives/memory"
	"github.com/fleethost/fleet/primitives/redis"
)

func TestOutcomeOf(t *testing.T) {
	tests := []struct {
		name string
		it   slotstate.Iteration
		want Outcome
	}{
		{"acked", slotstate.Iteration{Outcome: slotstate.Done}, Done},
		{"retry refunds", slotstate.Iteration{Outcome: slotstate.Retried, HandBacks: 1}, Retried},
		{"cut by the drain", slotstate.Iteration{Outcome: slotstate.Cut, Death: "drain", HandBacks: 1}, Retried},
		{"fail spends", slotstate.Iteration{Outcome: slotstate.Failed}, Failed},
		{"parked", slotstate.Iteration{Outcome: slotstate.Parked, Parked: true}, Parked},
		{"death that parks", slotstate.Iteration{Outcome: slotstate.Died, Parked: true}, Parked},
		{"death", slotstate.Iteration{Outcome: slotstate.Died, Death: "trap"}, Died},
		{"lease lost", slotstate.Iteration{Outcome: slotstate.Died, Death: "lease", HandBacks: 1}, Died},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := OutcomeOf(&tc.it); got != tc.want {
				t.Errorf("OutcomeOf(%+v) = %v, want %v", tc.it, got, tc.want)
			}
		})
	}
}

// keeper is a Keeper of daemon d on b running one slot of typ at digest.
func keeper(b *memory.Backend, d, typ, digest string, c *Counter) *Keeper {
	plugins := []host.Plugin{{Type: typ, Version: "1.0.0", Digest: digest, Slots: 1, Consumes: &abi.QueueContract{Name: typ + "-q"}}}
	return NewKeeper(Params{
		Backend: b, Daemon: d, Instance: d, Version: "test", Counter: c, Refresh: time.Second,
		Plugins: func() []host.Plugin { return plugins },
		Slots:   func() []Slot { return []Slot{{Automation: typ, Slot: typ + "/0", State: slotstate.Idle}} },
	}, 1)
}

func TestReadTwoDaemons(t *testing.T) {
	b := memory.New(memory.Options{})
	ctx := t.Context()
	c1, c2 := &Counter{}, &Counter{}
	k1, k2 := keeper(b, "d1", "poller", "sha256:aaa", c1), keeper(b, "d2", "poller", "sha256:bbb", c2)
	fin := func(c *Counter, e slotstate.Event, n int) {
		e.Plugin, e.Kind = "poller", slotstate.Finished
		for range n {
			c.Observe(e)
		}
	}
	fin(c1, slotstate.Event{Iteration: &slotstate.Iteration{Outcome: slotstate.Done}}, 3)
	fin(c2, slotstate.Event{Iteration: &slotstate.Iteration{Outcome: slotstate.Done}}, 4)
	fin(c2, slotstate.Event{Iteration: &slotstate.Iteration{Outcome: slotstate.Parked, Parked: true}}, 1)
	c2.Observe(slotstate.Event{Plugin: "poller", Kind: slotstate.Idle}) // not counted
	k1.tick(ctx, false)
	k2.tick(ctx, false)
	k2.tick(ctx, false) // nothing new: adds nothing

	now := time.Now()
	f, err := Read(ctx, b, "d1", now)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Daemons) != 2 || f.Daemons[0].Name != "d1" || f.Daemons[1].Name != "d2" || f.Daemons[0].State != "live" {
		t.Fatalf("Daemons = %+v, want d1 and d2, live", f.Daemons)
	}
	if len(f.Diverging) != 1 || f.Diverging[0].Automation != "poller" || len(f.Diverging[0].Builds) != 2 {
		t.Errorf("Diverging = %+v, want poller with 2 builds", f.Diverging)
	}
	if len(f.Health.Automations) != 1 || len(f.Health.Queues) != 1 {
		t.Fatalf("Health = %+v, want one automation and one queue", f.Health)
	}
	for _, s := range []Series{f.Health.Automations[0], f.Health.Queues[0]} {
		if s.Total["done"] != 7 || s.Total["parked"] != 1 || s.Done[len(s.Done)-1] != 7 || s.Rate <= 0 {
			t.Errorf("series %s = totals %v, last minute done %d, rate %v; want done 7, parked 1 in the current minute", s.Name, s.Total, s.Done[len(s.Done)-1], s.Rate)
		}
	}
	if f.Health.Queues[0].Name != "poller-q" {
		t.Errorf("queue series %q, want poller-q", f.Health.Queues[0].Name)
	}

	f, err = Read(ctx, b, "d1", now.Add((StaleAfter+1)*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if f.Daemons[1].State != "stale" || len(f.Diverging) != 0 {
		t.Errorf("read 4 refreshes later: d2 %s, diverging %v; want stale and no divergence (stale daemons run nothing known)", f.Daemons[1].State, f.Diverging)
	}
	k2.tick(ctx, true)
	f, _ = Read(ctx, b, "d1", now)
	if f.Daemons[1].State != "stopped" {
		t.Errorf("after its last record d2 is %s, want stopped", f.Daemons[1].State)
	}
}

// BenchmarkCounterObserve is what a finished iteration pays for the health: a map read
// under a read lock and one atomic add, from every slot goroutine at once.
func BenchmarkCounterObserve(b *testing.B) {
	c := &Counter{}
	e := slotstate.Event{Plugin: "noop", Kind: slotstate.Finished, Iteration: &slotstate.Iteration{Outcome: slotstate.Done}}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Observe(e)
		}
	})
}

// TestReadAlerts: a refused reload on any daemon is an alert of every daemon's view,
// and a record that is not one this version reads is skipped, never fatal.
func TestReadAlerts(t *testing.T) {
	b := memory.New(memory.Options{})
	ctx := t.Context()
	plugins := []host.Plugin{{Type: "poller", Version: "1.0.0", Digest: "sha256:aaa", Slots: 1, ReloadError: "poller.wasm: abi: version mismatch"}}
	k := NewKeeper(Params{Backend: b, Daemon: "d1", Instance: "d1", Refresh: time.Second,
		Plugins: func() []host.Plugin { return plugins }, Slots: func() []Slot { return nil }}, 1)
	k.tick(ctx, false)
	if err := b.RosterPut(ctx, "junk@1", []byte(`not json`), time.Minute); err != nil {
		t.Fatal(err)
	}
	f, err := Read(ctx, b, "d2", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Daemons) != 1 || len(f.Alerts) != 1 || f.Alerts[0].Kind != "reload_refused" || f.Alerts[0].Subject != "poller" ||
		f.Alerts[0].Message != "a reload of poller was refused on d1: poller.wasm: abi: version mismatch" {
		t.Errorf("Read = daemons %+v, alerts %+v; want d1 only and its refused reload", f.Daemons, f.Alerts)
	}
}

// TestFlushSurvivesOutage: counts a flush could not write while Redis was down are
// written once it is back, with those counted meanwhile: none lost, none twice.
func TestFlushSurvivesOutage(t *testing.T) {
	srv := testutil.NewRedis(t)
	b, err := redis.Open(srv.URL(), redis.Options{CallTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	c := &Counter{}
	k := NewKeeper(Params{Backend: b, Daemon: "d1", Instance: "d1", Counter: c, Refresh: time.Second,
		Plugins: func() []host.Plugin { return nil }, Slots: func() []Slot { return nil }}, 1)
	done := slotstate.Event{Plugin: "poller", Kind: slotstate.Finished, Iteration: &slotstate.Iteration{Outcome: slotstate.Done}}
	ctx := t.Context()
	c.Observe(done)
	srv.Stop()
	k.tick(ctx, false) // fails: kept
	c.Observe(done)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	read := func() int64 {
		f, err := Read(ctx, b, "d1", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if len(f.Health.Automations) == 0 {
			return 0
		}
		return f.Health.Automations[0].Total["done"]
	}
	k.tick(ctx, false) // the kept flush
	if got := read(); got != 1 {
		t.Errorf("after the outage's flush: done = %d, want 1 (the one counted before it)", got)
	}
	k.tick(ctx, false)
	k.tick(ctx, false)
	if got := read(); got != 2 {
		t.Errorf("after two more flushes: done = %d, want 2", got)
	}
}
