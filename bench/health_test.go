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
	srv, err := testutil.StartRedis()
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	wasm := testutil.BuildPlugin(b, "plugins/examples/noop")
	n, slots := *tasksFlag, *slotsFlag
	var plain, health time.Duration
	var ratios []float64
	i := 0
	for b.Loop() {
		// Alternate which goes first, so that neither always meets a warmer machine.
		var pair [2]time.Duration // plain, health
		for _, withHealth := range [][2]bool{{false, true}, {true, false}}[i%2] {
			flush(b, srv)
			d := runFleet(b, srv, wasm, "noop", n, slots, withHealth).wall
			if withHealth {
				health += d
				pair[1] = d
			} else {
				plain += d
				pair[0] = d
			}
		}
		ratios = append(ratios, pair[0].Seconds()/pair[1].Seconds())
		i++
	}
	slices.Sort(ratios)
	rate := func(d time.Duration) float64 { return float64(n*b.N) / d.Seconds() }
	b.ReportMetric(rate(plain), "plain-tasks/s")
	b.ReportMetric(rate(health), "health-tasks/s")
	b.ReportMetric(rate(health)/rate(plain), "x-plain")
	b.ReportMetric(ratios[len(ratios)/2], "x-plain-median")
}
