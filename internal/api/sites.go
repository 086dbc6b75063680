package api

import (
	"net/http"
	"time"

	"github.com/fleethost/fleet/host"
)

// Site is one label of the egress policy as GET /api/v1/sites shows it: its rate, what
// this daemon's plugins asked of its sites, and their state fleet-wide.
type Site struct {
	// Site is the policy's host pattern as written, "default" (the default rate) or
	// "none" (hosts no rate covers: not gated).
	Site        string   `json:"site"`
	PerSecond   float64  `json:"per_second,omitempty"`
	Burst       int      `json:"burst,omitempty"`
	Concurrency int      `json:"concurrency,omitempty"`
	Sent        int64    `json:"sent"`
	Waited      int64    `json:"waited"`
	WaitedMs    int64    `json:"waited_ms"` // the time the waited requests waited, in total
	Refused     int64    `json:"refused"`   // answered RateLimited
	Throttled   int64    `json:"throttled"` // 429 and 503 responses
	Closures    int64    `json:"closures"`
	WaitMs      int64    `json:"wait_ms"`                      // the rate's wait now
	ClosedUntil string   `json:"closed_until,omitempty"`       // RFC 3339, when a closure ends
	Hosts       []string `json:"recent_sites,omitempty"`       // host:port, the latest few
	MaxWaitMs   int64    `json:"max_wait_ms,omitempty"`        // the policy's max_wait
	MaxRetryMs  int64    `json:"max_retry_after_ms,omitempty"` // the policy's max_retry_after
}

// Sites is GET /api/v1/sites: the egress gate by label, most specific first; empty with
// no egress policy.
type Sites struct {
	Sites []Site `json:"sites"`
}

// siteOf is st as the API shows it, under policy e (nil: none).
func siteOf(st host.SiteStats, e *host.Egress) Site {
	s := Site{
		Site: st.Label, PerSecond: st.Rate.PerSecond, Burst: st.Rate.Burst, Concurrency: st.Rate.Concurrency,
		Sent: st.Sent, Waited: st.Waited, WaitedMs: st.WaitTotal.Milliseconds(), Refused: st.Refused,
		Throttled: st.Throttled, Closures: st.Closures, WaitMs: st.Wait.Milliseconds(), Hosts: st.Sites,
	}
	if !st.ClosedUntil.IsZero() {
		s.ClosedUntil = st.ClosedUntil.UTC().Format(time.RFC3339Nano)
	}
	if e != nil && st.Rate.PerSecond > 0 {
		s.MaxWaitMs, s.MaxRetryMs = e.MaxWait().Milliseconds(), e.MaxRetryAfter().Milliseconds()
	}
	return s
}

func (s *Server) listSites(w http.ResponseWriter, r *http.Request) {
	out := Sites{Sites: []Site{}}
	e := s.p.Host.Egress()
	for _, st := range s.p.Host.Sites(r.Context()) {
		out.Sites = append(out.Sites, siteOf(st, e))
	}
	writeJSON(w, http.StatusOK, out)
}
