package tests

import (
	"context"
	"testing"
	"time"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
)

// The honest neighbour of every hostile case: the counter example plugin, which adds 1 to
// honestCounter per task of honestQueue.
const (
	honestQueue   = "count"
	honestCounter = "counter:done"
)

// sandbox is one host on a real backend that runs a hostile plugin beside the honest
// counter plugin, so that a hostile test proves two things: the hostile guest is stopped
// or refused, and the honest plugin keeps completing its tasks meanwhile.
//
//	r := newSandbox(t, "memory")
//	r.install(t, testutil.WAT(t, src), "spin")
//	r.cfg.CallTimeout = time.Second
//	r.start(t)
//	r.honestCompletes(t, 50)
type sandbox struct {
	cfg    host.Config           // set by newSandbox; tests may change it before start
	grants map[string]host.Grant // cfg.Grants; set entries before start
	dir    string                // the plugins folder
	b      primitives.Backend
	ev     *testutil.SlotEvents
	h      *host.Host // set by start
}

// newSandbox makes the plugins folder with the honest counter plugin in it, granted its
// queue, on a fresh backend of kind ("memory" or "redis"; "process" is memory with every
// plugin in a worker process, the honest one the C counter), and a Config with two slots per
// plugin, a short poll interval, the shared compilation cache and the test's logger. A
// hostile plugin needs a grant of its own in r.grants for what it declares.
func newSandbox(t *testing.T, kind string) *sandbox {
	t.Helper()
	r := newEmptySandbox(t, kind)
	if kind == "process" {
		// The C counter (counter-c), which counts the same queue in the same counter: a
		// worker has no compilation cache, and the Go counter takes seconds to compile.
		r.grants["counter-c"] = host.Grant{Queues: map[string][]string{honestQueue: {"consume"}}, Counters: []string{honestCounter}}
		copyWasm(t, testutil.BuildC(t, "guest-sdk/c/examples/counter"), r.dir, "counter-c")
		return r
	}
	r.grants["counter"] = host.Grant{Queues: map[string][]string{honestQueue: {"consume"}}}
	installPlugin(t, "plugins/examples/counter", r.dir, "counter")
	return r
}

// newEmptySandbox is newSandbox without the honest plugin, for a test of the plugins it
// installs itself.
func newEmptySandbox(t *testing.T, kind string) *sandbox {
	t.Helper()
	b, _ := newBackend(t, kind)
	r := &sandbox{dir: t.TempDir(), b: b, ev: &testutil.SlotEvents{}, grants: map[string]host.Grant{}}
	r.cfg = host.Config{
		PluginsDir:   r.dir,
		Backend:      b,
		Slots:        2,
		Grants:       r.grants,
		CacheDir:     cacheDir,
		Logger:       testLogger(t),
		PollInterval: 10 * time.Millisecond,
		// A failed task comes back within milliseconds: the tests that park by failing
		// wait out the backoff of each attempt.
		RetryBackoff: primitives.Backoff{Base: time.Millisecond, Factor: 2, Max: 10 * time.Millisecond},
		Observe:      r.ev.Observe,
	}
	isolate(t, kind, &r.cfg)
	return r
}

// isolate has cfg run every plugin in a worker process when kind is "process".
func isolate(tb testing.TB, kind string, cfg *host.Config) {
	if kind == "process" {
		cfg.Isolate, cfg.WorkerCommand = host.IsolateProcess, workerCommand(tb)
	}
}

// workerCommand is the fleet-host binary's worker subcommand, a worker's command.
func workerCommand(tb testing.TB) []string {
	tb.Helper()
	bin, err := testutil.FleetHost(false)
	if err != nil {
		tb.Fatal(err)
	}
	return []string{bin, "worker"}
}

// install copies the wasm file at path into the plugins folder as <name>.wasm. Call it
// before start.
func (r *sandbox) install(t *testing.T, path, name string) {
	t.Helper()
	copyWasm(t, path, r.dir, name)
}

// start runs the host until the test ends.
func (r *sandbox) start(t *testing.T) {
	t.Helper()
	r.h, _ = startHost(t, r.cfg)
}

// honestCompletes submits n tasks to the honest plugin and waits until the counter has
// counted every one of them and its queue has acked them all (a task's ack follows its
// count), failing the test otherwise. It returns the honest plugin's
// throughput over those tasks, in tasks per second: a figure to log beside the hostile
// neighbour, never one to assert on.
func (r *sandbox) honestCompletes(t *testing.T, n int) float64 {
	t.Helper()
	ctx := context.Background()
	before, err := r.b.CounterGet(ctx, honestCounter)
	if err != nil {
		t.Fatalf("CounterGet(%s) = %v", honestCounter, err)
	}
	start := time.Now()
	for range n {
		if _, err := r.h.Submit(ctx, honestQueue, []byte(`{}`)); err != nil {
			t.Fatalf("Submit(%s) = %v", honestQueue, err)
		}
	}
	waitFor(t, "the honest plugin completes its tasks", func() bool {
		v, err := r.b.CounterGet(ctx, honestCounter)
		if err != nil || v < before+int64(n) {
			return false
		}
		q, err := r.b.QueueStats(ctx, honestQueue)
		return err == nil && q == primitives.QueueStats{}
	})
	rate := float64(n) / time.Since(start).Seconds()
	t.Logf("honest neighbour: %d tasks at %.0f tasks/s", n, rate)
	return rate
}

// TestSandboxBaseline is the honest plugin alone in the sandbox rig: the throughput that
// each hostile test's neighbour figure is read against.
func TestSandboxBaseline(t *testing.T) {
	for _, kind := range sandboxKinds {
		t.Run(kind, func(t *testing.T) {
			r := newSandbox(t, kind)
			r.start(t)
			r.honestCompletes(t, 50)
		})
	}
}
