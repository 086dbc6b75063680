// Package demosite is a small web site behind a clearance cookie, on loopback, for the example plugins' end-to-end tests and the demo.
//
// The site has two kinds of page:
//
//	GET /clearance   takes ClearanceDelay, then issues a clearance cookie:
//	                 Set-Cookie: cf_clearance=<random>; Path=/
//	                 or, while the page is broken (BreakClearance), 503 at once with
//	                 X-Demosite-Reason: broken
//	POST /clearance/break, POST /clearance/mend
//	                 break and mend the clearance page (BreakClearance), for a demo
//	                 of a harvest that keeps failing; 204
//	GET /page/{n}    (any path under /page/) 200 with <title>page n</title> for a
//	                 valid cookie; 403 without one, with an unknown or revoked one, or
//	                 with one already used MaxUses times (stale)
//
// A 403 carries the reason in the X-Demosite-Reason header: no-cookie, unknown, stale or
// revoked. The site counts what a test needs to prove a scraper right: harvests, the
// most /clearance requests ever in flight at once, 200s per path, 403s and the cookies
// it refused.
package demosite

import (
	"context"
	"crypto/rand"
	"fmt"
	"html"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// CookieName is the clearance cookie's name.
const CookieName = "cf_clearance"

// The defaults of Site's fields.
const (
	DefaultClearanceDelay = 5 * time.Millisecond
	DefaultMaxUses        = 25
)

// Reasons for a 403, in the X-Demosite-Reason header.
const (
	ReasonNoCookie = "no-cookie"
	ReasonUnknown  = "unknown"
	ReasonStale    = "stale"
	ReasonRevoked  = "revoked"
	// ReasonBroken is the X-Demosite-Reason of a /clearance answered 503 while the page
	// is broken (BreakClearance).
	ReasonBroken = "broken"
)

// Site is the demo web site. Make one with New, set its fields, then Start it (or serve
// its Handler yourself); Close it when done. Its methods are safe for concurrent use.
//
//	site := demosite.New()
//	site.MaxUses = 3
//	site.Start()
//	defer site.Close()
//	resp, err := http.Get(site.URL() + "/clearance")
type Site struct {
	// ClearanceDelay is how long GET /clearance takes before it answers, so that two
	// harvests that overlap are seen overlapping. Read once, by Start or Handler.
	// default: 5ms (DefaultClearanceDelay)
	ClearanceDelay time.Duration
	// MaxUses is how many /page/ requests one cookie serves; the next is a 403 (stale).
	// A negative value never makes a cookie stale. Read once, by Start or Handler.
	// default: 25 (DefaultMaxUses)
	MaxUses int

	freeze  sync.Once
	delay   time.Duration // immutable after freeze
	maxUses int           // immutable after freeze
	handler http.Handler  // immutable after freeze
	closing chan struct{} // closed by Close: ends /clearance delays at once

	mu       sync.Mutex
	idle     *sync.Cond          // on mu: signalled when active drops to 0
	active   int                 // guarded by mu: handlers running
	closed   bool                // guarded by mu: Close has begun
	cookies  map[string]*cookie  // guarded by mu
	served   map[string]int      // guarded by mu: 200s by path
	rejected map[string]struct{} // guarded by mu: cookie values answered 403

	harvests   atomic.Int64
	forbidden  atomic.Int64
	broken     atomic.Bool  // BreakClearance
	refused    atomic.Int64 // /clearance requests answered 503 while broken
	inFlight   atomic.Int64 // /clearance requests being handled
	maxOverlap atomic.Int64 // the most inFlight ever was

	startOnce sync.Once
	closeOnce sync.Once
	srv       *http.Server  // set by Start
	addr      string        // set by Start: host:port
	serveDone chan struct{} // set by Start: closed when Serve returns
}

// cookie is one issued clearance cookie. Guarded by Site.mu.
type cookie struct {
	uses    int
	revoked bool
}

// New returns a Site with the default settings, not yet listening.
func New() *Site {
	s := &Site{
		ClearanceDelay: DefaultClearanceDelay,
		MaxUses:        DefaultMaxUses,
		closing:        make(chan struct{}),
		cookies:        make(map[string]*cookie),
		served:         make(map[string]int),
		rejected:       make(map[string]struct{}),
	}
	s.idle = sync.NewCond(&s.mu)
	return s
}

// Handler returns the site's handler, to serve some other way (httptest.NewServer). The
// fields are read on the first call to Handler or Start and not after.
func (s *Site) Handler() http.Handler {
	s.freeze.Do(func() {
		s.delay = s.ClearanceDelay
		if s.delay < 0 {
			s.delay = 0
		}
		s.maxUses = s.MaxUses
		mux := http.NewServeMux()
		mux.HandleFunc("GET /clearance", s.clearance)
		mux.HandleFunc("POST /clearance/break", func(w http.ResponseWriter, _ *http.Request) {
			s.BreakClearance(true)
			w.WriteHeader(http.StatusNoContent)
		})
		mux.HandleFunc("POST /clearance/mend", func(w http.ResponseWriter, _ *http.Request) {
			s.BreakClearance(false)
			w.WriteHeader(http.StatusNoContent)
		})
		mux.HandleFunc("GET /page/", s.page)
		s.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !s.enter() {
				http.Error(w, "demosite: closed", http.StatusServiceUnavailable)
				return
			}
			defer s.leave()
			mux.ServeHTTP(w, r)
		})
	})
	return s.handler
}

