package tests

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fleethost/fleet/internal/demosite"
	"github.com/fleethost/fleet/internal/testutil"
)

// TestHarvestFloodGone: with the demo site's clearance page broken, 20 scrape tasks of one
// site wait for a cookie that never comes, each retried every 200ms and each retry asking
// for a harvest; the harvester's every attempt fails (503), backs off and, its attempts
// spent, parks. The scraper's harvest requests are unique by site, so:
//
//   - at every sample, at most one harvest task of the site waits or runs;
//   - every harvest task enqueued has parked but the one pending at most, each after its
//     MaxAttempts failed attempts, none parked at once;
//   - the scraper asked for a harvest on every retry, many times more often than a
//     harvest task was enqueued.
//
// It logs the harvest tasks worked per minute. Before the unique key, main's examples
// enqueued one on every retry of every waiting task (see docs/benchmarks.md,
// "Harvests of a broken site", for the figures).
func TestHarvestFloodGone(t *testing.T) {
	for _, kind := range backendKinds {
		t.Run(kind, func(t *testing.T) {
			testutil.CheckGoroutines(t)
			harvestFlood(t, kind)
		})
	}
}

const (
	floodURLs     = 20
	floodAttempts = 3
	floodParks    = 4 // harvest tasks parked before the test stops
)

func harvestFlood(t *testing.T, kind string) {
	site := demosite.New()
	site.Start()
	t.Cleanup(func() { site.Close() })
	site.BreakClearance(true)

	ev := &testutil.SlotEvents{}
	cfg := examplesConfig(t, kind, site, ev)
	backend := cfg.Backend
	// A harvest's attempts fail within tens of ms, so that the test sees several park:
	// waits of at most 50ms, then 100ms.
	g := cfg.Grants["cookie-harvester"]
	g.RetryBackoffBase, g.RetryBackoffFactor = 50*time.Millisecond, 2
	cfg.Grants["cookie-harvester"] = g
	cfg.MaxAttempts = floodAttempts
	h, stop := startHost(t, cfg)

	// Sample the harvest queue while the scraper waits: a flood shows as dozens waiting.
	var (
		mu          sync.Mutex
		outstanding = map[int]int{} // harvest tasks waiting or running -> samples
	)
	sampled, stopSampling := context.WithCancel(context.Background())
	var sampler sync.WaitGroup
	sampler.Go(func() {
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-sampled.Done():
				return
			case <-tick.C:
			}
			s, err := backend.QueueStats(context.Background(), "harvest")
			if err != nil {
				continue
			}
			mu.Lock()
			outstanding[s.Depth+s.InFlight]++
			mu.Unlock()
		}
	})

	start := time.Now()
	for i := range floodURLs {
		payload := fmt.Appendf(nil, `{"url":%q}`, fmt.Sprintf("%s/page/%d", site.URL(), i))
		if _, err := h.Submit(context.Background(), "scrape", payload); err != nil {
			t.Fatalf("Submit(scrape, %s) = %v", payload, err)
		}
	}
	waitFor(t, fmt.Sprintf("%d harvest tasks parked", floodParks), func() bool {
		return testutil.QueueStats(t, backend, "harvest").Parked >= floodParks
	})
	elapsed := time.Since(start)
	stopSampling()
	sampler.Wait()
	stop()

	st := testutil.QueueStats(t, backend, "harvest")
	// The harvest tasks a harvester worked; pending counts those still waiting or held at
	// the end, which a worked one (waiting out its backoff) may be.
	worked := map[string]bool{}
	for _, e := range ev.Finished("cookie-harvester") {
		worked[e.TaskID] = true
	}
	pending := st.Depth + st.InFlight
	asked := ev.Outcomes("scraper")["retried"] // each retry of a scrape task asked for a harvest
	t.Logf("clearance broken, %d scrape tasks of one site: %d harvest tasks worked in %v (%.0f a minute; %d pending at the end; the scraper asked %d times, %.0f a minute), %d parked, %d clearance requests refused",
		floodURLs, len(worked), elapsed.Round(time.Millisecond), float64(len(worked))/elapsed.Minutes(), pending, asked, float64(asked)/elapsed.Minutes(), st.Parked, site.ClearanceRefused())

	mu.Lock()
	for n, samples := range outstanding {
		if n > 1 {
			t.Errorf("%d samples saw %d harvest tasks waiting or running, want at most 1 (samples: %v)", samples, n, outstanding)
		}
	}
	mu.Unlock()
	if len(worked) > st.Parked+1 || pending > 1 {
		t.Errorf("%d harvest tasks worked, %d parked, %d pending: want every one parked but at most one pending", len(worked), st.Parked, pending)
	}
	if asked < 5*(len(worked)+pending) {
		t.Errorf("the scraper asked for %d harvests and %d were enqueued: want it to have asked many times more (the test shows nothing otherwise)", asked, len(worked)+pending)
	}
	parked, err := backend.QueueParked(context.Background(), "harvest", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range parked {
		if p.Attempts != floodAttempts {
			t.Errorf("harvest task %s parked at attempt %d (%q), want %d: each failure backs off and retries until the attempts are spent", p.ID, p.Attempts, p.LastError, floodAttempts)
		}
	}
	if site.Harvests() != 0 {
		t.Errorf("the broken site issued %d cookies", site.Harvests())
	}
	if refused := site.ClearanceRefused(); refused < floodAttempts*st.Parked || refused > floodAttempts*len(worked) {
		t.Errorf("%d clearance requests refused, want %d attempts for each of %d harvest tasks", refused, floodAttempts, len(worked))
	}
}
