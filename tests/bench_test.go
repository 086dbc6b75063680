package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
)

// benchEnv is one backend with a host running the bench guest (testdata/benchguest) in
// one slot, shared by the sub-benchmarks of that backend.
type benchEnv struct {
	backend  primitives.Backend
	host     *host.Host
	finished chan slotstate.Event
	round    int // numbers the pool tags of each measurement, so that rounds never mix
}

func newBenchEnv(b *testing.B, kind string) *benchEnv {
	b.Helper()
	return newBenchEnvIn(b, kind, nil)
}

// newBenchEnvIn is newBenchEnv with worker as the bench guest's worker command (the
// guest isolated in a worker process), or in the daemon for nil.
func newBenchEnvIn(b *testing.B, kind string, worker []string) *benchEnv {
	b.Helper()
	backend, _ := newBackend(b, kind) // on Redis, the benchmark's own server
	dir := b.TempDir()
	installPlugin(b, "tests/testdata/benchguest", dir, "bench")
	env := &benchEnv{backend: backend, finished: make(chan slotstate.Event, 16)}
	cfg := host.Config{
		PluginsDir:   dir,
		Backend:      backend,
		CacheDir:     cacheDir,
		Logger:       slog.New(slog.DiscardHandler),
		Slots:        1,
		PollInterval: time.Millisecond,
		CallTimeout:  30 * time.Minute, // one call makes b.N host calls
		MaxAttempts:  1,
		Grants: map[string]host.Grant{"bench": {
			Queues: map[string][]string{"bench": {"consume"}},
			Pools:  map[string][]string{"bench-blobs": host.PoolRoles()},
			// The bench measures host calls, many per task: no cap on their count, nor on
			// the pool that b.N puts fill.
			MaxHostCalls: math.MaxInt,
			MaxPoolItems: math.MaxInt,
			MaxPoolBytes: math.MaxInt64,
		}},
	}
	env.host = startBenchHost(b, cfg, worker, env.finished)
	if err := backend.KVSet(context.Background(), "bench:kv", "k", []byte(`{"a":1}`), 0, primitives.KVQuota{}); err != nil {
		b.Fatal(err)
	}
	return env
}

// startBenchHost runs a host of cfg until the benchmark ends, its guests isolated in
// worker processes of the command worker (in the daemon for nil), and sends each
// finished iteration on finished.
func startBenchHost(b *testing.B, cfg host.Config, worker []string, finished chan<- slotstate.Event) *host.Host {
	b.Helper()
	cfg.Observe = func(e slotstate.Event) {
		if e.Kind == "finished" {
			finished <- e
		}
	}
	if worker != nil {
		cfg.Isolate, cfg.WorkerCommand = host.IsolateProcess, worker
	}
	h, err := host.New(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- h.Run(ctx) }()
	b.Cleanup(func() {
		cancel()
		<-ran
		h.Close()
	})
	return h
}

// guest runs one bench task of n calls and returns the wall time of its fleet_handle
// call (the iteration's duration: the call and the ack, which is one backend round trip
// against n calls).
func (env *benchEnv) guest(b *testing.B, op, mode, site string, n int) time.Duration {
	b.Helper()
	payload, _ := json.Marshal(map[string]any{"op": op, "n": n, "mode": mode, "site": site})
	if _, err := env.host.Submit(context.Background(), "bench", payload); err != nil {
		b.Fatal(err)
	}
	it := (<-env.finished).Iteration
	if it.Outcome != "done" {
		b.Fatalf("bench task %s: outcome %s: %s", payload, it.Outcome, it.Reason)
	}
	return it.Duration
}

// blobPayload is the bench guest's ~500-byte Blob, encoded as the SDK encodes it.
func blobPayload(site string, n int) []byte {
	b, _ := json.Marshal(struct {
		Site string `json:"site"`
		Body string `json:"body"`
		N    int    `json:"n"`
	}{site, strings.Repeat("0123456789abcdef", 29), n})
	return b
}

// native makes op n times through the backend, as the host's dispatch core would after
// decoding, and returns the wall time.
func (env *benchEnv) native(b *testing.B, op, site string, n int) time.Duration {
	b.Helper()
	ctx := context.Background()
	be := env.backend
	tags := primitives.Tags{"site": `"` + site + `"`, "fresh": "true"}
	where := primitives.Tags{"site": `"` + site + `"`}
	start := time.Now()
	for i := range n {
		var err error
		switch op {
		case "kv_get":
			var ok bool
			if _, ok, err = be.KVGet(ctx, "bench:kv", "k"); err == nil && !ok {
				err = fmt.Errorf("not found")
			}
		case "counter_incr":
			_, err = be.CounterIncr(ctx, "bench:n", 1, primitives.NameQuota{})
		case "lock":
			l, ok, aerr := be.LockAcquire(ctx, "bench:lock", 10*time.Second, 0, primitives.NameQuota{})
			if err = aerr; err == nil && !ok {
				err = fmt.Errorf("not acquired")
			}
			if err == nil {
				var released bool
				if released, err = be.LockRelease(ctx, "bench:lock", l.Token); err == nil && !released {
					err = fmt.Errorf("not released")
				}
			}
		case "pool_put":
			_, err = be.PoolPut(ctx, "bench-blobs", blobPayload(site, i), tags, 0, primitives.PoolPutOptions{})
		case "pool_claim":
			var ok bool
			if _, ok, err = be.PoolClaim(ctx, "bench-blobs", where, 10*time.Minute); err == nil && !ok {
				err = fmt.Errorf("nothing to claim")
			}
		}
		if err != nil {
			b.Fatalf("native %s %d: %v", op, i, err)
		}
	}
	return time.Since(start)
}