// enter counts a handler in, unless the site is closed.
func (s *Site) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.active++
	return true
}

// leave counts a handler out, and wakes Close when it was the last.
func (s *Site) leave() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.active--
	if s.active == 0 {
		s.idle.Broadcast()
	}
}

// Start serves the site on 127.0.0.1 on a free port. Like httptest.Server.Start, it
// panics if it cannot listen, or if it was started already or closed.
func (s *Site) Start() {
	started := false
	s.startOnce.Do(func() {
		started = true
		select {
		case <-s.closing:
			panic("demosite: Start after Close")
		default:
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			panic(fmt.Sprintf("demosite: listen on 127.0.0.1: %v", err))
		}
		s.addr = ln.Addr().String()
		s.srv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
		s.serveDone = make(chan struct{})
		go func() {
			defer close(s.serveDone)
			_ = s.srv.Serve(ln) // returns http.ErrServerClosed once Close runs
		}()
	})
	if !started {
		panic("demosite: Start called twice")
	}
}

// URL is the site's base URL ("http://127.0.0.1:port"), or "" before Start. Call it
// after Start returns (as with every field Start sets).
func (s *Site) URL() string {
	if s.addr == "" {
		return ""
	}
	return "http://" + s.addr
}

// Host is the site's host:port ("127.0.0.1:port"), as a grant names it, or "" before
// Start.
func (s *Site) Host() string { return s.addr }

// Close stops the site: /clearance requests still waiting end without a cookie, open
// connections are closed, later requests (through Handler) are answered 503, and Close
// returns once no handler runs and Start's server has stopped. It is safe to call more
// than once, and before Start.
//
// It does not drain gracefully (http.Server.Shutdown): a connection a client opened but
// never used would hold it for 5 seconds, and a test site has nothing to drain.
func (s *Site) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		close(s.closing)
		if s.srv != nil {
			err = s.srv.Close()
			<-s.serveDone
		}
		s.mu.Lock()
		for s.active > 0 {
			s.idle.Wait()
		}
		s.mu.Unlock()
	})
	return err
}

// clearance issues a new cookie after the delay, or answers 503 while broken.
func (s *Site) clearance(w http.ResponseWriter, r *http.Request) {
	if s.broken.Load() {
		s.refused.Add(1)
		w.Header().Set("X-Demosite-Reason", ReasonBroken)
		http.Error(w, "clearance page broken", http.StatusServiceUnavailable)
		return
	}
	n := s.inFlight.Add(1)
	for {
		m := s.maxOverlap.Load()
		if n <= m || s.maxOverlap.CompareAndSwap(m, n) {
			break
		}
	}
	value, ok := s.harvest(r.Context())
	// Leave the in-flight count before the client can see the answer, so that a
	// harvest that starts after this one ends is never counted as overlapping it.
	s.inFlight.Add(-1)
	if !ok {
		http.Error(w, "clearance abandoned", http.StatusServiceUnavailable)
		return
	}
	w.Header().Add("Set-Cookie", CookieName+"="+value+"; Path=/")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "clearance granted")
}

