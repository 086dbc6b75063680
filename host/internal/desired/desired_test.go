package desired_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleethost/fleet/host/internal/desired"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/primitives/memory"
	fleetredis "github.com/fleethost/fleet/primitives/redis"
)

var srv *testutil.Redis

func TestMain(m *testing.M) {
	var err error
	if srv, err = testutil.StartRedis(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	srv.Close()
	os.Exit(code)
}

// backends runs f against the memory backend and a real Redis, each fresh.
func backends(t *testing.T, f func(t *testing.T, b primitives.Backend)) {
	t.Run("memory", func(t *testing.T) {
		b := memory.New(memory.Options{})
		t.Cleanup(func() { _ = b.Close() })
		f(t, b)
	})
	t.Run("redis", func(t *testing.T) {
		srv.Flush(t)
		b, err := fleetredis.Open(srv.URL(), fleetredis.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		f(t, b)
	})
}

func pause(by string) *desired.Pause {
	return &desired.Pause{By: by, At: time.Now().UTC().Truncate(time.Millisecond)}
}

// TestUpdateRead: no record reads as the zero State; each Update bumps Version and is
// what Read returns; a type is paused by its own entry, else by its queue's; a resume
// removes the entry.
func TestUpdateRead(t *testing.T) {
	backends(t, func(t *testing.T, b primitives.Backend) {
		ctx := context.Background()
		s, err := desired.Read(ctx, b)
		if err != nil || s.Version != 0 || len(s.Types)+len(s.Queues) != 0 {
			t.Fatalf("Read(empty) = %+v, %v; want the zero State", s, err)
		}
		p := pause("host-a")
		if _, err := desired.Update(ctx, b, func(s *desired.State) error { return s.Set(desired.Types, "poller", p) }); err != nil {
			t.Fatal(err)
		}
		w, err := desired.Update(ctx, b, func(s *desired.State) error { return s.Set(desired.Queues, "jobs", p) })
		if err != nil {
			t.Fatal(err)
		}
		s, err = desired.Read(ctx, b)
		if err != nil || s.Version != 2 || w.Version != 2 {
			t.Fatalf("Read after two updates = %+v, %v (Update said version %d); want version 2", s, err, w.Version)
		}
		tests := []struct {
			typ, queue    string
			ofQueue, want bool
		}{
			{"poller", "", false, true},
			{"poller", "jobs", false, true}, // its own entry first
			{"worker", "jobs", true, true},
			{"worker", "other", false, false},
			{"worker", "", false, false},
		}
		for _, tt := range tests {
			got, ofQueue, ok := s.Paused(tt.typ, tt.queue)
			if ok != tt.want || ofQueue != tt.ofQueue || (ok && (got.By != p.By || !got.At.Equal(p.At))) {
				t.Errorf("Paused(%q, %q) = %+v, %v, %v; want %v, %v by %s", tt.typ, tt.queue, got, ofQueue, ok, tt.ofQueue, tt.want, p.By)
			}
		}
		if _, err := desired.Update(ctx, b, func(s *desired.State) error { return s.Set(desired.Types, "poller", nil) }); err != nil {
			t.Fatal(err)
		}
		if s, _ = desired.Read(ctx, b); s.Version != 3 || len(s.Types) != 0 || len(s.Queues) != 1 {
			t.Errorf("Read after the resume = %+v; want version 3, no type, queue jobs", s)
		}
	})
}

// TestRedisRecord: on Redis the record is the one KV key KEYS.md names, JSON, with no
// expiry (it is bounded by MaxEntries instead).
func TestRedisRecord(t *testing.T) {
	srv.Flush(t)
	b, err := fleetredis.Open(srv.URL(), fleetredis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := desired.Update(context.Background(), b, func(s *desired.State) error { return s.Set(desired.Types, "poller", pause("host-a")) }); err != nil {
		t.Fatal(err)
	}
	const key = "fleet:kv:{fleet-desired}[fleet-desired]state"
	c := srv.Client()
	defer c.Close()
	raw, err := c.Get(context.Background(), key).Bytes()
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	var s desired.State
	if err := json.Unmarshal(raw, &s); err != nil || s.Version != 1 || s.Types["poller"].By != "host-a" {
		t.Errorf("GET %s = %s (%v), want version 1 and poller by host-a", key, raw, err)
	}
	if ttl := c.PTTL(context.Background(), key).Val(); ttl != -1 {
		t.Errorf("PTTL %s = %v, want none (-1)", key, ttl)
	}
}

// TestUpdateHammer: P operators pausing N types each at once all land: the lock
// serialises their read-modify-writes, so no act overwrites another's.
func TestUpdateHammer(t *testing.T) {
	const P, N = 8, 5
	backends(t, func(t *testing.T, b primitives.Backend) {
		ctx := context.Background()
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make(chan error, P*N)
		for g := range P {
			wg.Go(func() {
				<-start
				for i := range N {
					name := fmt.Sprintf("t%d-%d", g, i)
					_, err := desired.Update(ctx, b, func(s *desired.State) error { return s.Set(desired.Types, name, pause(name)) })
					errs <- err
				}
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		s, err := desired.Read(ctx, b)
		if err != nil || s.Version != P*N || len(s.Types) != P*N {
			t.Errorf("after %d acts: version %d, %d types (%v); want %d and %d", P*N, s.Version, len(s.Types), err, P*N, P*N)
		}
	})
}

// TestMaxEntries: a new entry past MaxEntries is refused, naming the bound, and nothing
// is written; a resume or a change of an entry already there still lands.
func TestMaxEntries(t *testing.T) {
	backends(t, func(t *testing.T, b primitives.Backend) {
		ctx := context.Background()
		_, err := desired.Update(ctx, b, func(s *desired.State) error {
			for i := range desired.MaxEntries {
				if err := s.Set(desired.Queues, fmt.Sprint("q", i), pause("a")); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		_, err = desired.Update(ctx, b, func(s *desired.State) error { return s.Set(desired.Queues, "one-more", pause("a")) })
		if err == nil || !strings.Contains(err.Error(), fmt.Sprint(desired.MaxEntries)) {
			t.Errorf("Update past the bound = %v, want an error naming %d", err, desired.MaxEntries)
		}
		if s, _ := desired.Read(ctx, b); s.Version != 1 {
			t.Errorf("version after a refused act = %d, want 1 (nothing written)", s.Version)
		}
		for _, p := range []*desired.Pause{pause("b"), nil} {
			if _, err := desired.Update(ctx, b, func(s *desired.State) error { return s.Set(desired.Queues, "q0", p) }); err != nil {
				t.Errorf("Update of an entry already there (%v) = %v", p, err)
			}
		}
	})
}

// TestWatch: two watchers on one backend (two daemons) each apply an act within a few
// polls, and apply nothing while the record does not change.
func TestWatch(t *testing.T) {
	backends(t, func(t *testing.T, b primitives.Backend) {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		defer wg.Wait()
		defer cancel()
		type watcher struct {
			mu      sync.Mutex
			applied []desired.State
		}
		ws := []*watcher{{}, {}}
		for _, w := range ws {
			wg.Go(func() {
				desired.Watch(ctx, b, 10*time.Millisecond, 0, func(s desired.State) {
					w.mu.Lock()
					defer w.mu.Unlock()
					w.applied = append(w.applied, s)
				}, slog.New(slog.DiscardHandler))
			})
		}
		if _, err := desired.Update(ctx, b, func(s *desired.State) error { return s.Set(desired.Types, "poller", pause("host-a")) }); err != nil {
			t.Fatal(err)
		}
		for i, w := range ws {
			testutil.WaitFor(t, 2*time.Second, fmt.Sprintf("watcher %d to apply the pause", i), func() bool {
				w.mu.Lock()
				defer w.mu.Unlock()
				return len(w.applied) > 0
			})
		}
		// A further act is the next State each applies: none was applied twice between.
		if _, err := desired.Update(ctx, b, func(s *desired.State) error { return s.Set(desired.Types, "poller", nil) }); err != nil {
			t.Fatal(err)
		}
		for i, w := range ws {
			testutil.WaitFor(t, 2*time.Second, fmt.Sprintf("watcher %d to apply the resume", i), func() bool {
				w.mu.Lock()
				defer w.mu.Unlock()
				return len(w.applied) > 1
			})
			w.mu.Lock()
			if len(w.applied) != 2 || w.applied[0].Version != 1 || w.applied[1].Version != 2 || len(w.applied[1].Types) != 0 {
				t.Errorf("watcher %d applied %+v, want version 1 then 2 (resumed), once each", i, w.applied)
			}
			w.mu.Unlock()
		}
	})
}

// countingKV counts the reads Watch makes of a real backend, so that a test can wait for
// polls rather than sleep through them.
type countingKV struct {
	primitives.KV
	reads atomic.Int64
}

func (c *countingKV) KVGet(ctx context.Context, ns, key string) ([]byte, bool, error) {
	defer c.reads.Add(1)
	return c.KV.KVGet(ctx, ns, key)
}

// TestWatchBackendDown: while Redis is down Watch keeps the last State (applies nothing)
// and says so once, however many polls fail; once Redis is back it says so once and
// applies the next act.
func TestWatchBackendDown(t *testing.T) {
	own := testutil.NewRedis(t)
	b, err := fleetredis.Open(own.URL(), fleetredis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	kv := &countingKV{KV: b}
	logs := &testutil.LogBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	var applied atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		desired.Watch(ctx, kv, 10*time.Millisecond, 0, func(s desired.State) { applied.Store(s.Version) }, slog.New(slog.NewTextHandler(logs, nil)))
	}()
	defer func() { cancel(); <-done }()

	own.Stop()
	from := kv.reads.Load()
	testutil.WaitFor(t, 30*time.Second, "five failed polls", func() bool { return kv.reads.Load() >= from+5 })
	if n := strings.Count(logs.String(), "cannot read the fleet's desired state"); n != 1 {
		t.Errorf("%d warnings over the failed polls, want 1:\n%s", n, logs.String())
	}
	if err := own.Start(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 30*time.Second, "Redis back", func() bool { return b.Ping(context.Background()) == nil })
	if _, err := desired.Update(context.Background(), b, func(s *desired.State) error { return s.Set(desired.Types, "poller", pause("a")) }); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 30*time.Second, "the act after the outage applied", func() bool { return applied.Load() == 1 })
	if n := strings.Count(logs.String(), "reading the fleet's desired state again"); n != 1 {
		t.Errorf("%d recoveries logged, want 1:\n%s", n, logs.String())
	}
}
