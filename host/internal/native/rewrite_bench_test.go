package native

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/fleethost/fleet/host/internal/hostfn"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/primitives/memory"
)

// rewriteChunks is how many turns the as-given and the rewritten module take in one
// measurement, so that a drift of the shared machine weighs on both alike.
const rewriteChunks = 10

// sideBySide runs as-given and rewritten n times each in alternating chunks, and reports
// the rewritten module's ns per unit (each run does units of work), the module's as given,
// and their ratio.
func sideBySide(b *testing.B, units int, asGiven, rewritten func(n int) time.Duration) {
	var given, rw time.Duration
	for done := 0; done < b.N; {
		n := min(max(b.N/rewriteChunks, 1), b.N-done)
		given += asGiven(n)
		rw += rewritten(n)
		done += n
	}
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N*units) }
	b.ReportMetric(per(rw), "ns/op")
	b.ReportMetric(per(given), "as-given-ns/op")
	b.ReportMetric(per(rw)/per(given), "x-as-given")
}

// goInstances makes an instance of the Go guest pkg as given and one rewritten, over one
// memory backend, for a plugin granted the bench: names.
func goInstances(b *testing.B, pkg string) (asGiven, rewritten *Instance) {
	b.Helper()
	wasm, err := os.ReadFile(testutil.BuildPlugin(b, pkg))
	if err != nil {
		b.Fatal(err)
	}
	be := memory.New(memory.Options{})
	b.Cleanup(func() { be.Close() })
	if err := be.KVSet(context.Background(), "bench:kv", "k", []byte(`{"a":1}`), 0, primitives.KVQuota{}); err != nil {
		b.Fatal(err)
	}
	g := hostfn.Access{KV: hostfn.Patterns{"bench:*"}, Counters: hostfn.Patterns{"bench:*"}}
	p := Params{MemoryLimitPages: 256, Cache: benchCache(b)}
	rewritten = newTestInstanceOn(b, wasm, p, be, g)
	p.noRewrite = true
	return newTestInstanceOn(b, wasm, p, be, g), rewritten
}

func benchCache(b testing.TB) wazero.CompilationCache {
	c, err := wazero.NewCompilationCacheWithDir(testutil.WazeroCacheDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// handleTimed runs fleet_handle of in with input n times and returns the wall time.
func handleTimed(b *testing.B, in *Instance, input []byte, n int) time.Duration {
	ctx := context.Background()
	start := time.Now()
	for range n {
		if _, err := in.Handle(ctx, input); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start)
}

// BenchmarkRewriteCost measures what the module rewriter costs the Go example guests,
// with the same guest as given and rewritten side by side in one run (alternating
// chunks): the shapes of the benchmarks that docs/benchmarks.md quotes. The module as given runs
// with nothing that could stop it, which no guest gets: the floor. The rewritten one
// runs as the host runs it, with the countdown and the stop global.
//
//	HostCalls/<op>  tests/testdata/benchguest, 1000 SDK calls of op per task, memory
//	                backend, per call (BenchmarkHostCalls)
//	GuestJSON/<k>   tests/testdata/jsoncost's guest-side work, per piece (BenchmarkGuestJSON)
//	Noop            plugins/examples/noop, one task (the guest's share of BenchmarkNoopThroughput)
//
// It reports ns/op (rewritten), as-given-ns/op and x-as-given, their ratio.
//
//	go test -run '^$' -bench RewriteCost ./host/internal/native/
func BenchmarkRewriteCost(b *testing.B) {
	b.Run("HostCalls", func(b *testing.B) {
		given, rw := goInstances(b, "tests/testdata/benchguest")
		for _, op := range []string{"kv_get", "counter_incr"} {
			b.Run(op, func(b *testing.B) {
				const calls = 1000
				input := fmt.Appendf(nil, `{"task":{"id":"t","payload":{"op":%q,"n":%d,"mode":"sdk"},"attempts":1,"enqueued_at_ms":1},"iteration":1}`, op, calls)
				sideBySide(b, calls,
					func(n int) time.Duration { return handleTimed(b, given, input, n) },
					func(n int) time.Duration { return handleTimed(b, rw, input, n) })
			})
		}
	})
	b.Run("GuestJSON", benchGuestJSON)
	b.Run("Noop", func(b *testing.B) {
		given, rw := goInstances(b, "plugins/examples/noop")
		input := []byte(`{"task":{"id":"t","payload":{},"attempts":1,"enqueued_at_ms":1},"iteration":1}`)
		sideBySide(b, 1,
			func(n int) time.Duration { return handleTimed(b, given, input, n) },
			func(n int) time.Duration { return handleTimed(b, rw, input, n) })
	})
}

// benchGuestJSON runs jsoncost's loop(n, kind) as given and rewritten, each in a bare
// runtime without WithCloseOnContextDone, as the host's runtimes are; the guest times
// itself. tests' BenchmarkGuestJSON measures the same work under WithCloseOnContextDone.
func benchGuestJSON(b *testing.B) {
	wasm, err := os.ReadFile(testutil.BuildPlugin(b, "tests/testdata/jsoncost"))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	cache := benchCache(b)
	loop := func(wasm []byte) func(n, kind int) time.Duration {
		fn := testutil.JSONCostLoop(b, wasm, cache, false)
		return func(n, kind int) time.Duration {
			res, err := fn.Call(ctx, uint64(n), uint64(kind))
			if err != nil {
				b.Fatal(err)
			}
			return time.Duration(res[0])
		}
	}
	given, rw := loop(wasm), loop(mustRewrite(b, wasm))
	for kind, name := range testutil.JSONCostKinds {
		b.Run(name, func(b *testing.B) {
			given(10, kind) // warm the type caches
			rw(10, kind)
			sideBySide(b, 1,
				func(n int) time.Duration { return given(n, kind) },
				func(n int) time.Duration { return rw(n, kind) })
		})
	}
}

// BenchmarkRewrite rewrites the scraper plugin, the largest example: ns/op is what the
// rewrite adds to a plugin's load, grown-% what it adds to the module's size.
//
//	go test -run '^$' -bench 'Rewrite$' -benchtime 20x ./host/internal/native/
func BenchmarkRewrite(b *testing.B) {
	wasm, err := os.ReadFile(testutil.BuildPlugin(b, "plugins/examples/scraper"))
	if err != nil {
		b.Fatal(err)
	}
	var out []byte
	for b.Loop() {
		if out, err = rewrite(wasm); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(wasm))/1e6, "MB")
	b.ReportMetric(100*float64(len(out)-len(wasm))/float64(len(wasm)), "grown-%")
}
