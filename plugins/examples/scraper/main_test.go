package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/abi"
	fleet "github.com/fleethost/fleet/guest-sdk"
	"github.com/fleethost/fleet/guest-sdk/fleettest"
	"github.com/fleethost/fleet/plugins/examples/contracts"
)

const target = "http://127.0.0.1:8080/page?id=1"

// withCookie puts a fresh cookie for the target's site into the pool, and returns its id.
func withCookie(h *fleettest.Host) string {
	return h.Pool(contracts.Cookies, fleettest.Item{
		Payload: contracts.CfCookie{Cookies: map[string]string{"cf_clearance": "abc", "a": "1"}, UserAgent: "UA/1", ProxyURL: "http://proxy:3128", Site: "127.0.0.1:8080"},
		Tags:    contracts.CfCookieTags{Site: "127.0.0.1:8080", Fresh: true},
	})[0]
}

func ops(h *fleettest.Host) string {
	var s []string
	for _, op := range h.Ops() {
		if op != abi.OpLog {
			s = append(s, string(op))
		}
	}
	return strings.Join(s, " ")
}

func TestDescribe(t *testing.T) {
	h := fleettest.New(t)
	d := h.Describe()
	if d.Type != "scraper" || d.Consumes.Name != "scrape" || len(d.Pools) != 1 || d.Pools[0].Name != "cookies" || len(d.Submits) != 1 || d.Submits[0].Name != "harvest" {
		t.Fatalf("Describe() = %+v", d)
	}
}

func TestNoCookieSubmitsHarvest(t *testing.T) {
	h := fleettest.New(t)
	h.Pool(contracts.Cookies, fleettest.Item{Payload: contracts.CfCookie{Cookies: map[string]string{}}, Tags: contracts.CfCookieTags{Site: "127.0.0.1:8080", Fresh: false}})
	res := h.Handle(contracts.ScrapeTask{URL: target})
	if res.Outcome != abi.OutcomeRetry || res.RetryAfterMs != 200 {
		t.Fatalf("handle = %+v, want retry after 200ms", res)
	}
	if got := ops(h); got != "pool_claim submit" {
		t.Fatalf("ops = %s, want pool_claim submit", got)
	}
	if subs := fleettest.Submitted(h, contracts.Harvest); len(subs) != 1 || subs[0] != (contracts.HarvestRequest{Site: "127.0.0.1:8080"}) {
		t.Errorf("harvest tasks = %+v, want one for 127.0.0.1:8080", subs)
	}
	if items := fleettest.Items(h, contracts.Cookies); len(items) != 1 || !items[0].LeasedUntil.IsZero() {
		t.Errorf("cookies = %+v, want the stale cookie untouched", items)
	}
}

// TestOneHarvestPerSite: tasks of one site that find no cookie, each retried, ask for one
// harvest of the site: every request carries the site's unique key, so the host enqueues
// the first; another site asks for its own.
func TestOneHarvestPerSite(t *testing.T) {
	h := fleettest.New(t)
	for range 3 {
		for _, u := range []string{target, "http://127.0.0.1:8080/other", target} {
			if res := h.Handle(contracts.ScrapeTask{URL: u}); res.Outcome != abi.OutcomeRetry {
				t.Fatalf("handle = %+v, want retry", res)
			}
		}
	}
	h.Handle(contracts.ScrapeTask{URL: "http://127.0.0.2:8080/"})
	subs := fleettest.Submitted(h, contracts.Harvest)
	if len(subs) != 2 || subs[0].Site != "127.0.0.1:8080" || subs[1].Site != "127.0.0.2:8080" {
		t.Errorf("harvest tasks = %+v, want one per site", subs)
	}
	var keys []string
	for _, c := range h.Calls() {
		if c.Op == abi.OpSubmit {
			keys = append(keys, c.Unique)
		}
	}
	want := append(slices.Repeat([]string{HarvestKey("127.0.0.1:8080")}, 9), HarvestKey("127.0.0.2:8080"))
	if !slices.Equal(keys, want) {
		t.Errorf("submits' unique keys = %v, want %v: each its site's", keys, want)
	}
}

func TestRejectedCookieMarkedBad(t *testing.T) {
	h := fleettest.New(t)
	id := withCookie(h)
	h.HTTP(target, 403, "")
	res := h.Handle(contracts.ScrapeTask{URL: target})
	if res.Outcome != abi.OutcomeRetry {
		t.Fatalf("handle = %+v, want retry", res)
	}
	if got := ops(h); got != "pool_claim http pool_mark_bad" {
		t.Fatalf("ops = %s, want pool_claim http pool_mark_bad", got)
	}
	if bad := h.MarkedBad(contracts.Cookies); len(bad) != 1 || !strings.Contains(bad[id], "403") {
		t.Errorf("marked bad = %v, want %s for its 403", bad, id)
	}
	if items := fleettest.Items(h, contracts.Cookies); len(items) != 0 {
		t.Errorf("cookies = %+v, want none left", items)
	}
}

