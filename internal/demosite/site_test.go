package demosite_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleethost/fleet/internal/demosite"
)

func start(t *testing.T, edit func(*demosite.Site)) *demosite.Site {
	t.Helper()
	s := demosite.New()
	if edit != nil {
		edit(s)
	}
	s.Start()
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
	})
	return s
}

// harvest gets a fresh cookie value.
func harvest(t *testing.T, s *demosite.Site) string {
	t.Helper()
	resp, err := http.Get(s.URL() + "/clearance")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET /clearance = %d, want 200", resp.StatusCode)
	}
	set := resp.Header.Values("Set-Cookie")
	if len(set) != 1 || !strings.HasPrefix(set[0], demosite.CookieName+"=") || !strings.HasSuffix(set[0], "; Path=/") {
		t.Fatalf("Set-Cookie = %q, want one %s=<value>; Path=/", set, demosite.CookieName)
	}
	return strings.TrimSuffix(strings.TrimPrefix(set[0], demosite.CookieName+"="), "; Path=/")
}

// get fetches path with the cookie value (none if ""), and returns the status, the 403
// reason and the body.
func get(t *testing.T, s *demosite.Site, path, cookie string) (int, string, string) {
	t.Helper()
	code, reason, body, err := fetch(s, path, cookie)
	if err != nil {
		t.Fatal(err)
	}
	return code, reason, body
}