// fill puts n Blobs tagged site, for a claim benchmark to take (untimed).
func (env *benchEnv) fill(b *testing.B, site string, n int) {
	b.Helper()
	b.StopTimer()
	defer b.StartTimer()
	tags := primitives.Tags{"site": `"` + site + `"`, "fresh": "true"}
	for i := range n {
		if _, err := env.backend.PoolPut(context.Background(), "bench-blobs", blobPayload(site, i), tags, 0, primitives.PoolPutOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// benchChunks is how many turns the native and guest runs of one measurement take.
const benchChunks = 10

// BenchmarkHostCalls compares each host call made by a real wasm guest (N calls in a loop
// inside one fleet_handle) with the same primitives.Backend call made natively in Go, N
// times, side by side in one run (in alternating chunks of N/10), on the memory backend and on a Redis that the
// benchmark starts. "sdk" is the guest SDK's path, as a plugin calls; "raw" sends request
// bytes encoded once and skips decoding the reply, which leaves the host's own cost
// (transport, decode, grant, validation, encode). It reports, per call:
//
//	ns/op          the guest's call
//	native-ns/op   the native call
//	x-native       their ratio (the goals on Redis: kv/counter/lock within 1.10, pool
//	               put/claim of a ~500-byte validated payload within 1.30)
//	added-µs/op    what the guest's call adds to the native one
//
// lock is one lock_acquire plus one lock_release per op.
//
//	go test -run '^$' -bench HostCalls -benchtime 10000x ./tests/
func BenchmarkHostCalls(b *testing.B) {
	for _, kind := range backendKinds {
		b.Run(kind, func(b *testing.B) {
			env := newBenchEnv(b, kind)
			for _, op := range []string{"kv_get", "counter_incr", "lock", "pool_put", "pool_claim"} {
				for _, mode := range []string{"sdk", "raw"} {
					b.Run(op+"/"+mode, func(b *testing.B) {
						env.round++
						gsite, nsite := fmt.Sprintf("g%d", env.round), fmt.Sprintf("n%d", env.round)
						if op == "pool_claim" {
							env.fill(b, nsite, b.N)
							env.fill(b, gsite, b.N)
						}
						// Alternate native and guest in chunks, so that a drift of the
						// machine or of Redis (its round trip varies by ±20% from one
						// second to the next on 2 shared cores) weighs on both alike.
						var native, guest time.Duration
						for done := 0; done < b.N; {
							n := min(max(b.N/benchChunks, 1), b.N-done)
							native += env.native(b, op, nsite, n)
							guest += env.guest(b, op, mode, gsite, n)
							done += n
						}
						g := float64(guest.Nanoseconds()) / float64(b.N)
						nat := float64(native.Nanoseconds()) / float64(b.N)
						b.ReportMetric(g, "ns/op")
						b.ReportMetric(nat, "native-ns/op")
						b.ReportMetric(g/nat, "x-native")
						b.ReportMetric((g-nat)/1e3, "added-µs/op")
					})
				}
			}
		})
	}
}

// BenchmarkGuestJSON measures, by the guest's own clock, the work that a Go guest does in
// wasm per host call and per payload (testdata/jsoncost), in a bare wazero runtime with
// WithCloseOnContextDone off and on. The Extism transport runs guests with it on (native
// guests run without it, stopped by the rewriter's stop global: host/RATIONALE.md, "What
// does the sandbox cost?"): wazero v1.12 then exits to Go to check for a close at every
// loop header of the guest's code, which in a Go guest means at every taken jump (a
// loop's back edge, an if that skips its body) and at the entry of every function (Go's
// wasm port compiles a body into one loop over its blocks). It locates the SDK rows of
// BenchmarkHostCalls:
//
//	append-request, decode-reply    what the SDK does for a kv_get, by hand
//	marshal-request, unmarshal-reply what encoding/json would cost instead
//	marshal-payload                 a pool_put's ~500-byte payload (encoding/json)
//	unmarshal-payload               a pool_claim's ~500-byte payload (encoding/json)
//	calls-1000, loop-1000           1,000 calls of a function that calls another; 1,000
//	                                iterations of a plain loop
//
//	go test -run '^$' -bench GuestJSON ./tests/
func BenchmarkGuestJSON(b *testing.B) {
	wasm, err := os.ReadFile(testutil.BuildPlugin(b, "tests/testdata/jsoncost"))
	if err != nil {
		b.Fatal(err)
	}
	for _, closeOn := range []bool{false, true} {
		b.Run(fmt.Sprintf("close-on-ctx-done=%v", closeOn), func(b *testing.B) {
			ctx := context.Background()
			cache, err := wazero.NewCompilationCacheWithDir(cacheDir)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { cache.Close(ctx) })
			loop := testutil.JSONCostLoop(b, wasm, cache, closeOn)
			for kind, name := range testutil.JSONCostKinds {
				b.Run(name, func(b *testing.B) {
					if _, err := loop.Call(ctx, 10, uint64(kind)); err != nil { // warm the type caches
						b.Fatal(err)
					}
					res, err := loop.Call(ctx, uint64(b.N), uint64(kind))
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(float64(res[0])/float64(b.N), "ns/op")
				})
			}
		})
	}
}
