package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleethost/fleet/internal/testutil"
)

const hammerPkg = "tests/cli/testdata/hammer"

// The egress tests' site rate: R requests a second with a burst of egressBurst, and how
// long the site is loaded before it answers its one 429.
const (
	egressRate  = 20
	egressBurst = 5
	egressLoad  = 5 * time.Second
	// inFlightSlack is how long after the site sent its 429 a request may still arrive:
	// one the gate admitted before the closure was recorded (the daemon records it as
	// soon as the 429's header reaches it, a loopback round trip and one backend call).
	inFlightSlack = 150 * time.Millisecond
)

// egressSite is a local site that records when each request arrives, by its own clock,
// and answers the first request after throttle() 429 with Retry-After.
type egressSite struct {
	*httptest.Server
	retryAfter string

	mu          sync.Mutex
	arrivals    []time.Time // guarded by mu
	throttle    bool        // guarded by mu: answer the next request 429
	throttledAt time.Time   // guarded by mu: when the 429 was answered
}

func newEgressSite(t *testing.T, retryAfter string) *egressSite {
	s := &egressSite{retryAfter: retryAfter}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		now := time.Now()
		s.arrivals = append(s.arrivals, now)
		throttle := s.throttle
		if throttle {
			s.throttle, s.throttledAt = false, now
		}
		s.mu.Unlock()
		if throttle {
			w.Header().Set("Retry-After", s.retryAfter)
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *egressSite) host() string { return strings.TrimPrefix(s.URL, "http://") }

// snapshot is the arrivals so far and when the 429 went out (zero before it did).
func (s *egressSite) snapshot() ([]time.Time, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.arrivals...), s.throttledAt
}

