package httpfn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/primitives"
)

// Gate is the operator's egress policy enforced on every request of every plugin of a
// host: each hop (redirects included) to a gated site passes the backend's Gate for it
// before it is sent, and a 429 or 503 with Retry-After closes the site fleet-wide. One
// Gate serves every Client of a host (WithGate); SetPolicy swaps its policy while
// requests run. Safe for concurrent use. See RATIONALE.md, "How does the egress gate
// meter a site?".
type Gate struct {
	backend primitives.Gate
	policy  atomic.Pointer[Egress] // nil: nothing is gated

	mu    sync.Mutex
	stats map[string]*siteStats // guarded by mu: by label; bounded by the labels policies have named
}

// NewGate makes the Gate of a host on backend b under policy e (nil: none, every request
// is sent as it comes).
func NewGate(b primitives.Gate, e *Egress) *Gate {
	g := &Gate{backend: b, stats: map[string]*siteStats{}}
	g.SetPolicy(e)
	return g
}

// SetPolicy replaces the policy: requests that have not passed the gate yet pass the new
// one. nil gates nothing.
func (g *Gate) SetPolicy(e *Egress) { g.policy.Store(e) }

// Policy is the policy in force, nil when none.
func (g *Gate) Policy() *Egress { return g.policy.Load() }

// siteStats counts what one label's sites were asked. The counters only grow.
type siteStats struct {
	sent, waited, refused, throttled, closures atomic.Int64
	waitNanos                                  atomic.Int64
	closedUntil                                atomic.Int64 // Unix ns: the latest closure this host set

	mu    sync.Mutex
	sites []string // guarded by mu: the latest sites seen, at most maxSitesPerLabel
}

// maxSitesPerLabel bounds the sites a label remembers for SiteStats' state (a wildcard
// pattern matches any number of hosts).
const maxSitesPerLabel = 8

func (g *Gate) stat(label string) *siteStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	s, ok := g.stats[label]
	if !ok {
		s = &siteStats{}
		g.stats[label] = s
	}
	return s
}

func (s *siteStats) saw(site string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := slices.Index(s.sites, site); i >= 0 {
		s.sites = slices.Delete(s.sites, i, i+1)
	} else if len(s.sites) == maxSitesPerLabel {
		s.sites = s.sites[1:]
	}
	s.sites = append(s.sites, site)
}

// SiteStats is what one label of the policy (a pattern as written, LabelDefault or
// LabelNone) has seen on this host, and its sites' state in the backend.
type SiteStats struct {
	Label     string
	Rate      primitives.Rate // zero for LabelNone, or a label a reload dropped
	Sent      int64           // requests sent
	Waited    int64           // requests that waited for their turn, then were sent
	WaitTotal time.Duration   // the time those waited
	Refused   int64           // requests answered RateLimited, not sent
	Throttled int64           // 429 and 503 responses
	Closures  int64           // closures this host set from them
	// ClosedUntil is when the latest-closing of its recent sites opens (zero when open);
	// Wait, the longest wait its recent sites' rates would impose now.
	ClosedUntil time.Time
	Wait        time.Duration
	Sites       []string // the recent sites (host:port), at most 8
}

