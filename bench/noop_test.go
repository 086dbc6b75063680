// Package bench compares fleet-host with its peers on the same Redis, in the same run.
// It is a module of its own so that the peers (hibiken/asynq) never enter the main
// module's dependencies.
//
//	cd bench && go test -run '^$' -bench . ./...
package bench

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/internal/fleetview"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
	fleetredis "github.com/fleethost/fleet/primitives/redis"
)

var (
	tasksFlag = flag.Int("tasks", 20000, "no-op tasks per system per benchmark iteration, pre-enqueued before timing")
	slotsFlag = flag.Int("slots", 8, "fleet-host slots, and asynq's concurrency")
	onlyFlag  = flag.String("only", "", `run one system alone, for a profile: "asynq", "fleet" or "wat"`)
)

// cacheDir is the wazero compilation cache that the main module's tests use too.
var cacheDir = testutil.WazeroCacheDir()

// noopWAT is a no-op guest in WebAssembly text: every task is done, with no Go runtime
// and no JSON in the guest. It shows the host's and the backend's own ceiling.
const noopWAT = `(module
  (memory (export "memory") 1)
  (data (i32.const 0) "%s")
  (data (i32.const 4096) "{\"outcome\":\"done\"}")
  (func (export "fleet_abi_version") (result i32) (i32.const 1))
  (func (export "fleet_input") (param i32) (result i32) (i32.const 8192))
  (func (export "fleet_describe") (result i64) (i64.const %d))
  (func (export "fleet_handle") (param i32) (result i64) (i64.const %d))
)`

func watPlugin(b *testing.B) string {
	b.Helper()
	describe := `{"abi_version":1,"type":"noop-wat","version":"1.0.0","mode":"batch","consumes":{"name":"noop-wat","payload_schema":{"type":"object"}}}`
	escaped := strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(describe)
	src := fmt.Sprintf(noopWAT, escaped, len(describe), uint64(4096)<<32|18)
	return testutil.WAT(b, src)
}

// BenchmarkNoopThroughput processes the same number of pre-enqueued no-op tasks
// (-tasks, 20,000) with fleet-host (8 slots of plugins/examples/noop, a Go guest) and
// with hibiken/asynq (concurrency 8, a no-op handler), on one Redis that the benchmark
// starts, in the same run, and reports each one's tasks/s and their ratio (issue 25's
// goal: the Go plugin at least 2.0x asynq, the WAT one 2.3x). "wat" is fleet-host running
// a no-op guest written in WebAssembly text, which has no Go runtime and no JSON: the
// host's own ceiling.
//
// Each system's time runs from its start (instances made, workers started) to its last
// task done; the queue is filled before, untimed. Beside its tasks/s, each reports the
// CPU time per task of this process (-cpu-us/task: the system's own goroutines) and of
// the Redis server (-redis-us/task) over the same time (spent).
func BenchmarkNoopThroughput(b *testing.B) {
	srv, err := testutil.StartRedis()
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	goWasm := testutil.BuildPlugin(b, "plugins/examples/noop")
	watWasm := watPlugin(b)
	n, slots := *tasksFlag, *slotsFlag

	run := func(name string) bool { return *onlyFlag == "" || *onlyFlag == name }
	var fleetGo, fleetWAT, peer spent
	for b.Loop() {
		if run("asynq") {
			flush(b, srv)
			peer.add(runAsynq(b, srv, n, slots))
		}
		if run("fleet") {
			flush(b, srv)
			fleetGo.add(runFleet(b, srv, goWasm, "noop", n, slots, fleetOpts{}))
		}
		if run("wat") {
			flush(b, srv)
			fleetWAT.add(runFleet(b, srv, watWasm, "noop-wat", n, slots, fleetOpts{}))
		}
	}
	rate := func(s spent) float64 { return float64(n*b.N) / s.wall.Seconds() }
	if run("fleet") {
		b.ReportMetric(rate(fleetGo), "fleet-tasks/s")
		fleetGo.report(b, "fleet", n*b.N)
	}
	if run("wat") {
		b.ReportMetric(rate(fleetWAT), "fleet-wat-tasks/s")
		fleetWAT.report(b, "wat", n*b.N)
	}
	if run("asynq") {
		b.ReportMetric(rate(peer), "asynq-tasks/s")
		peer.report(b, "asynq", n*b.N)
	}
	if *onlyFlag == "" {
		b.ReportMetric(rate(fleetGo)/rate(peer), "x-asynq")
		b.ReportMetric(rate(fleetWAT)/rate(peer), "wat-x-asynq")
	}
}

func flush(b *testing.B, srv *testutil.Redis) {
	b.Helper()
	b.StopTimer()
	defer b.StartTimer()
	srv.Flush(b)
}

