package schedule

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/primitives/memory"
	"github.com/fleethost/fleet/primitives/redis"
)

// newHost loads a batch plugin consuming the queue "jobs" (payload {"n": integer},
// required, no other field) into a host on b, with no slot: the tasks stay queued.
func newHost(t *testing.T, b primitives.Backend) *host.Host {
	t.Helper()
	d := abi.Describe{ABIVersion: abi.Version, Type: "a", Version: "0.1.0", Mode: abi.ModeBatch,
		Consumes: &abi.QueueContract{Name: "jobs", Payload: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false}`)}}
	wasm, err := os.ReadFile(testutil.WAT(t, testutil.GuestWAT{Describe: d, Result: `{"outcome":"done"}`}.Source(t)))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.wasm"), wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := host.New(context.Background(), host.Config{PluginsDir: dir, Backend: b, CacheDir: "off", SlotsByType: map[string]int{"a": 0},
		Grants: map[string]host.Grant{"a": {Queues: map[string][]string{"jobs": {"consume"}}}}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func depth(t *testing.T, b primitives.Backend) int {
	t.Helper()
	st, err := b.QueueStats(context.Background(), "jobs")
	if err != nil {
		t.Fatal(err)
	}
	return st.Depth
}

// daemonsOn returns n schedulers of the schedules doc on h and b: n daemons of a fleet.
func daemonsOn(t *testing.T, h *host.Host, b primitives.Backend, n int, doc string) []*Scheduler {
	t.Helper()
	ss, err := Parse("schedules.json", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if err := Check("schedules.json", ss, h); err != nil {
		t.Fatal(err)
	}
	var out []*Scheduler
	for i := range n {
		s := New(Params{Host: h, KV: b, Instance: "d" + string(rune('0'+i)), Log: slog.New(slog.DiscardHandler)})
		s.Set(ss)
		out = append(out, s)
	}
	return out
}

// Rounds run at injected times: three daemons fire each tick once between them, the
// first round of a schedule never fired fires nothing past, a restarted daemon (a new
// Scheduler) resumes from the record, and after ticks that no daemon ran "skip" fires
// the latest only.
func TestOncePerTickAcrossDaemons(t *testing.T) {
	ctx := context.Background()
	b := memory.New(memory.Options{})
	defer b.Close()
	h := newHost(t, b)
	ds := daemonsOn(t, h, b, 3, `{"tick": {"queue": "jobs", "every": "10s", "payload": {"n": 1}}}`)
	t0 := at("2025-01-02T03:04:05Z")
	for _, d := range ds {
		if next := d.round(ctx, t0); !next.Equal(at("2025-01-02T03:04:10Z")) {
			t.Errorf("round(t0) next = %v, want the next tick 03:04:10", next)
		}
	}
	if n := depth(t, b); n != 0 {
		t.Fatalf("depth after the first rounds = %d, want 0: a schedule never fired does not fire the past", n)
	}
	for i := 1; i <= 5; i++ {
		now := t0.Add(time.Duration(i)*10*time.Second - 5*time.Second) // on the tick
		for _, d := range ds {
			d.round(ctx, now)
		}
		if n := depth(t, b); n != i {
			t.Fatalf("depth after tick %d = %d, want %d: one task per tick", i, n, i)
		}
	}
	rec, ok, err := ds[0].record(ctx, "tick")
	if err != nil || !ok || rec.Tick != at("2025-01-02T03:04:50Z").Unix() || rec.TaskID == "" {
		t.Fatalf("record = %+v, %v, %v; want the tick 03:04:50 with its task", rec, ok, err)
	}

	// A daemon restarted mid-tick resumes from the record: nothing again.
	restarted := daemonsOn(t, h, b, 1, `{"tick": {"queue": "jobs", "every": "10s", "payload": {"n": 1}}}`)[0]
	restarted.round(ctx, at("2025-01-02T03:04:55Z"))
	if n := depth(t, b); n != 5 {
		t.Fatalf("depth after a restart = %d, want 5", n)
	}
	// Every daemon down for four ticks: skip fires the latest, once.
	late := at("2025-01-02T03:05:35Z")
	restarted.round(ctx, late)
	ds[1].round(ctx, late)
	if n := depth(t, b); n != 6 {
		t.Fatalf("depth after four missed ticks = %d, want 6: skip fires the latest only", n)
	}
	if rec, _, _ := ds[1].record(ctx, "tick"); rec.Tick != at("2025-01-02T03:05:30Z").Unix() {
		t.Errorf("record tick = %v, want 03:05:30", time.Unix(rec.Tick, 0).UTC())
	}
	sts, err := ds[2].List(ctx, late)
	if err != nil || len(sts) != 1 || !sts[0].Next.Equal(at("2025-01-02T03:05:40Z")) || sts[0].Last == nil || sts[0].Last.Tick != at("2025-01-02T03:05:30Z").Unix() {
		t.Errorf("List = %+v, %v; want next 03:05:40 and last 03:05:30", sts, err)
	}
}

// catch_up fires the missed ticks, the latest max_catch_up, once across daemons.
func TestCatchUpBounded(t *testing.T) {
	ctx := context.Background()
	b := memory.New(memory.Options{})
	defer b.Close()
	h := newHost(t, b)
	ds := daemonsOn(t, h, b, 2, `{"c": {"queue": "jobs", "every": "1m", "payload": {"n": 2}, "missed": "catch_up", "max_catch_up": 3}}`)
	t0 := at("2025-01-02T03:00:00Z")
	ds[0].round(ctx, t0)
	ds[0].round(ctx, t0.Add(time.Minute))
	if n := depth(t, b); n != 1 {
		t.Fatalf("depth = %d, want 1", n)
	}
	// Down for ten ticks; both daemons come back together.
	back := t0.Add(11*time.Minute + 30*time.Second)
	ds[1].round(ctx, back)
	ds[0].round(ctx, back)
	if n := depth(t, b); n != 4 {
		t.Fatalf("depth after ten missed ticks = %d, want 4: three caught up", n)
	}
}

// Check refuses a queue no plugin declares and a payload the queue's contract refuses,
// naming the file, the schedule and the field.
func TestCheckAgainstContracts(t *testing.T) {
	b := memory.New(memory.Options{})
	defer b.Close()
	h := newHost(t, b)
	tests := []struct{ doc, want string }{
		{`{"s": {"queue": "nope", "every": "1s", "payload": {"n": 1}}}`, `schedules: f.json: schedule "s": queue "nope": `},
		{`{"s": {"queue": "jobs", "every": "1s", "payload": {"n": "one"}}}`, `schedules: f.json: schedule "s": payload: refused by queue "jobs"'s contract: at "/n"`},
		{`{"s": {"queue": "jobs", "every": "1s", "payload": {"n": 1, "x": 2}}}`, `schedule "s": payload: refused by queue "jobs"'s contract`},
	}
	for _, tt := range tests {
		ss, err := Parse("f.json", []byte(tt.doc))
		if err != nil {
			t.Fatal(err)
		}
		if err := Check("f.json", ss, h); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Check(%s) = %v, want %q", tt.doc, err, tt.want)
		}
	}
}