// fetch is get for goroutines other than the test's.
func fetch(s *demosite.Site, path, cookie string) (code int, reason, body string, err error) {
	req, err := http.NewRequest("GET", s.URL()+path, nil)
	if err != nil {
		return 0, "", "", err
	}
	if cookie != "" {
		req.AddCookie(&http.Cookie{Name: demosite.CookieName, Value: cookie})
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("X-Demosite-Reason"), string(b), err
}

func TestCookieLifecycle(t *testing.T) {
	s := start(t, nil)
	if !strings.HasPrefix(s.URL(), "http://127.0.0.1:") || s.URL() != "http://"+s.Host() {
		t.Fatalf("URL() = %q, Host() = %q, want loopback", s.URL(), s.Host())
	}

	if code, reason, _ := get(t, s, "/page/1", ""); code != 403 || reason != demosite.ReasonNoCookie {
		t.Errorf("no cookie: %d %q, want 403 %q", code, reason, demosite.ReasonNoCookie)
	}
	if code, reason, _ := get(t, s, "/page/1", "forged"); code != 403 || reason != demosite.ReasonUnknown {
		t.Errorf("unknown cookie: %d %q, want 403 %q", code, reason, demosite.ReasonUnknown)
	}

	c := harvest(t, s)
	code, _, body := get(t, s, "/page/1", c)
	if code != 200 || !strings.Contains(body, "<title>page 1</title>") {
		t.Errorf("valid cookie: %d %q, want 200 and <title>page 1</title>", code, body)
	}
	code, _, body = get(t, s, "/page/a/<b>", c)
	if code != 200 || !strings.Contains(body, "<title>page a/&lt;b&gt;</title>") {
		t.Errorf("nested path: %d %q, want 200 and an escaped title", code, body)
	}

	if n := s.Revoke(); n != 1 {
		t.Errorf("Revoke() = %d, want 1 usable cookie revoked", n)
	}
	if code, reason, _ := get(t, s, "/page/2", c); code != 403 || reason != demosite.ReasonRevoked {
		t.Errorf("revoked cookie: %d %q, want 403 %q", code, reason, demosite.ReasonRevoked)
	}
	c2 := harvest(t, s)
	if code, _, _ := get(t, s, "/page/2", c2); code != 200 {
		t.Errorf("cookie issued after Revoke: %d, want 200", code)
	}

	if got := s.Harvests(); got != 2 {
		t.Errorf("Harvests() = %d, want 2", got)
	}
	if got := s.Forbidden(); got != 3 {
		t.Errorf("Forbidden() = %d, want 3", got)
	}
	if got := s.Rejected(); len(got) != 2 || !contains(got, "forged") || !contains(got, c) {
		t.Errorf("Rejected() = %q, want [forged %s]", got, c)
	}
	want := map[string]int{"/page/1": 1, "/page/a/<b>": 1, "/page/2": 1}
	if got := s.ServedPaths(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ServedPaths() = %v, want %v", got, want)
	}
}

func TestStaleAfterMaxUses(t *testing.T) {
	s := start(t, func(s *demosite.Site) { s.MaxUses = 3 })
	c := harvest(t, s)
	for i := range 3 {
		if code, _, _ := get(t, s, fmt.Sprintf("/page/%d", i), c); code != 200 {
			t.Fatalf("use %d: %d, want 200", i+1, code)
		}
	}
	for range 2 {
		if code, reason, _ := get(t, s, "/page/9", c); code != 403 || reason != demosite.ReasonStale {
			t.Errorf("use past MaxUses: %d %q, want 403 %q", code, reason, demosite.ReasonStale)
		}
	}
	if got := s.Served("/page/9"); got != 0 {
		t.Errorf("Served(/page/9) = %d, want 0", got)
	}
	if got := s.Rejected(); len(got) != 1 || got[0] != c {
		t.Errorf("Rejected() = %q, want [%s]", got, c)
	}
	if n := s.Revoke(); n != 0 {
		t.Errorf("Revoke() = %d, want 0: the only cookie was stale", n)
	}
}

func TestNeverStale(t *testing.T) {
	s := start(t, func(s *demosite.Site) { s.MaxUses = -1 })
	c := harvest(t, s)
	for i := range 30 {
		if code, _, _ := get(t, s, "/page/x", c); code != 200 {
			t.Fatalf("use %d: %d, want 200", i+1, code)
		}
	}
	if got := s.Served("/page/x"); got != 30 {
		t.Errorf("Served(/page/x) = %d, want 30", got)
	}
}

// Harvests one after another never overlap: the site leaves its in-flight count before
// the client sees the cookie.
func TestSequentialHarvestsDoNotOverlap(t *testing.T) {
	s := start(t, func(s *demosite.Site) { s.ClearanceDelay = time.Millisecond })
	if got := s.MaxClearanceOverlap(); got != 0 {
		t.Errorf("MaxClearanceOverlap() before any = %d, want 0", got)
	}
	for range 20 {
		harvest(t, s)
	}
	if got := s.MaxClearanceOverlap(); got != 1 {
		t.Errorf("MaxClearanceOverlap() = %d, want 1", got)
	}
}

// Concurrent harvests are seen overlapping. The delay is long, so they are all in
// flight together; the test then abandons them, which also proves an abandoned harvest
// issues no cookie.
func TestConcurrentHarvestsOverlap(t *testing.T) {
	s := start(t, func(s *demosite.Site) { s.ClearanceDelay = time.Hour })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const n = 3
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, "GET", s.URL()+"/clearance", nil)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	deadline := time.Now().Add(30 * time.Second)
	for s.ClearanceInFlight() < n {
		if time.Now().After(deadline) {
			t.Fatalf("ClearanceInFlight() = %d after 30s, want %d", s.ClearanceInFlight(), n)
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	wg.Wait()
	if got := s.MaxClearanceOverlap(); got != n {
		t.Errorf("MaxClearanceOverlap() = %d, want %d", got, n)
	}
	for s.ClearanceInFlight() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("ClearanceInFlight() = %d after the clients left, want 0", s.ClearanceInFlight())
		}
		time.Sleep(time.Millisecond)
	}
	if got := s.Harvests(); got != 0 {
		t.Errorf("Harvests() = %d, want 0: every harvest was abandoned", got)
	}
}

