package host_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/primitives/memory"
	fleetredis "github.com/fleethost/fleet/primitives/redis"
)

// BenchmarkThroughput runs b.N tasks through the example plugins on the memory backend,
// end to end: claim, fleet_input + fleet_handle (and the plugin's host calls), ack.
// noop makes no host call; counter makes one (counter_incr).
func BenchmarkThroughput(b *testing.B) {
	for _, plugin := range []struct{ name, queue, payload string }{
		{"wat-done", "done-q", `{}`}, {"goguest-incr", goQueue, `{"op":"incr"}`},
		{"noop", "noop", `{}`}, {"counter", "count", `{}`},
	} {
		for _, slots := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/slots=%d", plugin.name, slots), func(b *testing.B) {
				dir := b.TempDir()
				switch plugin.name {
				case "wat-done":
					watPluginTB(b, dir, "done", "done", batchDescribe("done", "done-q", anyObject))
				case "goguest-incr":
					copyPluginTB(b, buildTB(b, "host/testdata/goguest"), dir, "goguest")
				default:
					copyPluginTB(b, buildTB(b, "plugins/examples/"+plugin.name), dir, plugin.name)
				}
				backend := memory.New(memory.Options{})
				defer backend.Close()
				var done atomic.Int64
				h, err := host.New(context.Background(), host.Config{
					PluginsDir: dir, Backend: backend, CacheDir: cacheDir, Slots: slots,
					PollInterval: time.Millisecond, Logger: discardLogger(),
					Grants: map[string]host.Grant{"done": consumer("done-q"), "goguest": consumer(goQueue),
						"noop": consumer("noop"), "counter": consumer("count")},
					Observe: func(e slotstate.Event) {
						if e.Kind == "finished" {
							done.Add(1)
						}
					},
				})
				if err != nil {
					b.Fatal(err)
				}
				defer h.Close()
				runTasks(b, h, backend, plugin.queue, plugin.payload, &done)()
			})
		}
	}
}

