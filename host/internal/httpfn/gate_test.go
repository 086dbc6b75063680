package httpfn_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/httpfn"
	"github.com/fleethost/fleet/primitives/memory"
)

// gated is a client of srv's host under the egress policy written as JSON (%s in it is
// srv's host:port), on a fresh memory backend.
func gated(t *testing.T, srvs []*server, policy string) (*httpfn.Client, *httpfn.Gate) {
	t.Helper()
	hosts := make([]any, len(srvs))
	granted := make([]string, len(srvs))
	for i, s := range srvs {
		hosts[i], granted[i] = s.host(), s.host()
	}
	e, err := httpfn.ParseEgress("egress.json", []byte(fmt.Sprintf(policy, hosts...)))
	if err != nil {
		t.Fatal(err)
	}
	b := memory.New(memory.Options{})
	t.Cleanup(func() { b.Close() })
	g := httpfn.NewGate(b, e)
	return newClient(t, httpfn.Policy{Hosts: granted, AllowPrivate: true}, httpfn.WithGate(g, "plugin-a")), g
}

func statOf(t *testing.T, g *httpfn.Gate, label string) httpfn.SiteStats {
	t.Helper()
	for _, st := range g.Stats(context.Background()) {
		if st.Label == label {
			return st
		}
	}
	t.Fatalf("Stats() has no label %q", label)
	return httpfn.SiteStats{}
}

// TestGateBurstThenRateLimited: an idle site admits its burst at once; the next request,
// whose turn is past max_wait, is RateLimited with the wait it needs, and is not sent.
func TestGateBurstThenRateLimited(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {})
	c, g := gated(t, []*server{srv}, `{"rates": {"%s": {"per_second": 0.1, "burst": 3}}, "max_wait": "100ms"}`)
	for i := range 3 {
		if r := do(t, c, abi.HTTPRequest{URL: srv.URL}); r.Status != 200 {
			t.Fatalf("request %d: status %d (%s), want 200", i, r.Status, r.Error)
		}
	}
	_, e := c.Do(context.Background(), abi.HTTPRequest{URL: srv.URL})
	wantKind(t, e, abi.RateLimited, "rate limited (rate)")
	if e.WaitMs < 9000 || e.WaitMs > 10000 {
		t.Errorf("WaitMs = %d, want ~10000 (one request at 0.1/s)", e.WaitMs)
	}
	if n := srv.requests.Load(); n != 3 {
		t.Errorf("the site saw %d requests, want 3: a refused request is not sent", n)
	}
	st := statOf(t, g, srv.host())
	if st.Sent != 3 || st.Refused != 1 || st.Waited != 0 {
		t.Errorf("Stats = sent %d, refused %d, waited %d, want 3, 1, 0", st.Sent, st.Refused, st.Waited)
	}
	if st.Wait <= 0 {
		t.Errorf("Stats.Wait = %v, want > 0 once the burst is spent", st.Wait)
	}
}

// TestGateWaitsItsTurn: a request whose turn comes within max_wait waits for it and is
// sent, counted as waited.
func TestGateWaitsItsTurn(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {})
	c, g := gated(t, []*server{srv}, `{"rates": {"%s": {"per_second": 20, "burst": 1}}, "max_wait": "5s"}`)
	for i := range 3 {
		if r := do(t, c, abi.HTTPRequest{URL: srv.URL}); r.Status != 200 {
			t.Fatalf("request %d: status %d (%s), want 200", i, r.Status, r.Error)
		}
	}
	st := statOf(t, g, srv.host())
	if st.Sent != 3 || st.Waited != 2 || st.WaitTotal <= 0 || st.Refused != 0 {
		t.Errorf("Stats = sent %d, waited %d (%v), refused %d, want 3, 2 (> 0), 0", st.Sent, st.Waited, st.WaitTotal, st.Refused)
	}
}

// TestGateDeadline: a request waits no longer than its own deadline: one whose turn is
// past it is RateLimited at once, within max_wait.
func TestGateDeadline(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {})
	c, _ := gated(t, []*server{srv}, `{"rates": {"%s": {"per_second": 1, "burst": 1}}, "max_wait": "1m"}`)
	do(t, c, abi.HTTPRequest{URL: srv.URL})
	_, e := c.Do(context.Background(), abi.HTTPRequest{URL: srv.URL, TimeoutMs: 200})
	wantKind(t, e, abi.RateLimited, "allowed")
	if n := srv.requests.Load(); n != 1 {
		t.Errorf("the site saw %d requests, want 1", n)
	}
}

