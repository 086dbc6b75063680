package httpfn_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/httpfn"
)

// Every test talks only to loopback servers it starts itself. Names are resolved by
// testLookup, which knows a few test names and fails every other, so no DNS query leaves
// the process.

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := waitNoLeaks(); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines left behind:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// waitNoLeaks waits (up to 10s) until no goroutine of net/http's client or server
// remains, and returns the stacks of those that do.
func waitNoLeaks() string {
	var stacks string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		stacks = ""
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "net/http.") || strings.Contains(g, "httpfn") {
				if strings.Contains(g, "TestMain") || strings.Contains(g, "waitNoLeaks") {
					continue
				}
				stacks += g + "\n\n"
			}
		}
		if stacks == "" {
			return ""
		}
	}
	return stacks
}

// server is a loopback test server that counts the requests it sees.
type server struct {
	*httptest.Server
	requests atomic.Int64
	conns    atomic.Int64
}

func newServer(t testing.TB, h http.HandlerFunc) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		h(w, r)
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// host is the server's host:port, as a grant names it.
func (s *server) host() string { return strings.TrimPrefix(s.URL, "http://") }

func (s *server) port() string {
	_, port, _ := net.SplitHostPort(s.host())
	return port
}

func newClient(t testing.TB, g httpfn.Policy, opts ...httpfn.Option) *httpfn.Client {
	t.Helper()
	c, err := httpfn.New(g, append([]httpfn.Option{httpfn.WithLookup(testLookup)}, opts...)...)
	if err != nil {
		t.Fatalf("New(%+v) = %v", g, err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// testLookup resolves *.loop.test to loopback, and fails everything else.
func testLookup(ctx context.Context, host string) ([]netip.Addr, error) {
	if host == "loop.test" || strings.HasSuffix(host, ".loop.test") {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func do(t *testing.T, c *httpfn.Client, req abi.HTTPRequest) abi.HTTPReply {
	t.Helper()
	reply, e := c.Do(context.Background(), req)
	if e != nil {
		t.Fatalf("Do(%s %s) = %v, want a reply", req.Method, req.URL, e)
	}
	return reply
}

func wantCode(t *testing.T, reply abi.HTTPReply, code string) {
	t.Helper()
	if reply.ErrorCode != code {
		t.Fatalf("reply.ErrorCode = %q (%s), want %q", reply.ErrorCode, reply.Error, code)
	}
	if reply.Error == "" {
		t.Errorf("reply.Error is empty with ErrorCode %q", code)
	}
}

func wantKind(t *testing.T, e *abi.Error, kind abi.Kind, in string) {
	t.Helper()
	if e == nil {
		t.Fatalf("Do() error = nil, want %s", kind)
	}
	if e.Kind != kind || !strings.Contains(e.Message, in) {
		t.Fatalf("Do() error = %v, want %s containing %q", e, kind, in)
	}
}

func TestDoRoundTrip(t *testing.T) {
	var (
		mu   sync.Mutex
		seen http.Header
		body string
	)
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen, body = r.Header.Clone(), string(b)
		mu.Unlock()
		http.SetCookie(w, &http.Cookie{Name: "a", Value: "1", Path: "/"})
		http.SetCookie(w, &http.Cookie{Name: "b", Value: "2", Path: "/"})
		w.Header()["x-lower"] = []string{"v"} // not canonical on purpose
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "%s %s", r.Method, r.URL.Path)
	})
	c := newClient(t, httpfn.Policy{Hosts: []string{s.host()}, AllowPrivate: true})

	reply := do(t, c, abi.HTTPRequest{
		Method: "POST",
		URL:    s.URL + "/submit?q=1",
		Headers: map[string][]string{
			"x-custom":            {"one", "two"},
			"Cookie":              {"cf_clearance=abc"},
			"User-Agent":          {"fleet-test"},
			"Connection":          {"X-Secret"},
			"X-Secret":            {"must not be sent"},
			"Proxy-Authorization": {"Basic eDp5"},
			"Host":                {s.host()}, // the URL's own host is fine
		},
		Body: []byte("payload"),
	})
	if reply.ErrorCode != "" {
		t.Fatalf("reply error %s: %s", reply.ErrorCode, reply.Error)
	}
	if reply.Status != 200 || string(reply.Body) != "POST /submit" || reply.FinalURL != s.URL+"/submit?q=1" {
		t.Errorf("reply = %d %q at %q, want 200 \"POST /submit\" at %q", reply.Status, reply.Body, reply.FinalURL, s.URL+"/submit?q=1")
	}
	if got := reply.Headers["Set-Cookie"]; len(got) != 2 || got[0] != "a=1; Path=/" || got[1] != "b=2; Path=/" {
		t.Errorf("Set-Cookie = %q, want both cookies", got)
	}
	if got := reply.Headers["X-Lower"]; len(got) != 1 || got[0] != "v" {
		t.Errorf("headers = %v, want X-Lower canonical", reply.Headers)
	}

	mu.Lock()
	defer mu.Unlock()
	if body != "payload" {
		t.Errorf("server body = %q, want %q", body, "payload")
	}
	if got := seen.Values("X-Custom"); len(got) != 2 || got[0] != "one" || got[1] != "two" {
		t.Errorf("server X-Custom = %q, want [one two]", got)
	}
	if seen.Get("Cookie") != "cf_clearance=abc" || seen.Get("User-Agent") != "fleet-test" {
		t.Errorf("server headers = %v, want the guest's Cookie and User-Agent", seen)
	}
	for _, h := range []string{"X-Secret", "Proxy-Authorization"} {
		if v := seen.Get(h); v != "" {
			t.Errorf("server saw %s: %q, want it dropped", h, v)
		}
	}
}

// Keep-alive: sequential requests of one client share connections. (Not exactly one:
// the transport may dial while a finished connection is on its way back to the pool.)
func TestDoReusesConnections(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	c := newClient(t, httpfn.Policy{Hosts: []string{s.host()}, AllowPrivate: true})
	const n = 10
	for i := 0; i < n; i++ {
		if r := do(t, c, abi.HTTPRequest{URL: s.URL}); r.Status != 200 {
			t.Fatalf("request %d: %d %s", i, r.Status, r.Error)
		}
	}
	if got := s.conns.Load(); got >= n {
		t.Errorf("server saw %d connections for %d sequential requests, want fewer", got, n)
	}
}

func TestDoHead(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Method", r.Method)
		io.WriteString(w, "body")
	})
	c := newClient(t, httpfn.Policy{Hosts: []string{s.host()}, AllowPrivate: true})
	r := do(t, c, abi.HTTPRequest{Method: "HEAD", URL: s.URL})
	if r.Status != 200 || len(r.Body) != 0 || r.Headers["X-Method"][0] != "HEAD" {
		t.Errorf("HEAD reply = %d %q %v", r.Status, r.Body, r.Headers)
	}
}