// Stats reports every label of the policy in force, in its order of specificity, then
// any other label seen (LabelNone, labels a reload dropped), with the state of their
// recent sites in the backend (a backend error leaves the state zero).
func (g *Gate) Stats(ctx context.Context) []SiteStats {
	e := g.policy.Load()
	var labels []string
	if e != nil {
		labels = e.Labels()
	}
	g.mu.Lock()
	var rest []string
	for l := range g.stats {
		if !slices.Contains(labels, l) {
			rest = append(rest, l)
		}
	}
	g.mu.Unlock()
	slices.Sort(rest)
	out := make([]SiteStats, 0, len(labels)+len(rest))
	for _, l := range append(labels, rest...) {
		g.mu.Lock()
		s, ok := g.stats[l]
		g.mu.Unlock()
		if !ok {
			s = &siteStats{} // asked nothing yet; a report does not make it a label seen
		}
		st := SiteStats{
			Label: l, Sent: s.sent.Load(), Waited: s.waited.Load(), WaitTotal: time.Duration(s.waitNanos.Load()),
			Refused: s.refused.Load(), Throttled: s.throttled.Load(), Closures: s.closures.Load(),
		}
		if cu := s.closedUntil.Load(); cu > time.Now().UnixNano() {
			st.ClosedUntil = time.Unix(0, cu)
		}
		s.mu.Lock()
		st.Sites = slices.Clone(s.sites)
		s.mu.Unlock()
		var r *primitives.Rate
		if e != nil {
			r = e.rateOf(l)
		}
		if r != nil {
			st.Rate = *r
			for _, site := range st.Sites {
				gs, err := g.backend.GateState(ctx, site, withHold(*r, time.Minute))
				if err != nil {
					continue
				}
				if gs.ClosedUntil.After(st.ClosedUntil) {
					st.ClosedUntil = gs.ClosedUntil
				}
				st.Wait = max(st.Wait, gs.Wait)
			}
		}
		out = append(out, st)
	}
	return out
}

func withHold(r primitives.Rate, hold time.Duration) primitives.Rate {
	r.Hold = hold
	return r
}

// wrap is t with every request through the gate as owner's; t itself when g is nil.
func (g *Gate) wrap(t http.RoundTripper, owner string) http.RoundTripper {
	if g == nil {
		return t
	}
	return &gatedTransport{next: t, gate: g, owner: owner}
}

// gatedTransport sends a request once its site's gate admits it.
type gatedTransport struct {
	next  http.RoundTripper
	gate  *Gate
	owner string // the plugin whose requests these are
}

// sideCallTimeout bounds a release or a closure, which run on a context of their own: a
// request cancelled at its deadline still gives its place back and records its 429.
const sideCallTimeout = 5 * time.Second

func (t *gatedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	e := t.gate.policy.Load()
	if e == nil {
		return t.next.RoundTrip(req)
	}
	label, site, rate := e.rateFor(req.URL, t.owner)
	st := t.gate.stat(label)
	if rate == nil {
		st.sent.Add(1)
		return t.next.RoundTrip(req)
	}
	st.saw(site)
	ctx := req.Context()
	pass, err := t.gate.admit(ctx, e, site, *rate, st)
	if err != nil {
		return nil, err
	}
	st.sent.Add(1)
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		t.gate.release(ctx, site, pass.Token)
		return nil, err
	}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		t.gate.throttled(ctx, e, site, resp, st)
	}
	if pass.Token != "" {
		resp.Body = &releasingBody{ReadCloser: resp.Body, release: func() { t.gate.release(ctx, site, pass.Token) }}
	}
	return resp, nil
}

// admit waits for site's turn under r: each refusal's wait, as long as the total stays
// within the policy's max_wait and ctx's deadline; past them it is a *RateLimitedError
// without waiting. A backend error is a *GateError: the gate fails closed.
func (g *Gate) admit(ctx context.Context, e *Egress, site string, r primitives.Rate, st *siteStats) (primitives.GatePass, error) {
	start := time.Now()
	end := start.Add(e.maxWait)
	// The place a request holds ends with its context (the request's timeout), and at
	// most a minute after it has none: a daemon that dies gives it back by then.
	r.Hold = time.Minute
	if d, ok := ctx.Deadline(); ok {
		r.Hold = min(max(time.Until(d), 0)+time.Second, primitives.MaxGateHold)
		if d.Before(end) {
			end = d
		}
	}
	waited := false
	for {
		pass, err := g.backend.GateAcquire(ctx, site, r)
		if err != nil {
			if ctx.Err() != nil {
				return pass, ctx.Err()
			}
			return pass, &GateError{Site: site, Err: err}
		}
		if pass.OK {
			if waited {
				st.waited.Add(1)
				st.waitNanos.Add(int64(time.Since(start)))
			}
			return pass, nil
		}
		wait := max(pass.Wait, time.Millisecond)
		if time.Now().Add(wait).After(end) {
			st.refused.Add(1)
			return pass, &RateLimitedError{Site: site, Reason: pass.Reason, Wait: pass.Wait, Allowed: end.Sub(start)}
		}
		waited = true
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return pass, ctx.Err()
		case <-timer.C:
		}
	}
}

