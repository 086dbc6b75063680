package host_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/primitives/memory"
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