// TestGateRetryAfterCapped: a 429 with a Retry-After far in the future closes the site
// for max_retry_after, not for it: the closure's end is read from the gate, not waited
// for, and the next request is refused unsent.
func TestGateRetryAfterCapped(t *testing.T) {
	for _, ra := range []string{"99999999", "18446744073709551615", "Fri, 31 Dec 9999 23:59:59 GMT"} {
		t.Run(ra, func(t *testing.T) {
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Retry-After", ra)
				w.WriteHeader(http.StatusTooManyRequests)
			})
			c, g := gated(t, []*server{srv}, `{"rates": {"%s": {"per_second": 100}}, "max_wait": "0s", "max_retry_after": "3m"}`)
			before := time.Now()
			if r := do(t, c, abi.HTTPRequest{URL: srv.URL}); r.Status != 429 {
				t.Fatalf("status %d, want the 429 passed to the guest", r.Status)
			}
			st := statOf(t, g, srv.host())
			if lo, hi := before.Add(3*time.Minute), time.Now().Add(3*time.Minute); st.ClosedUntil.Before(lo.Add(-time.Second)) || st.ClosedUntil.After(hi.Add(time.Second)) {
				t.Errorf("ClosedUntil = %v, want max_retry_after (3m) from the 429, %v..%v", st.ClosedUntil, lo, hi)
			}
			if st.Throttled != 1 || st.Closures != 1 {
				t.Errorf("Stats = throttled %d, closures %d, want 1, 1", st.Throttled, st.Closures)
			}
			_, e := c.Do(context.Background(), abi.HTTPRequest{URL: srv.URL})
			wantKind(t, e, abi.RateLimited, "(closed)")
			if e.WaitMs < 170_000 || e.WaitMs > 180_000 {
				t.Errorf("WaitMs = %d, want ~180000", e.WaitMs)
			}
			if n := srv.requests.Load(); n != 1 {
				t.Errorf("the site saw %d requests, want 1: nothing is sent while it is closed", n)
			}
		})
	}
}

// TestGateThrottleWithoutRetryAfter: a 429 without Retry-After closes its site for
// Throttle429; a 503 without one does not close it.
func TestGateThrottleWithoutRetryAfter(t *testing.T) {
	for _, tt := range []struct {
		status int
		closed bool
	}{{429, true}, {503, false}} {
		t.Run(fmt.Sprint(tt.status), func(t *testing.T) {
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(tt.status) })
			c, g := gated(t, []*server{srv}, `{"rates": {"%s": {"per_second": 100}}, "max_wait": "0s"}`)
			before := time.Now()
			do(t, c, abi.HTTPRequest{URL: srv.URL})
			st := statOf(t, g, srv.host())
			if got := !st.ClosedUntil.IsZero(); got != tt.closed {
				t.Fatalf("closed = %v (until %v), want %v", got, st.ClosedUntil, tt.closed)
			}
			if tt.closed && st.ClosedUntil.After(time.Now().Add(httpfn.Throttle429)) || tt.closed && st.ClosedUntil.Before(before.Add(httpfn.Throttle429-100*time.Millisecond)) {
				t.Errorf("ClosedUntil = %v, want %v after the 429", st.ClosedUntil, httpfn.Throttle429)
			}
		})
	}
}

// TestGateConcurrency: a site with concurrency 1 admits one request at a time: a second
// is refused (busy) while the first's body is open, and admitted once it is read.
func TestGateConcurrency(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 1)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			arrived <- struct{}{}
			<-release
		}
	})
	c, _ := gated(t, []*server{srv}, `{"rates": {"%s": {"per_second": 1000, "concurrency": 1}}, "max_wait": "0s"}`)
	done := make(chan abi.HTTPReply)
	go func() {
		r, _ := c.Do(context.Background(), abi.HTTPRequest{URL: srv.URL + "/slow"})
		done <- r
	}()
	<-arrived
	_, e := c.Do(context.Background(), abi.HTTPRequest{URL: srv.URL})
	wantKind(t, e, abi.RateLimited, "(busy)")
	close(release)
	if r := <-done; r.Status != 200 {
		t.Fatalf("the slow request: status %d (%s)", r.Status, r.Error)
	}
	if r := do(t, c, abi.HTTPRequest{URL: srv.URL}); r.Status != 200 {
		t.Fatalf("after the first ended: status %d (%s), want 200: its place is given back", r.Status, r.Error)
	}
}