// runTasks pushes b.N tasks of payload to queue, then times h running them until done
// counts b.N finished iterations, and reports tasks/s. It returns the stop of h's Run,
// which the caller calls once it has read what it measures.
func runTasks(b *testing.B, h *host.Host, backend primitives.Backend, queue, payload string, done *atomic.Int64) (stop func()) {
	b.Helper()
	for range b.N {
		if _, _, err := backend.QueuePush(context.Background(), queue, []byte(payload), primitives.QueuePushOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	b.ResetTimer()
	go func() { ran <- h.Run(ctx) }()
	for done.Load() < int64(b.N) {
		time.Sleep(100 * time.Microsecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
	return func() {
		cancel()
		if err := <-ran; err != nil {
			b.Fatal(err)
		}
	}
}

// reporterTurn is how many tasks each side of BenchmarkReporter runs before the other side
// takes its turn: enough that a turn's first and last tasks are a small part of it, few
// enough that both sides meet the machine of the same second or so.
const reporterTurn = 2000

// BenchmarkReporter is the reporter's share of the hot path: no-op tasks of the Go no-op
// plugin (plugins/examples/noop) on 2 slots whose reporters send to a plane (newPlane: a
// real HTTP server on loopback, in this process, that decodes every report into the
// plane's wire types), against the same with no reporter, on memory and on a Redis the
// benchmark starts. The two sides take turns of reporterTurn tasks in one run (b.N tasks
// each), the side that goes first swapping each round; each turn is a host of its own on
// a fresh backend, its tasks pushed before it runs and timed from its first finished task
// to its last. It reports:
//
//   - ns/op: the reporting side's ns/task; none-ns/task: the other side's;
//   - x-none: the two's ratio over the run; x-none-median: the median of the rounds'
//     ratios;
//   - posts/task and dropped/task: what the reporters POSTed and what they dropped on a
//     full queue, per task.
//
// A slot sends a report as each task begins (its working state, carrying the records of
// the tasks finished since), and one reporter's POSTs go one at a time, at most one per
// 10 ms unless half its queue is used, each carrying every report queued since the last:
// the queue fills and Send drops, by design (reporter.Reporter), only when 64 reports
// queue behind one POST.
//
//	go test -run '^$' -bench Reporter -benchtime 8000x ./host/
func BenchmarkReporter(b *testing.B) {
	// A reporter logs its drops to slog's default logger, between the benchmark's lines.
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(discardLogger())
	wasm := buildTB(b, "plugins/examples/noop")
	b.Run("memory", func(b *testing.B) {
		reporterShare(b, wasm, func() primitives.Backend { return memory.New(memory.Options{}) })
	})
	b.Run("redis", func(b *testing.B) {
		srv := testutil.NewRedis(b)
		reporterShare(b, wasm, func() primitives.Backend {
			srv.Flush(b)
			be, err := fleetredis.Open(srv.URL(), fleetredis.Options{})
			if err != nil {
				b.Fatal(err)
			}
			return be
		})
	})
}

// reporterShare runs BenchmarkReporter's turns on the backends that fresh makes, one a turn.
func reporterShare(b *testing.B, wasm string, fresh func() primitives.Backend) {
	pl := newPlane(b, false)
	var with, without time.Duration
	var ratios []float64
	var posts, dropped int64
	done := 0 // tasks each side ran
	for round := 0; done < b.N; round++ {
		n := max(2, min(reporterTurn, b.N-done)) // a turn times the n-1 tasks after its first
		var r, none time.Duration
		for i := range 2 {
			if (i+round)%2 == 0 {
				var d int64
				before := pl.requests.Load()
				r, d = reporterTurnOf(b, wasm, fresh(), pl, n)
				posts += pl.requests.Load() - before
				dropped += d
			} else {
				none, _ = reporterTurnOf(b, wasm, fresh(), nil, n)
			}
		}
		with, without = with+r, without+none
		ratios = append(ratios, float64(r)/float64(none))
		done += n
	}
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(done) }
	b.ReportMetric(per(with), "ns/op")
	b.ReportMetric(per(without), "none-ns/task")
	b.ReportMetric(float64(with)/float64(without), "x-none")
	slices.Sort(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "x-none-median")
	b.ReportMetric(float64(posts)/float64(done), "posts/task")
	b.ReportMetric(float64(dropped)/float64(done), "dropped/task")
}

// reporterTurnOf runs n no-op tasks through a host on be, its slots reporting to pl (nil:
// no reporter), and returns the time from its first finished task to its last, scaled to
// n tasks, and what its reporters dropped.
func reporterTurnOf(b *testing.B, wasm string, be primitives.Backend, pl *plane, n int) (time.Duration, int64) {
	b.Helper()
	defer be.Close()
	dir := b.TempDir()
	copyPluginTB(b, wasm, dir, "noop")
	var finished, first atomic.Int64 // first: the first finished task's time, in Unix ns
	last := make(chan time.Time, 1)
	cfg := host.Config{
		PluginsDir: dir, Backend: be, CacheDir: cacheDir, Slots: 2,
		PollInterval: time.Millisecond, Logger: discardLogger(),
		Grants: map[string]host.Grant{"noop": consumer("noop")},
		Observe: func(e slotstate.Event) {
			if e.Kind != slotstate.Finished {
				return
			}
			now := time.Now()
			first.CompareAndSwap(0, now.UnixNano()) // before the count: set once the n-th counts
			if finished.Add(1) == int64(n) {
				last <- now
			}
		},
	}
	if pl != nil {
		cfg.NewReporter = pl.newReporter
	}
	h, err := host.New(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	for range n {
		if _, _, err := be.QueuePush(context.Background(), "noop", []byte(`{}`), primitives.QueuePushOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- h.Run(ctx) }()
	end := <-last
	cancel()
	if err := <-ran; err != nil {
		b.Fatal(err)
	}
	took := end.Sub(time.Unix(0, first.Load())) * time.Duration(n) / time.Duration(n-1)
	return took, int64(h.ReporterDropped())
}