// release gives back the place token holds at site ("" holds none), on a context of its
// own: the request's may have ended. An error leaves the place to its hold's end.
func (g *Gate) release(ctx context.Context, site, token string) {
	if token == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sideCallTimeout)
	defer cancel()
	_ = g.backend.GateRelease(ctx, site, token)
}

// throttled records a 429 or 503 from site and closes it for every caller on every
// daemon for its Retry-After, capped by the policy's max_retry_after; a 429 without
// Retry-After closes it for Throttle429, a 503 without one not at all (a 503 is as often
// an outage as a throttle). A closure that fails leaves the rate alone to meter the site.
func (g *Gate) throttled(ctx context.Context, e *Egress, site string, resp *http.Response, st *siteStats) {
	st.throttled.Add(1)
	d, ok := retryAfter(resp.Header.Get("Retry-After"), time.Now())
	switch {
	case !ok && resp.StatusCode == http.StatusTooManyRequests:
		d = Throttle429
	case !ok || d <= 0:
		return
	}
	d = min(d, e.maxRetryAfter)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sideCallTimeout)
	defer cancel()
	until, err := g.backend.GateClose(ctx, site, d)
	if err != nil {
		return
	}
	st.closures.Add(1)
	for {
		old := st.closedUntil.Load()
		if until.UnixNano() <= old || st.closedUntil.CompareAndSwap(old, until.UnixNano()) {
			return
		}
	}
}

// retryAfter parses a Retry-After value, delta-seconds or an HTTP-date, into a wait from
// now; ok is false when v is neither. A delta too large for a Duration is the largest.
func retryAfter(v string, now time.Time) (d time.Duration, ok bool) {
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseUint(v, 10, 64); err == nil {
		if n > uint64(1<<63-1)/uint64(time.Second) {
			return 1<<63 - 1, true
		}
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return t.Sub(now), true
	}
	return 0, false
}

// releasingBody gives back the request's place in flight when it is closed, once.
type releasingBody struct {
	io.ReadCloser
	once    sync.Once
	release func()
}

func (b *releasingBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.release)
	return err
}

// RateLimitedError is a request its site's gate did not admit within the wait allowed.
// Nothing was sent.
type RateLimitedError struct {
	Site    string        // host:port
	Reason  string        // primitives.GateClosed, GateBusy or GateRate
	Wait    time.Duration // how long until it could be admitted (a lower bound)
	Allowed time.Duration // the wait it was allowed: max_wait, or less by its deadline
}

func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("httpfn: %s: rate limited (%s): %v to wait is past the %v allowed", e.Site, e.Reason, e.Wait.Round(time.Millisecond), e.Allowed.Round(time.Millisecond))
}

// GateError is a gate that could not be asked: the backend failed. The request is not
// sent (the gate fails closed: the operator's limit holds while the backend is away).
type GateError struct {
	Site string
	Err  error
}

func (e *GateError) Error() string {
	return fmt.Sprintf("httpfn: %s: egress gate unavailable, request not sent: %v", e.Site, e.Err)
}

func (e *GateError) Unwrap() error { return e.Err }

// gateFailure is the guest's error for a request the gate stopped (RateLimited, or
// Unavailable when the backend failed), nil for any other err.
func gateFailure(err error) *abi.Error {
	var rl *RateLimitedError
	var ge *GateError
	switch {
	case errors.As(err, &rl):
		e := abi.Errorf(abi.RateLimited, "%s", rl.Error())
		e.WaitMs = max(rl.Wait.Milliseconds(), 1)
		return e
	case errors.As(err, &ge):
		return abi.Errorf(abi.Unavailable, "%s", ge.Error())
	}
	return nil
}