// TestGateRedirectHop: every hop passes the gate of its own site: a redirect to a site
// whose budget is spent is RateLimited, and that site is not contacted.
func TestGateRedirectHop(t *testing.T) {
	to := newServer(t, func(w http.ResponseWriter, r *http.Request) {})
	from := newServer(t, func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, to.URL+"/next", http.StatusFound) })
	c, _ := gated(t, []*server{from, to}, `{"rates": {"%s": {"per_second": 100}, "%s": {"per_second": 0.01, "burst": 1}}, "max_wait": "0s"}`)
	do(t, c, abi.HTTPRequest{URL: to.URL})
	_, e := c.Do(context.Background(), abi.HTTPRequest{URL: from.URL})
	wantKind(t, e, abi.RateLimited, to.host())
	if n := to.requests.Load(); n != 1 {
		t.Errorf("the redirect's target saw %d requests, want 1 (only the direct one)", n)
	}
}

// TestGateSharedAcrossClients: two plugins' clients on one gate share a site's budget.
func TestGateSharedAcrossClients(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {})
	c1, g := gated(t, []*server{srv}, `{"rates": {"%s": {"per_second": 0.01, "burst": 1}}, "max_wait": "0s"}`)
	c2 := newClient(t, httpfn.Policy{Hosts: []string{srv.host()}, AllowPrivate: true}, httpfn.WithGate(g, "plugin-b"))
	do(t, c1, abi.HTTPRequest{URL: srv.URL})
	_, e := c2.Do(context.Background(), abi.HTTPRequest{URL: srv.URL})
	wantKind(t, e, abi.RateLimited, "rate limited")
}

// TestGatePerPlugin: under a per_plugin rate each plugin has a budget of its own at the
// site (another plugin's spent budget admits this one's request), while one plugin's
// second client still shares its own.
func TestGatePerPlugin(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {})
	a1, g := gated(t, []*server{srv}, `{"rates": {"%s": {"per_second": 0.01, "burst": 1, "per_plugin": true}}, "max_wait": "0s"}`)
	policy := httpfn.Policy{Hosts: []string{srv.host()}, AllowPrivate: true}
	a2 := newClient(t, policy, httpfn.WithGate(g, "plugin-a"))
	b := newClient(t, policy, httpfn.WithGate(g, "plugin-b"))
	do(t, a1, abi.HTTPRequest{URL: srv.URL})
	do(t, b, abi.HTTPRequest{URL: srv.URL})
	_, e := a2.Do(context.Background(), abi.HTTPRequest{URL: srv.URL})
	wantKind(t, e, abi.RateLimited, "rate limited")
	if n := srv.requests.Load(); n != 2 {
		t.Errorf("the site saw %d requests, want 2 (one per plugin)", n)
	}
}

// TestGatePolicySwap: SetPolicy takes effect on the next request; nil gates nothing, and
// a host no pattern covers and no default is not gated (label none).
func TestGatePolicySwap(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {})
	c, g := gated(t, []*server{srv}, `{"rates": {"%s": {"per_second": 0.01, "burst": 1}}, "max_wait": "0s"}`)
	do(t, c, abi.HTTPRequest{URL: srv.URL})
	if _, e := c.Do(context.Background(), abi.HTTPRequest{URL: srv.URL}); e == nil || e.Kind != abi.RateLimited {
		t.Fatalf("Do() = %v, want RateLimited", e)
	}
	g.SetPolicy(nil)
	do(t, c, abi.HTTPRequest{URL: srv.URL})
	e, err := httpfn.ParseEgress("egress.json", []byte(`{"rates": {"elsewhere.example": {"per_second": 0.01}}}`))
	if err != nil {
		t.Fatal(err)
	}
	g.SetPolicy(e)
	for range 3 {
		do(t, c, abi.HTTPRequest{URL: srv.URL})
	}
	if st := statOf(t, g, httpfn.LabelNone); st.Sent != 3 {
		t.Errorf("Stats[none].Sent = %d, want 3", st.Sent)
	}
	if n := srv.requests.Load(); n != 5 {
		t.Errorf("the site saw %d requests, want 5", n)
	}
}

// TestGateFailsClosed: a gate whose backend fails sends nothing and answers Unavailable.
func TestGateFailsClosed(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {})
	e, err := httpfn.ParseEgress("egress.json", []byte(fmt.Sprintf(`{"rates": {%q: {"per_second": 100}}}`, srv.host())))
	if err != nil {
		t.Fatal(err)
	}
	b := memory.New(memory.Options{})
	b.Close()
	c := newClient(t, httpfn.Policy{Hosts: []string{srv.host()}, AllowPrivate: true}, httpfn.WithGate(httpfn.NewGate(b, e), "plugin-a"))
	_, ae := c.Do(context.Background(), abi.HTTPRequest{URL: srv.URL})
	wantKind(t, ae, abi.Unavailable, "egress gate unavailable")
	if n := srv.requests.Load(); n != 0 {
		t.Errorf("the site saw %d requests, want 0", n)
	}
}
