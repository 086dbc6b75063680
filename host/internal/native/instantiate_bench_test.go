package native

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/fleethost/fleet/internal/testutil"
)

// BenchmarkInstantiate makes b.N instances of the Go no-op plugin (plugins/examples/noop)
// in one runtime under the host's default memory limit, holding each, as b.N slots of a
// daemon hold theirs: ns/op is the time until an instance is ready (instantiated and its
// _initialize run: what a slot waits at start-up and after a death), and MiB/instance the
// process's resident memory (smaps_rollup's Rss, after a GC that returns what it can to
// the system) that the live instances hold, over b.N. Each instance then handles one
// task, as a slot's first, and resident-after-task-MiB/instance is the same after it.
//
//	go test -run '^$' -bench Instantiate -benchtime 100x ./host/internal/native/
func BenchmarkInstantiate(b *testing.B) {
	rt := newTestRuntime(b, readFile(b, testutil.BuildPlugin(b, "plugins/examples/noop")), Params{MemoryLimitPages: 256, Cache: benchCache(b)})
	ctx := context.Background()
	instances := make([]*Instance, 0, b.N)
	before := residentBytes(b)
	b.ResetTimer()
	var elapsed time.Duration
	for i := range b.N {
		name := fmt.Sprintf("noop/%d", i)
		start := time.Now()
		instances = append(instances, newTestInstanceOf(b, rt, name))
		elapsed += time.Since(start)
	}
	b.StopTimer()
	held := residentBytes(b)
	input := []byte(`{"task":{"id":"t","payload":{},"attempts":1,"enqueued_at_ms":1},"iteration":1}`)
	for _, in := range instances {
		if _, err := in.Handle(ctx, input); err != nil {
			b.Fatal(err)
		}
	}
	worked := residentBytes(b)
	for _, in := range instances {
		in.Close(ctx)
	}
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(b.N), "ns/op")
	b.ReportMetric(float64(held-before)/(1<<20)/float64(b.N), "MiB/instance")
	b.ReportMetric(float64(worked-before)/(1<<20)/float64(b.N), "resident-after-task-MiB/instance")
}

// residentBytes is this process's Rss (smaps_rollup) after a GC that returns freed memory
// to the system, so that what it counts is live.
func residentBytes(tb testing.TB) int64 {
	tb.Helper()
	runtime.GC()
	debug.FreeOSMemory()
	f, err := os.ReadFile("/proc/self/smaps_rollup")
	if err != nil {
		tb.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(f))
	for sc.Scan() {
		var kb int64
		if _, err := fmt.Sscanf(sc.Text(), "Rss: %d kB", &kb); err == nil {
			return kb << 10
		}
	}
	tb.Fatalf("/proc/self/smaps_rollup has no Rss line:\n%s", f)
	return 0
}
