package bench

import (
	"slices"
	"testing"
	"time"

	"github.com/fleethost/fleet/internal/testutil"
)

// BenchmarkNoopHealth measures what the fleet's health counting costs the hot path:
// the same -tasks no-op tasks (plugins/examples/noop, -slots slots) run by a host
// without it and by one whose slots' outcomes are counted in memory and flushed to the
// tally every refresh (fleetview.Counter and Keeper, as a daemon runs them), alternated
// in one run on one Redis. It reports each one's tasks/s, their ratio x-plain (the
// goal: at least 0.97), and the median of the ratios of each iteration's pair,
// x-plain-median, which a machine shared with other work disturbs less.
//
//	cd bench && go test -run '^$' -bench NoopHealth -benchtime 6x
func BenchmarkNoopHealth(b *testing.B) {
	plain, health := alternate(b, fleetOpts{}, fleetOpts{health: true})
	b.ReportMetric(plain.rate, "plain-tasks/s")
	b.ReportMetric(health.rate, "health-tasks/s")
	b.ReportMetric(health.rate/plain.rate, "x-plain")
	b.ReportMetric(health.median, "x-plain-median")
}

// BenchmarkNoopWorker measures what a worker process costs a busy host (issue 26): the
// same -tasks no-op tasks (plugins/examples/noop, -slots slots) run by a host whose
// instances are its own and by one whose instances run in a worker process
// (Config.Isolate "process", the fleet-host binary's `worker`), alternated in one run on
// one Redis. It reports each one's tasks/s and x-inproc, what a task costs in the
// worker over in the daemon (the in-process rate over the worker's; the goal: at most
// 1.2), and the median of that ratio over each iteration's pair, x-inproc-median; and
// each one's CPU time per task of this process (the daemon's side: a worker's own CPU
// is not in it) and of Redis (spent.report).
//
//	cd bench && go test -run '^$' -bench NoopWorker -benchtime 6x
func BenchmarkNoopWorker(b *testing.B) {
	bin, err := testutil.FleetHost(false)
	if err != nil {
		b.Fatal(err)
	}
	inproc, worker := alternate(b, fleetOpts{}, fleetOpts{worker: []string{bin, "worker"}})
	b.ReportMetric(inproc.rate, "inproc-tasks/s")
	b.ReportMetric(worker.rate, "worker-tasks/s")
	b.ReportMetric(inproc.rate/worker.rate, "x-inproc")
	b.ReportMetric(inproc.median, "x-inproc-median")
	inproc.spent.report(b, "inproc", inproc.tasks)
	worker.spent.report(b, "worker", worker.tasks)
}

// throughput is one host's side of alternate: its tasks/s over every iteration, the
// median over the iterations of its rate over the other side's, and what its tasks
// spent in all.
type throughput struct {
	rate, median float64
	spent        spent
	tasks        int
}

// alternate runs -tasks no-op tasks of plugins/examples/noop on a host of each of a and
// z once an iteration, on one Redis, alternating which goes first so that neither
// always meets a warmer machine.
func alternate(b *testing.B, a, z fleetOpts) (throughput, throughput) {
	srv, err := testutil.StartRedis()
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	wasm := testutil.BuildPlugin(b, "plugins/examples/noop")
	n, slots := *tasksFlag, *slotsFlag
	var took [2]spent
	var ratios []float64 // z's rate over a's, each iteration
	i := 0
	for b.Loop() {
		var pair [2]time.Duration
		for _, side := range [][]int{{0, 1}, {1, 0}}[i%2] {
			flush(b, srv)
			s := runFleet(b, srv, wasm, "noop", n, slots, []fleetOpts{a, z}[side])
			pair[side] = s.wall
			took[side].add(s)
		}
		ratios = append(ratios, pair[0].Seconds()/pair[1].Seconds())
		i++
	}
	slices.Sort(ratios)
	median := ratios[len(ratios)/2]
	side := func(s spent, median float64) throughput {
		return throughput{rate: float64(n*b.N) / s.wall.Seconds(), median: median, spent: s, tasks: n * b.N}
	}
	return side(took[0], 1/median), side(took[1], median)
}