// Start fires on the wall clock and its goroutine ends with ctx.
func TestStartFiresAndEnds(t *testing.T) {
	b := memory.New(memory.Options{})
	defer b.Close()
	h := newHost(t, b)
	s := daemonsOn(t, h, b, 1, `{"s": {"queue": "jobs", "every": "1s", "payload": {"n": 1}}}`)[0]
	ctx, cancel := context.WithCancel(context.Background())
	wait := s.Start(ctx)
	testutil.WaitFor(t, 10*time.Second, "two ticks fired", func() bool { return depth(t, b) >= 2 })
	cancel()
	wait()
}

// Hammer: eight daemons run every round at once, with a simultaneous start, on the memory
// backend and on a real Redis: each tick enqueues one task.
func TestHammerOncePerTick(t *testing.T) {
	for _, kind := range []string{"memory", "redis"} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			var b primitives.Backend = memory.New(memory.Options{})
			if kind == "redis" {
				rb, err := redis.Open(testutil.NewRedis(t).URL(), redis.Options{})
				if err != nil {
					t.Fatal(err)
				}
				b = rb
			}
			defer b.Close()
			h := newHost(t, b)
			const daemons, ticks = 8, 20
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(daemons / 2))
			ds := daemonsOn(t, h, b, daemons, `{"h": {"queue": "jobs", "every": "1s", "payload": {"n": 1}}}`)
			t0 := at("2025-01-02T03:04:05Z")
			for i := range ticks + 1 {
				now := t0.Add(time.Duration(i) * time.Second)
				start := make(chan struct{})
				var wg sync.WaitGroup
				for _, d := range ds {
					wg.Go(func() {
						<-start
						d.round(ctx, now)
					})
				}
				close(start)
				wg.Wait()
			}
			if n := depth(t, b); n != ticks {
				t.Errorf("depth after %d ticks on %d daemons = %d, want %d", ticks, daemons, n, ticks)
			}
		})
	}
}