func TestDoHostNotGranted(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {})
	other := newServer(t, func(w http.ResponseWriter, r *http.Request) {})
	tests := []struct {
		name  string
		grant []string
		url   string
		named string
	}{
		{"other port", []string{other.host()}, s.URL, s.host()},
		{"no port in the pattern is the default port only", []string{"127.0.0.1"}, s.URL, s.host()},
		{"name not granted", []string{"a.loop.test:*"}, "http://b.loop.test:" + s.port(), "b.loop.test:" + s.port()},
		{"nothing granted", nil, s.URL, s.host()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClient(t, httpfn.Policy{Hosts: tt.grant, AllowPrivate: true})
			_, e := c.Do(context.Background(), abi.HTTPRequest{URL: tt.url})
			wantKind(t, e, abi.PermissionDenied, `"`+tt.named+`"`)
		})
	}
	if n := s.requests.Load(); n != 0 {
		t.Errorf("server saw %d requests, want 0", n)
	}
}

func TestDoGrantedByWildcardAndAnyPort(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.Host) })
	c := newClient(t, httpfn.Policy{Hosts: []string{"*.loop.test:*"}, AllowPrivate: true})
	r := do(t, c, abi.HTTPRequest{URL: "http://a.b.loop.test:" + s.port() + "/"})
	if r.Status != 200 || string(r.Body) != "a.b.loop.test:"+s.port() {
		t.Errorf("reply = %d %q (%s), want 200 and the name as Host", r.Status, r.Body, r.Error)
	}
}