func TestScraped(t *testing.T) {
	h := fleettest.New(t)
	withCookie(h)
	body := "<html><head><TITLE>\n  Hello,\n world </TITLE></head><body>ok</body></html>"
	h.HTTP(target, 200, body)
	res := h.Handle(contracts.ScrapeTask{URL: target})
	if res.Outcome != abi.OutcomeDone {
		t.Fatalf("handle = %+v, want done", res)
	}
	if got := ops(h); got != "pool_claim http kv_set pool_release counter_incr" {
		t.Fatalf("ops = %s", got)
	}
	req := h.Requests()[0]
	if req.URL != target || req.Method != "GET" || req.Proxy != "http://proxy:3128" ||
		strings.Join(req.Header["Cookie"], ",") != "a=1; cf_clearance=abc" || strings.Join(req.Header["User-Agent"], ",") != "UA/1" {
		t.Errorf("http request = %+v", req)
	}
	v, ok := h.KVValue(ResultsNamespace, ResultKey(target))
	var page Page
	if !ok || json.Unmarshal(v, &page) != nil {
		t.Fatalf("KV %s %s = %s, %v; want the page", ResultsNamespace, ResultKey(target), v, ok)
	}
	if wantPage := (Page{URL: target, Status: 200, Length: len(body), Title: "Hello, world"}); page != wantPage || len(ResultKey(target)) != 32 {
		t.Errorf("page = %+v, want %+v", page, wantPage)
	}
	if items := fleettest.Items(h, contracts.Cookies); len(items) != 1 || !items[0].LeasedUntil.IsZero() {
		t.Errorf("cookies = %+v, want the cookie released", items)
	}
	if n := h.CounterValue(ScrapedCounter); n != 1 {
		t.Errorf("%s = %d, want 1", ScrapedCounter, n)
	}
}

func TestNetworkErrorFails(t *testing.T) {
	h := fleettest.New(t)
	withCookie(h)
	h.HTTPError(target, "refused", "dial tcp 127.0.0.1:8080: connect: connection refused")
	res := h.Handle(contracts.ScrapeTask{URL: target})
	if res.Outcome != abi.OutcomeFail || !strings.Contains(res.Reason, "refused") {
		t.Fatalf("handle = %+v, want fail naming the refusal", res)
	}
	if items := fleettest.Items(h, contracts.Cookies); len(items) != 1 || !items[0].LeasedUntil.IsZero() {
		t.Fatalf("cookies = %+v, want the cookie released", items)
	}
}

// TestRateLimitedRetries: a request the egress gate did not admit hands the task back
// for the wait the host named, the cookie released, no attempt failed.
func TestRateLimitedRetries(t *testing.T) {
	h := fleettest.New(t)
	withCookie(h)
	h.HTTPRateLimited(target, 1500*time.Millisecond)
	res := h.Handle(contracts.ScrapeTask{URL: target})
	if res.Outcome != abi.OutcomeRetry || res.RetryAfterMs != 1500 || !strings.Contains(res.Reason, "rate limited") {
		t.Fatalf("handle = %+v, want retry after 1500 ms, rate limited", res)
	}
	if items := fleettest.Items(h, contracts.Cookies); len(items) != 1 || !items[0].LeasedUntil.IsZero() {
		t.Fatalf("cookies = %+v, want the cookie released", items)
	}
}

// TestRateLimitedGivesUp: a site whose gate refuses every request (closed again by each
// 429) fails the attempt after RateRetries hand-backs, as a 429 does, so that its tasks
// park after their attempts rather than circle for ever.
func TestRateLimitedGivesUp(t *testing.T) {
	h := fleettest.New(t)
	withCookie(h)
	h.HTTPRateLimited(target, 30*time.Second)
	payload, _ := json.Marshal(contracts.ScrapeTask{URL: target})
	res := h.HandleTask(abi.TaskEnvelope{ID: "t1", Payload: payload, Attempts: 1, HandBacks: RateRetries})
	if res.Outcome != abi.OutcomeFail || !strings.Contains(res.Reason, "rate limited") {
		t.Fatalf("handle = %+v, want fail naming the rate limit", res)
	}
}

func TestBadURLFails(t *testing.T) {
	h := fleettest.New(t)
	for _, u := range []string{"ftp://x/", "not a url", "http:///nohost", "http://%zz/"} {
		res := h.Handle(contracts.ScrapeTask{URL: u})
		if res.Outcome != abi.OutcomeFail {
			t.Errorf("handle(%q) = %+v, want fail", u, res)
		}
	}
	if len(h.Calls()) != 0 {
		t.Fatalf("bad URLs reached the host: %v", h.Ops())
	}
}

