package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/guest-sdk/fleettest"
	"github.com/fleethost/fleet/plugins/examples/contracts"
)

const target = "http://127.0.0.1:8080/page?id=1"

func claimed(t *testing.T) abi.PoolClaimReply {
	t.Helper()
	payload, _ := json.Marshal(contracts.CfCookie{Cookies: map[string]string{"cf_clearance": "abc", "a": "1"}, UserAgent: "UA/1", ProxyURL: "http://proxy:3128", Site: "127.0.0.1:8080"})
	return abi.PoolClaimReply{Found: true, Token: "lease-1", Item: &abi.PoolItem{ID: "cookie-1", Payload: payload, Tags: json.RawMessage(`{"site":"127.0.0.1:8080","fresh":true}`)}}
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
	h.Reply(abi.OpPoolClaim, abi.PoolClaimReply{Found: false})
	h.Reply(abi.OpSubmit, abi.SubmitReply{TaskID: "h1"})
	res := h.Handle(contracts.ScrapeTask{URL: target})
	if res.Outcome != abi.OutcomeRetry || res.RetryAfterMs != 200 {
		t.Fatalf("handle = %+v, want retry after 200ms", res)
	}
	if got := ops(h); got != "pool_claim submit" {
		t.Fatalf("ops = %s, want pool_claim submit", got)
	}
	claim := fleettest.Requests[abi.PoolClaimRequest](h, abi.OpPoolClaim)[0]
	if claim.Pool != "cookies" || claim.HoldMs != 20000 || string(claim.Where["site"]) != `"127.0.0.1:8080"` || string(claim.Where["fresh"]) != "true" {
		t.Errorf("claim = %+v, want a fresh cookie of 127.0.0.1:8080 held 20s", claim)
	}
	sub := fleettest.Requests[abi.SubmitRequest](h, abi.OpSubmit)[0]
	if sub.Queue != "harvest" || string(sub.Payload) != `{"site":"127.0.0.1:8080"}` {
		t.Errorf("submit = %s %s, want harvest {\"site\":\"127.0.0.1:8080\"}", sub.Queue, sub.Payload)
	}
}

func TestRejectedCookieMarkedBad(t *testing.T) {
	h := fleettest.New(t)
	h.Reply(abi.OpPoolClaim, claimed(t))
	h.Reply(abi.OpHTTP, abi.HTTPReply{Status: 403})
	h.Reply(abi.OpPoolMarkBad, abi.Empty{})
	res := h.Handle(contracts.ScrapeTask{URL: target})
	if res.Outcome != abi.OutcomeRetry {
		t.Fatalf("handle = %+v, want retry", res)
	}
	if got := ops(h); got != "pool_claim http pool_mark_bad" {
		t.Fatalf("ops = %s, want pool_claim http pool_mark_bad", got)
	}
	bad := fleettest.Requests[abi.PoolMarkBadRequest](h, abi.OpPoolMarkBad)[0]
	if bad.Pool != "cookies" || bad.ID != "cookie-1" || !strings.Contains(bad.Reason, "403") {
		t.Errorf("mark_bad = %+v", bad)
	}
}

func TestScraped(t *testing.T) {
	h := fleettest.New(t)
	h.Reply(abi.OpPoolClaim, claimed(t))
	body := []byte("<html><head><TITLE>\n  Hello,\n world </TITLE></head><body>ok</body></html>")
	h.Reply(abi.OpHTTP, abi.HTTPReply{Status: 200, Body: body})
	h.Reply(abi.OpKVSet, abi.Empty{})
	h.Reply(abi.OpPoolRelease, abi.Empty{})
	h.Reply(abi.OpCounterIncr, abi.CounterReply{Value: 1})
	res := h.Handle(contracts.ScrapeTask{URL: target})
	if res.Outcome != abi.OutcomeDone {
		t.Fatalf("handle = %+v, want done", res)
	}
	if got := ops(h); got != "pool_claim http kv_set pool_release counter_incr" {
		t.Fatalf("ops = %s", got)
	}
	req := fleettest.Requests[abi.HTTPRequest](h, abi.OpHTTP)[0]
	if req.URL != target || req.Method != "GET" || req.Proxy != "http://proxy:3128" ||
		strings.Join(req.Headers["Cookie"], ",") != "a=1; cf_clearance=abc" || strings.Join(req.Headers["User-Agent"], ",") != "UA/1" {
		t.Errorf("http request = %+v", req)
	}
	set := fleettest.Requests[abi.KVSetRequest](h, abi.OpKVSet)[0]
	var page Page
	if err := json.Unmarshal(set.Value, &page); err != nil {
		t.Fatal(err)
	}
	wantPage := Page{URL: target, Status: 200, Length: len(body), Title: "Hello, world"}
	if set.Namespace != "scraper:results" || set.Key != ResultKey(target) || len(set.Key) != 32 || page != wantPage {
		t.Errorf("kv_set = %s %s %+v, want scraper:results %s %+v", set.Namespace, set.Key, page, ResultKey(target), wantPage)
	}
	if rel := fleettest.Requests[abi.PoolReleaseRequest](h, abi.OpPoolRelease)[0]; rel.ID != "cookie-1" || rel.Token != "lease-1" {
		t.Errorf("release = %+v, want cookie-1 with its lease token", rel)
	}
	if c := fleettest.Requests[abi.CounterIncrRequest](h, abi.OpCounterIncr)[0]; c.Name != "scraper:scraped" || c.Delta != 1 {
		t.Errorf("counter_incr = %+v", c)
	}
}

func TestNetworkErrorFails(t *testing.T) {
	h := fleettest.New(t)
	h.Reply(abi.OpPoolClaim, claimed(t))
	h.Reply(abi.OpHTTP, abi.HTTPReply{Error: "dial tcp 127.0.0.1:8080: connect: connection refused", ErrorCode: "refused"})
	h.Reply(abi.OpPoolRelease, abi.Empty{})
	res := h.Handle(contracts.ScrapeTask{URL: target})
	if res.Outcome != abi.OutcomeFail || !strings.Contains(res.Reason, "refused") {
		t.Fatalf("handle = %+v, want fail naming the refusal", res)
	}
	if got := ops(h); got != "pool_claim http pool_release" {
		t.Fatalf("ops = %s, want the cookie released", got)
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