func TestDoRedirectDenied(t *testing.T) {
	elsewhere := newServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "reached") })
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/away":
			http.Redirect(w, r, elsewhere.URL+"/secret", http.StatusFound)
		case "/ftp":
			http.Redirect(w, r, "ftp://"+elsewhere.host()+"/", http.StatusFound)
		case "/hop":
			http.Redirect(w, r, "/away", http.StatusFound)
		}
	})
	c := newClient(t, httpfn.Policy{Hosts: []string{s.host()}, AllowPrivate: true})
	for _, path := range []string{"/away", "/hop"} {
		r := do(t, c, abi.HTTPRequest{URL: s.URL + path})
		wantCode(t, r, httpfn.CodeRedirectDenied)
		if !strings.Contains(r.Error, elsewhere.host()) {
			t.Errorf("reply.Error = %q, want it to name %s", r.Error, elsewhere.host())
		}
		if r.Status != 0 || r.Body != nil || r.FinalURL != s.URL+"/away" {
			t.Errorf("reply = %d %q at %q, want status 0, no body, final URL %s/away", r.Status, r.Body, r.FinalURL, s.URL)
		}
	}
	r := do(t, c, abi.HTTPRequest{URL: s.URL + "/ftp"})
	wantCode(t, r, httpfn.CodeRedirectDenied)
	if n := elsewhere.requests.Load(); n != 0 {
		t.Errorf("the refused server saw %d requests, want 0", n)
	}
}

func TestDoRedirectChainWithinGrant(t *testing.T) {
	b := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: "final", Value: "yes"})
		fmt.Fprintf(w, "end %s", r.URL.Path)
	})
	a := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/1":
			http.Redirect(w, r, "/2", http.StatusMovedPermanently)
		case "/2":
			http.Redirect(w, r, b.URL+"/3", http.StatusTemporaryRedirect)
		}
	})
	c := newClient(t, httpfn.Policy{Hosts: []string{a.host(), b.host()}, AllowPrivate: true})
	r := do(t, c, abi.HTTPRequest{URL: a.URL + "/1"})
	if r.ErrorCode != "" || r.Status != 200 || string(r.Body) != "end /3" || r.FinalURL != b.URL+"/3" {
		t.Errorf("reply = %d %q at %q (%s), want 200 \"end /3\" at %s/3", r.Status, r.Body, r.FinalURL, r.Error, b.URL)
	}
	if len(r.Headers["Set-Cookie"]) != 1 {
		t.Errorf("Set-Cookie = %q, want the final hop's", r.Headers["Set-Cookie"])
	}
	if a.requests.Load() != 2 || b.requests.Load() != 1 {
		t.Errorf("requests = %d and %d, want 2 and 1", a.requests.Load(), b.requests.Load())
	}
}

func TestDoTooManyRedirects(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Path+"x", http.StatusFound)
	})
	c := newClient(t, httpfn.Policy{Hosts: []string{s.host()}, AllowPrivate: true, MaxRedirects: 5})

	r := do(t, c, abi.HTTPRequest{URL: s.URL + "/", MaxRedirects: 3})
	wantCode(t, r, httpfn.CodeTooManyRedirects)
	if n := s.requests.Load(); n != 4 {
		t.Errorf("server saw %d requests, want 4 (the first and 3 hops)", n)
	}

	s.requests.Store(0)
	r = do(t, c, abi.HTTPRequest{URL: s.URL + "/"}) // the grant's 5
	wantCode(t, r, httpfn.CodeTooManyRedirects)
	if n := s.requests.Load(); n != 6 {
		t.Errorf("server saw %d requests, want 6 (the first and 5 hops)", n)
	}

	// -1 hands the redirect itself to the guest.
	r = do(t, c, abi.HTTPRequest{URL: s.URL + "/", MaxRedirects: -1})
	if r.ErrorCode != "" || r.Status != http.StatusFound || r.Headers["Location"][0] != "/x" {
		t.Errorf("reply = %d %v (%s), want 302 with Location /x", r.Status, r.Headers, r.Error)
	}

	_, e := c.Do(context.Background(), abi.HTTPRequest{URL: s.URL, MaxRedirects: 6})
	wantKind(t, e, abi.LimitExceeded, "max_redirects")
}