// Close ends a harvest that is still waiting, and returns.
func TestCloseEndsWaitingHarvest(t *testing.T) {
	s := demosite.New()
	s.ClearanceDelay = time.Hour
	s.Start()
	done := make(chan int)
	go func() {
		resp, err := http.Get(s.URL() + "/clearance")
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	for s.ClearanceInFlight() == 0 {
		time.Sleep(time.Millisecond)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close() = %v", err)
	}
	if code := <-done; code != 0 && code != http.StatusServiceUnavailable {
		t.Errorf("waiting harvest ended %d, want 503 or a closed connection", code)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close() = %v", err)
	}
}

// Many scrapers, each page once: exactly one 200 per path.
func TestServedPerPathConcurrently(t *testing.T) {
	s := start(t, nil)
	cookies := []string{harvest(t, s), harvest(t, s), harvest(t, s), harvest(t, s)}
	const pages = 80 // 4 cookies x 25 uses: exactly enough
	var wg sync.WaitGroup
	errs := make(chan string, pages)
	for i := range pages {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := fmt.Sprintf("/page/%d", i)
			if code, reason, _, err := fetch(s, path, cookies[i%len(cookies)]); err != nil || code != 200 {
				errs <- fmt.Sprintf("%s: %d %s %v", path, code, reason, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	got := s.ServedPaths()
	if len(got) != pages {
		t.Errorf("ServedPaths() has %d paths, want %d", len(got), pages)
	}
	for i := range pages {
		if n := s.Served(fmt.Sprintf("/page/%d", i)); n != 1 {
			t.Errorf("Served(/page/%d) = %d, want 1", i, n)
		}
	}
	if s.Forbidden() != 0 || len(s.Rejected()) != 0 {
		t.Errorf("Forbidden() = %d, Rejected() = %q, want none", s.Forbidden(), s.Rejected())
	}
}

func TestHandlerWithHTTPTest(t *testing.T) {
	s := demosite.New()
	s.ClearanceDelay = 0
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	defer s.Close()
	resp, err := http.Get(ts.URL + "/clearance")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || len(resp.Cookies()) != 1 {
		t.Fatalf("GET /clearance = %d with %d cookies, want 200 and 1", resp.StatusCode, len(resp.Cookies()))
	}
	for _, tt := range []struct{ method, path string }{{"POST", "/clearance"}, {"DELETE", "/page/1"}} {
		req, _ := http.NewRequest(tt.method, ts.URL+tt.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("%s %s = %d, want 405", tt.method, tt.path, resp.StatusCode)
		}
	}
	if s.URL() != "" || s.Host() != "" {
		t.Errorf("URL() = %q, Host() = %q without Start, want empty", s.URL(), s.Host())
	}
}

func contains(list []string, v string) bool {
	for _, s := range list {
		if s == v {
			return true
		}
	}
	return false
}

// TestBreakClearance: a broken clearance page answers 503 with the reason broken and
// issues nothing, until mended; POST /clearance/break and /mend do the same over HTTP.
func TestBreakClearance(t *testing.T) {
	s := start(t, nil)
	s.BreakClearance(true)
	if code, reason, _ := get(t, s, "/clearance", ""); code != http.StatusServiceUnavailable || reason != demosite.ReasonBroken {
		t.Errorf("GET /clearance while broken = %d %q, want 503 %q", code, reason, demosite.ReasonBroken)
	}
	if s.Harvests() != 0 || s.ClearanceRefused() != 1 {
		t.Errorf("harvests %d, refused %d; want 0 and 1", s.Harvests(), s.ClearanceRefused())
	}
	post := func(path string) {
		resp, err := http.Post(s.URL()+path, "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("POST %s = %d, want 204", path, resp.StatusCode)
		}
	}
	post("/clearance/mend")
	harvest(t, s)
	post("/clearance/break")
	if code, _, _ := get(t, s, "/clearance", ""); code != http.StatusServiceUnavailable {
		t.Errorf("GET /clearance after POST /clearance/break = %d, want 503", code)
	}
	if s.Harvests() != 1 || s.ClearanceRefused() != 2 {
		t.Errorf("harvests %d, refused %d; want 1 and 2", s.Harvests(), s.ClearanceRefused())
	}
}