func TestTitle(t *testing.T) {
	tests := []struct{ in, want string }{
		{"<title>x</title>", "x"},
		{"<TiTlE lang=en>  a  b </title>", "a b"},
		{"no title", ""},
		{"<title>unterminated", ""},
		{"İİ<title>é</title>", "é"},
		{"<title>" + strings.Repeat("é", 150) + "</title>", strings.Repeat("é", 100)},
	}
	for _, tt := range tests {
		if got := title([]byte(tt.in)); got != tt.want {
			t.Errorf("title(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestRateLimitKeepsTheCookie: a 429 is a rate signal, not a ban: the cookie goes back
// unpenalised, and the task waits what Retry-After says.
func TestRateLimitKeepsTheCookie(t *testing.T) {
	h := fleettest.New(t)
	id := withCookie(h)
	h.HTTP(target, 429, "slow down").Header("Retry-After", "2")
	res := h.Handle(contracts.ScrapeTask{URL: target})
	if res.Outcome != abi.OutcomeRetry || res.RetryAfterMs != 2000 {
		t.Fatalf("handle = %+v, want retry after 2s", res)
	}
	if got := ops(h); got != "pool_claim http pool_release" {
		t.Fatalf("ops = %s, want pool_claim http pool_release: no mark", got)
	}
	if items := fleettest.Items(h, contracts.Cookies); len(items) != 1 || items[0].ID != id || items[0].Score != 0 || !items[0].LeasedUntil.IsZero() {
		t.Errorf("cookies = %+v, want %s released with score 0", items, id)
	}
}

// TestRateLimitGivesUp: a site that limits every request fails the attempt after
// RateRetries hand-backs, so its tasks park after their attempts.
func TestRateLimitGivesUp(t *testing.T) {
	h := fleettest.New(t)
	withCookie(h)
	h.HTTP(target, 503, "")
	payload, _ := json.Marshal(contracts.ScrapeTask{URL: target})
	res := h.HandleTask(abi.TaskEnvelope{ID: "t1", Payload: payload, Attempts: 1, HandBacks: RateRetries})
	if res.Outcome != abi.OutcomeFail || !strings.Contains(res.Reason, "503") {
		t.Fatalf("handle = %+v, want fail naming the 503", res)
	}
	if len(h.MarkedBad(contracts.Cookies)) != 0 {
		t.Errorf("a rate-limited cookie was marked bad")
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"", RateDelay},
		{"soon", RateDelay},
		{"-3", RateDelay},
		{"0", 0},
		{" 30 ", 30 * time.Second},
		{"99999999", MaxRetryAfter},
		{"Tue, 01 Dec 2026 10:00:45 GMT", 45 * time.Second},
		{"Tue, 01 Dec 2026 09:00:00 GMT", 0},
		{"Wed, 02 Dec 2026 10:00:00 GMT", MaxRetryAfter},
	}
	for _, tt := range tests {
		if got := retryAfter(tt.in, now); got != tt.want {
			t.Errorf("retryAfter(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

// TestChallengePenalisesTheCookie: a challenge page says the clearance went stale: the
// cookie is penalised, not evicted, and retires once past its max_error_score.
func TestChallengePenalisesTheCookie(t *testing.T) {
	h := fleettest.New(t)
	id := h.Pool(contracts.Cookies, fleettest.Item{
		Payload: contracts.CfCookie{Cookies: map[string]string{"cf_clearance": "abc"}, Site: "127.0.0.1:8080"},
		Tags:    contracts.CfCookieTags{Site: "127.0.0.1:8080", Fresh: true},
		Score:   2, Health: fleet.Health{MaxErrorScore: 3},
	})[0]
	h.HTTP(target, 200, "<title>"+ChallengeTitle+"</title>")
	if res := h.Handle(contracts.ScrapeTask{URL: target}); res.Outcome != abi.OutcomeRetry {
		t.Fatalf("handle = %+v, want retry", res)
	}
	if items := fleettest.Items(h, contracts.Cookies); len(items) != 1 || items[0].Score != 3 {
		t.Fatalf("cookies = %+v, want %s kept with score 3", items, id)
	}
	h.Handle(contracts.ScrapeTask{URL: target})
	if bad := h.MarkedBad(contracts.Cookies); !strings.Contains(bad[id], "challenge") {
		t.Errorf("marked bad = %v, want %s retired past its max_error_score", bad, id)
	}
}

// TestGoodPageCreditsTheCookie: a page served well lowers a penalised cookie's score.
func TestGoodPageCreditsTheCookie(t *testing.T) {
	h := fleettest.New(t)
	h.Pool(contracts.Cookies, fleettest.Item{
		Payload: contracts.CfCookie{Cookies: map[string]string{"cf_clearance": "abc"}, Site: "127.0.0.1:8080"},
		Tags:    contracts.CfCookieTags{Site: "127.0.0.1:8080", Fresh: true},
		Score:   2,
	})
	h.HTTP(target, 200, "<title>ok</title>")
	if res := h.Handle(contracts.ScrapeTask{URL: target}); res.Outcome != abi.OutcomeDone {
		t.Fatalf("handle = %+v, want done", res)
	}
	if got := ops(h); got != "pool_claim http kv_set pool_mark_good pool_release counter_incr" {
		t.Fatalf("ops = %s", got)
	}
	if items := fleettest.Items(h, contracts.Cookies); len(items) != 1 || items[0].Score != 1 {
		t.Errorf("cookies = %+v, want score 1", items)
	}
}