func TestDoTimeout(t *testing.T) {
	release := make(chan struct{})
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow-body" {
			w.Header().Set("Content-Length", "100")
			io.WriteString(w, "partial")
			w.(http.Flusher).Flush()
		}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release) // before s.Close (cleanup), so no handler stays blocked
	c := newClient(t, httpfn.Policy{Hosts: []string{s.host()}, AllowPrivate: true, Timeout: 50 * time.Millisecond})

	r := do(t, c, abi.HTTPRequest{URL: s.URL + "/slow"})
	wantCode(t, r, httpfn.CodeTimeout)
	if r.Status != 0 {
		t.Errorf("reply.Status = %d, want 0", r.Status)
	}

	// The headers arrive, the body never ends: the reply keeps the status. On a loaded
	// machine the headers may take longer than the timeout, so the timeout grows until
	// they make it; every attempt must time out.
	slow := newClient(t, httpfn.Policy{Hosts: []string{s.host()}, AllowPrivate: true, Timeout: time.Minute})
	for ms := int64(50); ; ms *= 2 {
		r = do(t, slow, abi.HTTPRequest{URL: s.URL + "/slow-body", TimeoutMs: ms})
		wantCode(t, r, httpfn.CodeTimeout)
		if r.Body != nil {
			t.Errorf("reply.Body = %q, want none", r.Body)
		}
		if r.Status == 200 {
			break
		}
		if r.Status != 0 || ms > 30_000 {
			t.Fatalf("reply.Status = %d with timeout %dms, want 200 once the headers arrive", r.Status, ms)
		}
	}

	_, e := c.Do(context.Background(), abi.HTTPRequest{URL: s.URL, TimeoutMs: 51})
	wantKind(t, e, abi.LimitExceeded, "timeout_ms")
}

func TestDoCanceled(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release)
	c := newClient(t, httpfn.Policy{Hosts: []string{s.host()}, AllowPrivate: true})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-started
		cancel()
	}()
	r, e := c.Do(ctx, abi.HTTPRequest{URL: s.URL})
	if e != nil {
		t.Fatal(e)
	}
	wantCode(t, r, httpfn.CodeCanceled)
}

func TestDoBodyCap(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Kept", "yes")
		n := len(r.URL.Path) - 1 // "/xxxx" answers 4 bytes
		if r.URL.Query().Has("chunked") {
			w.(http.Flusher).Flush() // no Content-Length: the cap is found while reading
		}
		io.WriteString(w, strings.Repeat("b", n))
	})
	c := newClient(t, httpfn.Policy{Hosts: []string{s.host()}, AllowPrivate: true, MaxBody: 10})
	for _, q := range []string{"", "?chunked"} {
		r := do(t, c, abi.HTTPRequest{URL: s.URL + "/" + strings.Repeat("x", 10) + q})
		if r.ErrorCode != "" || len(r.Body) != 10 {
			t.Errorf("10-byte body%s: %d bytes, %s, want all 10", q, len(r.Body), r.Error)
		}
		r = do(t, c, abi.HTTPRequest{URL: s.URL + "/" + strings.Repeat("x", 11) + q})
		wantCode(t, r, httpfn.CodeBodyTooLarge)
		if r.Status != 200 || r.Headers["X-Kept"][0] != "yes" || r.Body != nil {
			t.Errorf("11-byte body%s: reply = %d %v %q, want 200, the headers, no body", q, r.Status, r.Headers, r.Body)
		}
	}
}

func TestDoConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	c := newClient(t, httpfn.Policy{Hosts: []string{addr}, AllowPrivate: true})
	r := do(t, c, abi.HTTPRequest{URL: "http://" + addr + "/"})
	wantCode(t, r, httpfn.CodeRefused)
	if r.Status != 0 {
		t.Errorf("reply.Status = %d, want 0", r.Status)
	}
}

func TestDoDNSFailure(t *testing.T) {
	c := newClient(t, httpfn.Policy{Hosts: []string{"nowhere.test"}, AllowPrivate: true})
	r := do(t, c, abi.HTTPRequest{URL: "http://nowhere.test/"})
	wantCode(t, r, httpfn.CodeDNS)
	if !strings.Contains(r.Error, "nowhere.test") {
		t.Errorf("reply.Error = %q, want it to name the host", r.Error)
	}
}

// Without AllowPrivate a loopback target is refused at dial time, however it is named,
// and the server never sees a request.
func TestDoAddressDenied(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {})
	c := newClient(t, httpfn.Policy{Hosts: []string{s.host(), "*.loop.test:*", "[::ffff:127.0.0.1]:*"}})
	for _, u := range []string{
		s.URL,
		"http://rebind.loop.test:" + s.port() + "/", // a name that resolves to 127.0.0.1
		"http://[::ffff:127.0.0.1]:" + s.port() + "/",
	} {
		r := do(t, c, abi.HTTPRequest{URL: u})
		wantCode(t, r, httpfn.CodeAddressDenied)
		if !strings.Contains(r.Error, "127.0.0.1") {
			t.Errorf("Do(%s): reply.Error = %q, want it to name the address", u, r.Error)
		}
	}
	if n := s.requests.Load(); n != 0 {
		t.Errorf("server saw %d requests, want 0", n)
	}
	if n := s.conns.Load(); n != 0 {
		t.Errorf("server saw %d connections, want 0", n)
	}
}

// proxy is a forward proxy for plain http that answers itself, naming what it was asked.
func newProxy(t *testing.T) *server {
	return newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if !r.URL.IsAbs() {
			http.Error(w, "not a proxy request", http.StatusBadRequest)
			return
		}
		if r.URL.Path == "/to-loopback" {
			http.Redirect(w, r, "http://127.0.0.1:1/", http.StatusFound)
			return
		}
		fmt.Fprintf(w, "proxied %s auth=%q", r.URL, r.Header.Get("Proxy-Authorization"))
	})
}

