package tests

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/primitives"
)

// BenchmarkIsolation measures what a worker process (Config.Isolate "process") costs
// over the same plugin in the daemon, side by side in one run, on the memory backend and
// on a Redis that the benchmark starts (each mode on a backend of its own, taking turns
// in chunks of b.N/10, so that a drift of the machine weighs on both alike):
//
//	host-call   the bench guest's kv_get, raw (testdata/benchguest), b.N calls in tasks
//	            of b.N/10 calls: per call, in the daemon (inproc-ns/call), in a worker
//	            (worker-ns/call), and what the worker adds (added-µs/call; the goal:
//	            at most 10)
//	no-op-task  a guest whose fleet_handle returns done at once (engineWASM), b.N tasks:
//	            the mean iteration (the call and its ack) in each mode (inproc-µs/task,
//	            worker-µs/task), and their ratio (x-inproc; the goal on Redis: at most
//	            1.2)
//
//	go test -run '^$' -bench Isolation -benchtime 2000x ./tests/
func BenchmarkIsolation(b *testing.B) {
	worker := workerCommand(b)
	for _, kind := range backendKinds {
		b.Run(kind+"/host-call", func(b *testing.B) {
			envs := []*benchEnv{newBenchEnvIn(b, kind, nil), newBenchEnvIn(b, kind, worker)}
			var took [2]time.Duration
			b.ResetTimer()
			for done := 0; done < b.N; {
				n := min(max(b.N/benchChunks, 1), b.N-done)
				for i, env := range envs {
					took[i] += env.guest(b, "kv_get", "raw", "", n)
				}
				done += n
			}
			in, out := float64(took[0].Nanoseconds())/float64(b.N), float64(took[1].Nanoseconds())/float64(b.N)
			b.ReportMetric(in, "inproc-ns/call")
			b.ReportMetric(out, "worker-ns/call")
			b.ReportMetric((out-in)/1e3, "added-µs/call")
			b.ReportMetric(0, "ns/op")
		})
		b.Run(kind+"/no-op-task", func(b *testing.B) {
			envs := []*noopEnv{newNoopEnv(b, kind, nil), newNoopEnv(b, kind, worker)}
			var took [2]time.Duration
			b.ResetTimer()
			for done := 0; done < b.N; {
				n := min(max(b.N/benchChunks, 1), b.N-done)
				for i, env := range envs {
					took[i] += env.run(b, n)
				}
				done += n
			}
			in, out := float64(took[0].Microseconds())/float64(b.N), float64(took[1].Microseconds())/float64(b.N)
			b.ReportMetric(in, "inproc-µs/task")
			b.ReportMetric(out, "worker-µs/task")
			b.ReportMetric(out/in, "x-inproc")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// noopEnv is a host running the no-op guest in one slot, paused between turns.
type noopEnv struct {
	backend  primitives.Backend
	host     *host.Host
	finished chan slotstate.Event
}

func newNoopEnv(b *testing.B, kind string, worker []string) *noopEnv {
	b.Helper()
	backend, _ := newBackend(b, kind)
	dir := b.TempDir()
	copyWasm(b, engineWASM(b, "noop", "", ""), dir, "noop")
	env := &noopEnv{backend: backend, finished: make(chan slotstate.Event, 1024)}
	cfg := host.Config{
		PluginsDir: dir, Backend: backend, CacheDir: cacheDir, Logger: slog.New(slog.DiscardHandler),
		Slots: 1, PollInterval: time.Millisecond,
		Grants: map[string]host.Grant{"noop": {Queues: map[string][]string{"noop": {"consume"}}}},
	}
	env.host = startBenchHost(b, cfg, worker, env.finished)
	// No task is queued yet: the slot waits, paused, for the first turn (run).
	if err := env.host.Pause("noop"); err != nil {
		b.Fatal(err)
	}
	return env
}

// run queues n tasks, lets the slot work them, and returns the sum of their iterations'
// durations (the guest's call and the ack).
func (env *noopEnv) run(b *testing.B, n int) time.Duration {
	b.Helper()
	for range n {
		if _, _, err := env.backend.QueuePush(context.Background(), "noop", []byte(`{}`), primitives.QueuePushOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	if err := env.host.Resume("noop"); err != nil {
		b.Fatal(err)
	}
	var busy time.Duration
	for range n {
		e := (<-env.finished).Iteration
		if e.Outcome != "done" {
			b.Fatal(fmt.Sprintf("noop: outcome %s: %s", e.Outcome, e.Reason))
		}
		busy += e.Duration
	}
	if err := env.host.Pause("noop"); err != nil {
		b.Fatal(err)
	}
	return busy
}
