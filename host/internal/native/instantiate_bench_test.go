package native

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/fleethost/fleet/host/internal/hostfn"
	"github.com/fleethost/fleet/host/internal/validate"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives/memory"
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
	wasm, err := os.ReadFile(testutil.BuildPlugin(b, "plugins/examples/noop"))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	be := memory.New(memory.Options{})
	b.Cleanup(func() { be.Close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	core := hostfn.NewCore(be, validate.NewRegistry(nil), nil, log)
	rt, err := NewRuntime(ctx, Params{MemoryLimitPages: 256, Cache: benchCache(b), Core: core, Log: log}, wasm)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { rt.Close(ctx) })
	plugin := hostfn.NewGrantee("noop", hostfn.Access{}, json.RawMessage(`{}`), hostfn.Limits{MaxPayload: 1024, MaxHostCalls: hostfn.DefaultMaxHostCalls, MaxReply: hostfn.DefaultMaxReply, MaxPoolList: hostfn.DefaultMaxPoolList}, nil)
	instances := make([]*Instance, 0, b.N)
	before := residentBytes(b)
	b.ResetTimer()
	var elapsed time.Duration
	for i := range b.N {
		name := fmt.Sprintf("noop/%d", i)
		start := time.Now()
		in, err := rt.Instantiate(ctx, name, &hostfn.Caller{Plugin: plugin, Slot: name}, nil)
		elapsed += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		instances = append(instances, in)
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