func TestDoProxy(t *testing.T) {
	p := newProxy(t)
	other := newProxy(t)
	c := newClient(t, httpfn.Policy{
		Hosts:   []string{"origin.test"},
		Proxies: []string{"http://user:pw@" + p.host()},
		// AllowPrivate false: the granted proxy's own address is trusted.
	})

	r := do(t, c, abi.HTTPRequest{URL: "http://origin.test/page", Proxy: "http://" + p.host()})
	if r.ErrorCode != "" || r.Status != 200 || !strings.HasPrefix(string(r.Body), "proxied http://origin.test/page auth=\"Basic ") {
		t.Errorf("reply = %d %q (%s), want the proxy's answer with the grant's credentials", r.Status, r.Body, r.Error)
	}
	r = do(t, c, abi.HTTPRequest{URL: "http://origin.test/2", Proxy: "http://user:pw@" + p.host() + "/"})
	if r.Status != 200 {
		t.Errorf("with the grant's own credentials: reply = %d (%s), want 200", r.Status, r.Error)
	}
	if n := p.requests.Load(); n != 2 {
		t.Errorf("proxy saw %d requests, want 2", n)
	}

	tests := []struct {
		name  string
		proxy string
		kind  abi.Kind
	}{
		{"another proxy", "http://" + other.host(), abi.PermissionDenied},
		{"other credentials", "http://user:guess@" + p.host(), abi.PermissionDenied},
		{"socks", "socks5://" + p.host(), abi.PermissionDenied},
		{"https", "https://" + p.host(), abi.PermissionDenied},
		{"unparsable", "http://[::1", abi.ValueError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, e := c.Do(context.Background(), abi.HTTPRequest{URL: "http://origin.test/", Proxy: tt.proxy})
			wantKind(t, e, tt.kind, "proxy")
			if strings.Contains(e.Message, "guess") {
				t.Errorf("message %q leaks the password", e.Message)
			}
		})
	}
	if n := other.requests.Load(); n != 0 {
		t.Errorf("the proxy not granted saw %d requests, want 0", n)
	}

	// The host grant still applies through a proxy, and so does the private-address
	// rule for a target written as an IP.
	_, e := c.Do(context.Background(), abi.HTTPRequest{URL: "http://elsewhere.test/", Proxy: "http://" + p.host()})
	wantKind(t, e, abi.PermissionDenied, "elsewhere.test")
	c2 := newClient(t, httpfn.Policy{Hosts: []string{"10.0.0.1", "origin.test", "127.0.0.1:1"}, Proxies: []string{"http://" + p.host()}})
	r = do(t, c2, abi.HTTPRequest{URL: "http://10.0.0.1/", Proxy: "http://" + p.host()})
	wantCode(t, r, httpfn.CodeAddressDenied)
	if n := p.requests.Load(); n != 2 {
		t.Errorf("proxy saw %d requests, want still 2", n)
	}
	// A redirect hop to a loopback literal is refused before it is requested.
	r = do(t, c2, abi.HTTPRequest{URL: "http://origin.test/to-loopback", Proxy: "http://" + p.host()})
	wantCode(t, r, httpfn.CodeAddressDenied)
	if n := p.requests.Load(); n != 3 {
		t.Errorf("proxy saw %d requests, want 3 (the hop to loopback not among them)", n)
	}
}