// harvest waits the delay, then records and returns a fresh cookie value; false if the
// request or the site ended first.
func (s *Site) harvest(ctx context.Context) (string, bool) {
	if s.delay > 0 {
		t := time.NewTimer(s.delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return "", false
		case <-s.closing:
			return "", false
		}
	}
	value := rand.Text()
	s.mu.Lock()
	s.cookies[value] = &cookie{}
	s.mu.Unlock()
	s.harvests.Add(1)
	return value, true
}

// page serves /page/... to a valid cookie.
func (s *Site) page(w http.ResponseWriter, r *http.Request) {
	reason := ""
	value := ""
	if c, err := r.Cookie(CookieName); err != nil || c.Value == "" {
		reason = ReasonNoCookie
	} else {
		value = c.Value
		reason = s.use(value, r.URL.Path)
	}
	if reason != "" {
		s.forbidden.Add(1)
		w.Header().Set("X-Demosite-Reason", reason)
		http.Error(w, "forbidden: "+reason, http.StatusForbidden)
		return
	}
	n := html.EscapeString(strings.TrimPrefix(r.URL.Path, "/page/"))
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprintf(w, "<!doctype html>\n<html><head><title>page %s</title></head><body><h1>page %s</h1></body></html>\n", n, n)
}

// use spends one use of the cookie value on path, or says why it cannot.
func (s *Site) use(value, path string) (reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.cookies[value]
	switch {
	case c == nil:
		reason = ReasonUnknown
	case c.revoked:
		reason = ReasonRevoked
	case s.maxUses >= 0 && c.uses >= s.maxUses:
		reason = ReasonStale
	default:
		c.uses++
		s.served[path]++
		return ""
	}
	s.rejected[value] = struct{}{}
	return reason
}

// Revoke makes every cookie issued so far invalid (403, revoked), as a site does when it
// rotates its clearance, and returns how many were still usable. Cookies issued later
// are valid.
func (s *Site) Revoke() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.cookies {
		if !c.revoked && (s.maxUses < 0 || c.uses < s.maxUses) {
			n++
		}
		c.revoked = true
	}
	return n
}

// BreakClearance breaks the clearance page (true: every GET /clearance answers 503 at
// once, issuing nothing) or mends it (false), as a site whose challenge is down or has
// changed. Safe to call at any time, from any goroutine.
func (s *Site) BreakClearance(broken bool) { s.broken.Store(broken) }

// ClearanceRefused is how many GET /clearance were answered 503 because the page was
// broken.
func (s *Site) ClearanceRefused() int { return int(s.refused.Load()) }

// Harvests is how many cookies /clearance has issued.
func (s *Site) Harvests() int { return int(s.harvests.Load()) }

// ClearanceInFlight is how many /clearance requests are being handled now.
func (s *Site) ClearanceInFlight() int { return int(s.inFlight.Load()) }

// MaxClearanceOverlap is the most /clearance requests that were ever handled at once:
// 1 proves that harvests never overlapped (0: there was none).
func (s *Site) MaxClearanceOverlap() int { return int(s.maxOverlap.Load()) }

// Served is how many times path (e.g. "/page/7") was answered 200.
func (s *Site) Served(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.served[path]
}

// ServedPaths returns a copy of the 200 counts by path.
func (s *Site) ServedPaths() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.served)
}

// Forbidden is how many /page/ requests were answered 403, for any reason.
func (s *Site) Forbidden() int { return int(s.forbidden.Load()) }

// Rejected returns the distinct cookie values that were answered 403 (unknown, stale or
// revoked), sorted.
func (s *Site) Rejected() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.rejected))
	for v := range s.rejected {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}
