package tests

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
)

// transport is one row of BenchmarkTransports: the same counter plugin in one language
// over one transport.
type transport struct {
	name, typ, queue, counter string
	build                     func(testing.TB) string // the .wasm's path
}

var transports = []transport{
	{"go", "counter", "count", "counter:done", func(tb testing.TB) string { return testutil.BuildPlugin(tb, "plugins/examples/counter") }},
	{"c", "counter-c", "count", "counter:done", func(tb testing.TB) string { return testutil.BuildC(tb, "guest-sdk/c/examples/counter") }},
	{"as", "as-counter", "as-count", "as-counter:done", func(tb testing.TB) string { return testutil.BuildAS(tb, "counter") }},
}

// BenchmarkTransports runs the same counter plugin (one counter_incr per task, then
// done) natively in Go (plugins/examples/counter), natively in C
// (guest-sdk/c/examples/counter) and over Extism in AssemblyScript
// (testdata/assemblyscript/counter.ts), one slot each, in one host on the memory backend
// and on a Redis that the benchmark starts. The three take turns in chunks of b.N/10
// tasks, the other two paused, so that a drift of the machine weighs on all alike
// (the Go and C counters share the queue "count"). Per transport t, side by side:
//
//	t-µs/task     the mean iteration: the guest's call, with its counter_incr, and the ack
//	t-tasks/s     tasks finished per second of wall time, one slot
//	t-x-native    its µs/task over the Go plugin's (the native call, the baseline)
//
//	go test -run '^$' -bench Transports -benchtime 2000x ./tests/
func BenchmarkTransports(b *testing.B) {
	for _, kind := range backendKinds {
		b.Run(kind, func(b *testing.B) {
			backend, _ := newBackend(b, kind)
			dir := b.TempDir()
			grants := map[string]host.Grant{}
			finished := map[string]chan slotstate.Event{}
			for _, t := range transports {
				copyWasm(b, t.build(b), dir, t.typ)
				grants[t.typ] = host.Grant{Queues: map[string][]string{t.queue: {"consume"}}, Counters: []string{t.counter}}
				finished[t.typ] = make(chan slotstate.Event, 1024)
			}
			h, err := host.New(context.Background(), host.Config{
				PluginsDir: dir, Backend: backend, CacheDir: cacheDir, Logger: slog.New(slog.DiscardHandler),
				Slots: 1, PollInterval: time.Millisecond, Grants: grants,
				Observe: func(e slotstate.Event) {
					if e.Kind == "finished" {
						finished[e.Plugin] <- e
					}
				},
			})
			if err != nil {
				b.Fatal(err)
			}
			for _, t := range transports {
				if err := h.Pause(t.typ); err != nil {
					b.Fatal(err)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			ran := make(chan error, 1)
			go func() { ran <- h.Run(ctx) }()
			defer func() {
				cancel()
				<-ran
				h.Close()
			}()
			busy := make([]time.Duration, len(transports)) // summed iteration durations
			wall := make([]time.Duration, len(transports))
			b.ResetTimer()
			for done := 0; done < b.N; {
				n := min(max(b.N/10, 1), b.N-done)
				for i, t := range transports {
					for range n {
						if _, _, err := backend.QueuePush(context.Background(), t.queue, []byte(`{}`), primitives.QueuePushOptions{}); err != nil {
							b.Fatal(err)
						}
					}
					start := time.Now()
					if err := h.Resume(t.typ); err != nil {
						b.Fatal(err)
					}
					for range n {
						e := (<-finished[t.typ]).Iteration
						if e.Outcome != "done" {
							b.Fatalf("%s: outcome %s: %s", t.typ, e.Outcome, e.Reason)
						}
						busy[i] += e.Duration
					}
					wall[i] += time.Since(start)
					if err := h.Pause(t.typ); err != nil {
						b.Fatal(err)
					}
				}
				done += n
			}
			b.StopTimer()
			for i, t := range transports {
				us := float64(busy[i].Microseconds()) / float64(b.N)
				b.ReportMetric(us, t.name+"-µs/task")
				b.ReportMetric(float64(b.N)/wall[i].Seconds(), t.name+"-tasks/s")
				b.ReportMetric(float64(busy[i])/float64(busy[0]), t.name+"-x-native")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}