func TestDoRefusesBadRequests(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {})
	c := newClient(t, httpfn.Policy{Hosts: []string{s.host()}, AllowPrivate: true, Timeout: time.Second, MaxRedirects: 3})
	ok := abi.HTTPRequest{URL: s.URL}
	tests := []struct {
		name string
		edit func(*abi.HTTPRequest)
		kind abi.Kind
		in   string
	}{
		{"ftp", func(r *abi.HTTPRequest) { r.URL = "ftp://" + s.host() + "/" }, abi.ValueError, "scheme"},
		{"file", func(r *abi.HTTPRequest) { r.URL = "file:///etc/passwd" }, abi.ValueError, "scheme"},
		{"no scheme", func(r *abi.HTTPRequest) { r.URL = s.host() }, abi.ValueError, ""},
		{"unparsable", func(r *abi.HTTPRequest) { r.URL = "http://[::1" }, abi.ValueError, "does not parse"},
		{"control char", func(r *abi.HTTPRequest) { r.URL = "http://a\x00b/" }, abi.ValueError, "does not parse"},
		{"no host", func(r *abi.HTTPRequest) { r.URL = "http:///x" }, abi.ValueError, "no host"},
		{"opaque", func(r *abi.HTTPRequest) { r.URL = "http:foo" }, abi.ValueError, "no host"},
		{"port 0", func(r *abi.HTTPRequest) { r.URL = "http://127.0.0.1:0/" }, abi.ValueError, "port"},
		{"port too big", func(r *abi.HTTPRequest) { r.URL = "http://127.0.0.1:99999/" }, abi.ValueError, "port"},
		{"TRACE", func(r *abi.HTTPRequest) { r.Method = "TRACE" }, abi.ValueError, "method"},
		{"CONNECT", func(r *abi.HTTPRequest) { r.Method = "CONNECT" }, abi.ValueError, "method"},
		{"lowercase", func(r *abi.HTTPRequest) { r.Method = "get" }, abi.ValueError, "method"},
		{"method with space", func(r *abi.HTTPRequest) { r.Method = "GET /x HTTP/1.1\r\n" }, abi.ValueError, "method"},
		{"header name", func(r *abi.HTTPRequest) { r.Headers = map[string][]string{"Bad Name": {"x"}} }, abi.ValueError, "header name"},
		{"empty header name", func(r *abi.HTTPRequest) { r.Headers = map[string][]string{"": {"x"}} }, abi.ValueError, "header name"},
		{"header injection", func(r *abi.HTTPRequest) { r.Headers = map[string][]string{"X": {"a\r\nEvil: 1"}} }, abi.ValueError, "control"},
		{"huge headers", func(r *abi.HTTPRequest) { r.Headers = map[string][]string{"X": {strings.Repeat("a", 300<<10)}} }, abi.LimitExceeded, "headers"},
		{"other Host", func(r *abi.HTTPRequest) { r.Headers = map[string][]string{"host": {"evil.test"}} }, abi.PermissionDenied, "evil.test"},
		{"Host other port", func(r *abi.HTTPRequest) { r.Headers = map[string][]string{"Host": {"127.0.0.1:1"}} }, abi.PermissionDenied, "Host"},
		{"two Hosts", func(r *abi.HTTPRequest) { r.Headers = map[string][]string{"Host": {s.host(), s.host()}} }, abi.ValueError, "Host"},
		{"negative timeout", func(r *abi.HTTPRequest) { r.TimeoutMs = -1 }, abi.ValueError, "timeout_ms"},
		{"timeout over grant", func(r *abi.HTTPRequest) { r.TimeoutMs = 1001 }, abi.LimitExceeded, "timeout_ms"},
		{"huge timeout", func(r *abi.HTTPRequest) { r.TimeoutMs = 1 << 62 }, abi.ValueError, "timeout_ms"},
		{"redirects -2", func(r *abi.HTTPRequest) { r.MaxRedirects = -2 }, abi.ValueError, "max_redirects"},
		{"redirects over grant", func(r *abi.HTTPRequest) { r.MaxRedirects = 4 }, abi.LimitExceeded, "max_redirects"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := ok
			tt.edit(&req)
			reply, e := c.Do(context.Background(), req)
			wantKind(t, e, tt.kind, tt.in)
			if reply.Status != 0 || reply.ErrorCode != "" {
				t.Errorf("reply = %+v alongside the error, want it empty", reply)
			}
			if !strings.HasPrefix(e.Message, "httpfn: ") {
				t.Errorf("message %q, want it prefixed httpfn:", e.Message)
			}
		})
	}
	if n := s.requests.Load(); n != 0 {
		t.Errorf("server saw %d requests, want 0", n)
	}
}

// One Client serves many slots at once.
func TestDoConcurrent(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.URL.Path) })
	c := newClient(t, httpfn.Policy{Hosts: []string{s.host()}, AllowPrivate: true})
	const workers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan string, workers*each)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				path := fmt.Sprintf("/%d/%d", w, i)
				r, e := c.Do(context.Background(), abi.HTTPRequest{URL: s.URL + path})
				if e != nil || r.Status != 200 || string(r.Body) != path {
					errs <- fmt.Sprintf("%s: %v %d %q %s", path, e, r.Status, r.Body, r.Error)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if n := s.requests.Load(); n != workers*each {
		t.Errorf("server saw %d requests, want %d", n, workers*each)
	}
}