// fleetOpts are what a host of runFleet adds to the plain one.
type fleetOpts struct {
	// health counts the slots' outcomes and flushes them to the fleet's tally as a
	// daemon does (fleetview.Counter, fleetview.Keeper), so that BenchmarkNoopHealth
	// measures its cost.
	health bool
	// worker, when set, is the argv of the worker process the plugin's instances run in
	// (Config.Isolate "process"), for BenchmarkNoopWorker.
	worker []string
}

// runFleet loads wasm (of type queue, consuming queue) into a host with slots slots on
// srv, enqueues n no-op tasks, then times Run from its start (which makes the slots'
// instances; a worker process, if any, has started and compiled the plugin in host.New,
// untimed) until n tasks are done (spent).
func runFleet(b *testing.B, srv *testutil.Redis, wasm, queue string, n, slots int, opts fleetOpts) spent {
	b.Helper()
	b.StopTimer()
	backend, err := fleetredis.Open(srv.URL(), fleetredis.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer backend.Close()
	dir := b.TempDir()
	src, err := os.ReadFile(wasm)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, queue+".wasm"), src, 0o644); err != nil {
		b.Fatal(err)
	}
	var done, other atomic.Int64
	all := make(chan struct{})
	counter := &fleetview.Counter{}
	isolate := host.IsolateNone
	if opts.worker != nil {
		isolate = host.IsolateProcess
	}
	h, err := host.New(context.Background(), host.Config{
		Isolate:       isolate,
		WorkerCommand: opts.worker,
		PluginsDir:    dir,
		Backend:       backend,
		CacheDir:      cacheDir,
		Slots:         slots,
		// Both no-op plugins are of the type their queue is named after.
		Grants: map[string]host.Grant{queue: {Queues: map[string][]string{queue: {"consume"}}}},
		Logger: slog.New(slog.DiscardHandler),
		Observe: func(e slotstate.Event) {
			if opts.health {
				counter.Observe(e)
			}
			if e.Kind != "finished" {
				return
			}
			if e.Iteration.Outcome != "done" {
				other.Add(1)
			}
			if done.Add(1) == int64(n) {
				close(all)
			}
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	ctx := context.Background()
	for range n {
		if _, _, err := backend.QueuePush(ctx, queue, []byte(`{}`), primitives.QueuePushOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	runCtx, cancel := context.WithCancel(ctx)
	ran := make(chan error, 1)
	b.StartTimer()
	start := readClocks(b, srv)
	go func() { ran <- h.Run(runCtx) }()
	var kept chan struct{}
	if opts.health {
		kept = make(chan struct{})
		k := fleetview.NewKeeper(fleetview.Params{Backend: backend, Daemon: "bench@1", Instance: "bench",
			Plugins: h.Plugins, Slots: func() []fleetview.Slot { return nil }, Counter: counter}, 1)
		go func() { defer close(kept); k.Run(runCtx) }()
	}
	<-all
	took := start.since(b, srv)
	b.StopTimer()
	cancel()
	if err := <-ran; err != nil {
		b.Fatal(err)
	}
	if kept != nil {
		<-kept
	}
	if o := other.Load(); o != 0 {
		b.Fatalf("fleet-host: %d of %d tasks did not end in a checkpoint", o, n)
	}
	if s, err := backend.QueueStats(ctx, queue); err != nil || s != (primitives.QueueStats{}) {
		b.Fatalf("fleet-host: queue stats = %+v, %v after the run; want all zero", s, err)
	}
	b.StartTimer()
	return took
}

// runAsynq enqueues n no-op tasks with an asynq client, then times an asynq server of
// concurrency slots from its start until its handler has seen n tasks (spent).
func runAsynq(b *testing.B, srv *testutil.Redis, n, slots int) spent {
	b.Helper()
	b.StopTimer()
	opt := asynq.RedisClientOpt{Addr: srv.Addr}
	client := asynq.NewClient(opt)
	defer client.Close()
	for range n {
		if _, err := client.Enqueue(asynq.NewTask("noop", nil)); err != nil {
			b.Fatal(err)
		}
	}
	var done atomic.Int64
	all := make(chan struct{})
	mux := asynq.NewServeMux()
	mux.HandleFunc("noop", func(context.Context, *asynq.Task) error {
		if done.Add(1) == int64(n) {
			close(all)
		}
		return nil
	})
	server := asynq.NewServer(opt, asynq.Config{
		Concurrency: slots,
		Queues:      map[string]int{"default": 1},
		LogLevel:    asynq.WarnLevel,
	})
	b.StartTimer()
	start := readClocks(b, srv)
	if err := server.Start(mux); err != nil {
		b.Fatal(err)
	}
	<-all
	took := start.since(b, srv)
	b.StopTimer()
	server.Shutdown()
	b.StartTimer()
	return took
}