// egressFiles writes the grants (the hammer may reach site, with site's URL as its
// config) and the egress policy (site's rate).
func egressFiles(t *testing.T, site *egressSite, policy string) (grants, egress string) {
	t.Helper()
	dir := t.TempDir()
	doc, err := json.Marshal(map[string]any{"hammer": map[string]any{
		"http_hosts": []string{site.host()}, "http_allow_private": true,
		"config": map[string]string{"url": site.URL + "/page"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	grants, egress = filepath.Join(dir, "grants.json"), filepath.Join(dir, "egress.json")
	if err := os.WriteFile(grants, doc, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(egress, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	return grants, egress
}

// TestEgressRateFleetWide: daemons × 4 slots of a plugin that requests one site as fast
// as it can see, over every second of the site's own clock, at most R × 1.1 + burst
// requests, and together reach at least 0.9 R; a 429 with Retry-After: 2 stops every
// daemon's requests to the site for 2 s. Two daemons on one Redis, one on memory.
func TestEgressRateFleetWide(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		srv := testutil.NewRedis(t)
		testEgressRate(t, 2, "--redis", srv.URL())
	})
	t.Run("memory", func(t *testing.T) { testEgressRate(t, 1) })
}

func testEgressRate(t *testing.T, daemons int, args ...string) {
	site := newEgressSite(t, "2")
	grants, egress := egressFiles(t, site, fmt.Sprintf(
		`{"rates": {%q: {"per_second": %d, "burst": %d}}, "max_wait": "1s", "max_retry_after": "1m"}`, site.host(), egressRate, egressBurst))
	dir := pluginsDir(t, hammerPkg)
	var ds []*daemon
	for range daemons {
		ds = append(ds, startDaemon(t, nil, append([]string{"--plugins", dir, "--grants", grants, "--egress", egress,
			"--slots", "4", "--poll-interval", "10ms"}, args...)...))
	}
	testutil.WaitFor(t, time.Minute, fmt.Sprintf("%v of load on the site", egressLoad), func() bool {
		a, _ := site.snapshot()
		return len(a) > 0 && time.Since(a[0]) >= egressLoad
	})
	site.mu.Lock()
	site.throttle = true
	site.mu.Unlock()
	testutil.WaitFor(t, time.Minute, "the site's 429, then a request 2s after it", func() bool {
		a, at := site.snapshot()
		return !at.IsZero() && a[len(a)-1].After(at.Add(2*time.Second))
	})
	arrivals, at := site.snapshot()

	var load []time.Time
	for _, a := range arrivals {
		if a.Before(at) {
			load = append(load, a)
		}
	}
	limit := int(egressRate*1.1) + egressBurst
	for i, a := range load {
		n := 0
		for _, b := range load[i:] {
			if b.Sub(a) < time.Second {
				n++
			}
		}
		if n > limit {
			t.Errorf("%d requests in the second from %v, want at most %d (R × 1.1 + burst)", n, a.Sub(load[0]).Round(time.Millisecond), limit)
			break
		}
	}
	// The achieved rate is measured past the first second, which the burst inflates.
	var steady int
	from := load[0].Add(time.Second)
	for _, a := range load {
		if !a.Before(from) {
			steady++
		}
	}
	if rate := float64(steady) / at.Sub(from).Seconds(); rate < 0.9*egressRate {
		t.Errorf("the fleet reached %.1f requests/s, want at least %.1f (0.9 R)", rate, 0.9*egressRate)
	} else {
		t.Logf("the fleet reached %.1f requests/s of R = %d", rate, egressRate)
	}
	for _, a := range arrivals {
		if d := a.Sub(at); d > inFlightSlack && d < 2*time.Second {
			t.Errorf("a request arrived %v after the 429 with Retry-After: 2", d.Round(time.Millisecond))
		}
	}
	// Every daemon's sites view counts its share; the 429 was counted once, fleet-wide.
	var sent, throttled int64
	for _, d := range ds {
		var sites struct {
			Sites []struct {
				Site      string `json:"site"`
				Sent      int64  `json:"sent"`
				Throttled int64  `json:"throttled"`
			} `json:"sites"`
		}
		d.getJSON("/api/v1/sites", "", &sites)
		for _, s := range sites.Sites {
			if s.Site == site.host() {
				sent += s.Sent
				throttled += s.Throttled
			}
		}
	}
	if throttled != 1 || sent < int64(len(load)) {
		t.Errorf("the daemons' sites views say sent %d, throttled %d, want >= %d, 1", sent, throttled, len(load))
	}
}

// TestEgressRetryAfterCapped: a Retry-After far in the future closes the site for the
// policy's max_retry_after, not for ever; the closure's end is read from the API.
func TestEgressRetryAfterCapped(t *testing.T) {
	site := newEgressSite(t, "99999999")
	site.throttle = true
	grants, egress := egressFiles(t, site, fmt.Sprintf(
		`{"rates": {%q: {"per_second": 5, "burst": 1}}, "max_wait": "1s", "max_retry_after": "90s"}`, site.host()))
	before := time.Now()
	d := startDaemon(t, nil, "--plugins", pluginsDir(t, hammerPkg), "--grants", grants, "--egress", egress, "--slots", "2")
	var closed time.Time
	testutil.WaitFor(t, time.Minute, "the site closed by its 429", func() bool {
		var sites struct {
			Sites []struct {
				Site        string `json:"site"`
				ClosedUntil string `json:"closed_until"`
			} `json:"sites"`
		}
		d.getJSON("/api/v1/sites", "", &sites)
		for _, s := range sites.Sites {
			if s.Site == site.host() && s.ClosedUntil != "" {
				var err error
				if closed, err = time.Parse(time.RFC3339Nano, s.ClosedUntil); err != nil {
					t.Fatal(err)
				}
				return true
			}
		}
		return false
	})
	_, at := site.snapshot()
	if lo, hi := before.Add(90*time.Second), at.Add(90*time.Second+time.Second); closed.Before(lo) || closed.After(hi) {
		t.Errorf("closed until %v, want 90s (max_retry_after) after the 429 at %v", closed, at)
	}
	// The console's banner (GET /api/v1/fleet's alerts) says the site's gate is closed.
	var f struct {
		Alerts []struct{ Kind, Subject string } `json:"alerts"`
	}
	d.getJSON("/api/v1/fleet", "", &f)
	if !slices.Contains(f.Alerts, struct{ Kind, Subject string }{"gate_closed", site.host()}) {
		t.Errorf("GET /api/v1/fleet alerts = %+v, want gate_closed of %s", f.Alerts, site.host())
	}
}
