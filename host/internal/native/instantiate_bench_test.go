package native

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/fleethost/fleet/internal/testutil"
)

// BenchmarkInstantiate makes b.N instances of the Go no-op plugin (plugins/examples/noop)
// in one runtime under the host's default memory limit, holding each, as b.N slots of a
// daemon hold theirs: ns/op is the time until an instance is ready (instantiated and its
// _initialize run: what a slot waits at start-up and after a death). PSS-MiB/instance is
// what the live instances add to the process's proportional resident memory, over b.N
// (smaps_rollup's Pss, after a GC that returns what it can to the system): a page of the
// memory image that n instances map counts 1/n in each. RSS-MiB/instance is the same of
// Rss, which counts such a page in full once per instance that maps it, so it overstates
// what the instances take from the machine. Each instance then handles one task, as a
// slot's first, and after-task-PSS-MiB/instance and after-task-RSS-MiB/instance are the
// two after it; after-task-heap-KiB/instance is what the instances then hold of the Go
// heap (HeapAlloc after a GC): wazero's structures of each and the host's.
//
//	go test -run '^$' -bench Instantiate -benchtime 100x ./host/internal/native/
func BenchmarkInstantiate(b *testing.B) {
	rt := newTestRuntime(b, readFile(b, testutil.BuildPlugin(b, "plugins/examples/noop")), Params{MemoryLimitPages: 256, Cache: benchCache(b)})
	ctx := context.Background()
	instances := make([]*Instance, 0, b.N)
	before := residentMemory(b)
	b.ResetTimer()
	var elapsed time.Duration
	for i := range b.N {
		name := fmt.Sprintf("noop/%d", i)
		start := time.Now()
		instances = append(instances, newTestInstanceOf(b, rt, name))
		elapsed += time.Since(start)
	}
	b.StopTimer()
	held := residentMemory(b)
	input := []byte(`{"task":{"id":"t","payload":{},"attempts":1,"enqueued_at_ms":1},"iteration":1}`)
	for _, in := range instances {
		if _, err := in.Handle(ctx, input); err != nil {
			b.Fatal(err)
		}
	}
	worked := residentMemory(b)
	for _, in := range instances {
		in.Close(ctx)
	}
	perInstance := func(bytes int64) float64 { return float64(bytes) / (1 << 20) / float64(b.N) }
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(b.N), "ns/op")
	b.ReportMetric(perInstance(held.pss-before.pss), "PSS-MiB/instance")
	b.ReportMetric(perInstance(held.rss-before.rss), "RSS-MiB/instance")
	b.ReportMetric(perInstance(worked.pss-before.pss), "after-task-PSS-MiB/instance")
	b.ReportMetric(perInstance(worked.rss-before.rss), "after-task-RSS-MiB/instance")
	b.ReportMetric(perInstance(worked.heap-before.heap)*1024, "after-task-heap-KiB/instance")
}

type resident struct{ rss, pss, heap int64 }

// residentMemory is this process's Rss and Pss (smaps_rollup) and its Go heap's live
// bytes, after a GC that returns freed memory to the system, so that what they count is
// live.
func residentMemory(tb testing.TB) resident {
	tb.Helper()
	runtime.GC()
	debug.FreeOSMemory()
	var r resident
	r.rss, r.pss = testutil.Resident(tb, "self")
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r.heap = int64(ms.HeapAlloc)
	return r
}