// Hostile requests never panic, and every failure has a valid kind or a reply code.
func FuzzDo(f *testing.F) {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer s.Close()
	host := strings.TrimPrefix(s.URL, "http://")
	c, err := httpfn.New(httpfn.Policy{Hosts: []string{host}, AllowPrivate: true, Timeout: 2 * time.Second},
		httpfn.WithLookup(testLookup))
	if err != nil {
		f.Fatal(err)
	}
	defer c.CloseIdleConnections()
	f.Add("GET", s.URL+"/", "X-A", "v", "", int64(0), 0)
	f.Add("POST", s.URL+"/?q=%zz", "Host", host, "", int64(10), -1)
	f.Add("PATCH", "http://["+host+"]/", "Connection", "close, X-A", "http://p:1", int64(-5), 2)
	f.Add("DELETE", "https://"+host+"/", "X-\x00", "\r\n", "socks5://x", int64(1<<62), -3)
	f.Add(strings.Repeat("G", 1000), "http://%41:80/", "Cookie", strings.Repeat("c=1; ", 1000), "::", int64(1), 1)
	f.Fuzz(func(t *testing.T, method, u, hk, hv, proxy string, timeout int64, redirects int) {
		req := abi.HTTPRequest{
			Method: method, URL: u, Headers: map[string][]string{hk: {hv}},
			TimeoutMs: timeout, MaxRedirects: redirects, Proxy: proxy, Body: []byte(hv),
		}
		reply, e := c.Do(context.Background(), req)
		if e != nil {
			if !e.Kind.Valid() {
				t.Fatalf("Do(%+v) error kind %q", req, e.Kind)
			}
			return
		}
		switch reply.ErrorCode {
		case "":
			if reply.Status == 0 {
				t.Fatalf("Do(%+v) = status 0 and no error", req)
			}
		case httpfn.CodeTimeout, httpfn.CodeTransport, httpfn.CodeDNS, httpfn.CodeRefused,
			httpfn.CodeAddressDenied, httpfn.CodeRedirectDenied, httpfn.CodeTooManyRedirects,
			httpfn.CodeBodyTooLarge, httpfn.CodeCanceled:
		default:
			t.Fatalf("Do(%+v) error code %q", req, reply.ErrorCode)
		}
	})
}

// TestDeniedNamesTheGrant: a host or proxy outside the grant is refused with the grants
// file's line that would grant it, for the plugin's type, on the first hop and on a
// redirect, as a pool or queue refusal names its grant.
func TestDeniedNamesTheGrant(t *testing.T) {
	elsewhere := newServer(t, func(w http.ResponseWriter, r *http.Request) {})
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://b.loop.test:"+elsewhere.port()+"/", http.StatusFound)
	})
	c := newClient(t, httpfn.Policy{Hosts: []string{s.host()}, AllowPrivate: true}, httpfn.ForType("scraper"))
	for _, tt := range []struct{ url, want string }{
		{"https://Example.com/x", `httpfn: host "Example.com:443" is not granted; add "http_hosts": ["example.com"] to "scraper" in the grants file`},
		{"http://example.com:8080/", `httpfn: host "example.com:8080" is not granted; add "http_hosts": ["example.com:8080"] to "scraper" in the grants file`},
		{"http://[::1]:80/", `httpfn: host "[::1]:80" is not granted; add "http_hosts": ["[::1]"] to "scraper" in the grants file`},
	} {
		_, e := c.Do(context.Background(), abi.HTTPRequest{URL: tt.url})
		if e == nil || e.Kind != abi.PermissionDenied || e.Message != tt.want {
			t.Errorf("Do(%s) = %v, want PermissionDenied %s", tt.url, e, tt.want)
		}
	}
	_, e := c.Do(context.Background(), abi.HTTPRequest{URL: s.URL + "/", Proxy: "http://u:pw@proxy.loop.test:3128"})
	if want := `httpfn: proxy "http://u:xxxxx@proxy.loop.test:3128" is not granted; add "http_proxies": ["http://u:xxxxx@proxy.loop.test:3128"] to "scraper" in the grants file`; e == nil || e.Message != want {
		t.Errorf("Do(proxy) = %v, want %s", e, want)
	}
	r := do(t, c, abi.HTTPRequest{URL: s.URL + "/"})
	wantCode(t, r, httpfn.CodeRedirectDenied)
	if want := `httpfn: redirect to host "b.loop.test:` + elsewhere.port() + `" is not granted; add "http_hosts": ["b.loop.test:` + elsewhere.port() + `"] to "scraper" in the grants file`; r.Error != want {
		t.Errorf("redirect: reply.Error = %q, want %s", r.Error, want)
	}
}
