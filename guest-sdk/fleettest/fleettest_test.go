package fleettest_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/abi"
	fleet "github.com/fleethost/fleet/guest-sdk"
	"github.com/fleethost/fleet/guest-sdk/fleettest"
	"github.com/fleethost/fleet/guest-sdk/internal/wirefake"
)

type cookie struct {
	Value string `json:"value"`
}

type cookieTags struct {
	Site  string `json:"site"`
	Fresh bool   `json:"fresh"`
}

var (
	cookies = fleet.NewPool[cookie, cookieTags]("cookies")
	harvest = fleet.NewQueue[cookieTags]("harvest")
)

// The SDK's calls go to the fake host directly here: no handler is needed to ask it.

func TestPool(t *testing.T) {
	h := fleettest.New(t)
	ids := h.Pool(cookies,
		fleettest.Item{Payload: cookie{"a"}, Tags: cookieTags{Site: "x", Fresh: true}},
		fleettest.Item{Payload: cookie{"b"}, Tags: cookieTags{Site: "y", Fresh: true}},
	)
	if got, err := fleet.Pool(cookies).Size(); err != nil || got != 2 {
		t.Fatalf("Size = %d, %v; want 2", got, err)
	}
	it, err := fleet.Pool(cookies).Where(fleet.Eq("site", "y")).Claim(time.Minute)
	if err != nil || it == nil || it.ID != ids[1] || it.Payload.Value != "b" || it.Tags != (cookieTags{"y", true}) || it.LeasedUntil.IsZero() {
		t.Fatalf("Claim(site y) = %+v, %v; want item b, leased", it, err)
	}
	if again, err := fleet.Pool(cookies).Where(fleet.Eq("site", "y")).Claim(time.Minute); again != nil || err != nil {
		t.Fatalf("Claim of a leased item = %+v, %v; want nil, nil", again, err)
	}
	if none, err := fleet.Pool(cookies).Where(fleet.Eq("site", "x"), fleet.Eq("fresh", false)).Claim(time.Minute); none != nil || err != nil {
		t.Fatalf("Claim(site x, stale) = %+v, %v; want nil, nil", none, err)
	}
	if err := it.Extend(time.Hour); err != nil || time.Until(it.LeasedUntil) < 59*time.Minute {
		t.Fatalf("Extend = %v, leased until %v; want an hour from now", err, it.LeasedUntil)
	}
	if err := it.Release(); err != nil {
		t.Fatalf("Release = %v", err)
	}
	if err := it.Release(); !errors.Is(err, fleet.ErrConflict) {
		t.Fatalf("Release again = %v, want ErrConflict: the lease ended", err)
	}
	listed, err := fleet.Pool(cookies).List()
	if err != nil || len(listed) != 2 {
		t.Fatalf("List = %+v, %v; want both items", listed, err)
	}
	if err := listed[0].MarkBad("rejected"); err != nil {
		t.Fatalf("MarkBad = %v", err)
	}
	if err := listed[0].MarkBad("again"); !errors.Is(err, fleet.ErrNotFound) {
		t.Fatalf("MarkBad of a gone item = %v, want ErrNotFound", err)
	}
	if bad := h.MarkedBad(cookies); len(bad) != 1 || bad[ids[0]] != "rejected" {
		t.Fatalf("MarkedBad = %v, want %s rejected", bad, ids[0])
	}
	id, err := fleet.Pool(cookies).Put(cookie{"c"}, cookieTags{Site: "z"}, 0)
	if err != nil {
		t.Fatalf("Put = %v", err)
	}
	items := fleettest.Items(h, cookies)
	if len(items) != 2 || items[0].ID != ids[1] || !items[0].LeasedUntil.IsZero() || items[1].ID != id || items[1].Payload.Value != "c" || items[1].Tags.Site != "z" {
		t.Fatalf("Items = %+v, want b (released) and c", items)
	}
}

func TestPoolItemExpires(t *testing.T) {
	h := fleettest.New(t)
	h.Pool(cookies, fleettest.Item{Payload: cookie{"a"}, Tags: cookieTags{}, TTL: time.Nanosecond}) // a whole millisecond
	items := fleettest.Items(h, cookies)
	if len(items) != 1 || items[0].ExpiresAt.IsZero() {
		t.Fatalf("Items = %+v, want one that expires", items)
	}
	for !time.Now().After(items[0].ExpiresAt) {
		time.Sleep(time.Millisecond) // until the item's expiry has passed
	}
	if it, err := fleet.Pool(cookies).Claim(time.Minute); it != nil || err != nil {
		t.Fatalf("Claim of an expired item = %+v, %v; want nil, nil", it, err)
	}
	if items := fleettest.Items(h, cookies); len(items) != 0 {
		t.Fatalf("Items after expiry = %+v, want none", items)
	}
}

func TestKV(t *testing.T) {
	h := fleettest.New(t)
	h.KV("p:seen", "k", cookieTags{Site: "x"})
	if v, ok, err := fleet.GetAs[cookieTags](fleet.KV("p:seen"), "k"); err != nil || !ok || v.Site != "x" {
		t.Fatalf("GetAs = %+v, %v, %v; want site x", v, ok, err)
	}
	if err := fleet.KV("p:seen").Set("n", 7, 0); err != nil {
		t.Fatalf("Set = %v", err)
	}
	if v, ok := h.KVValue("p:seen", "n"); !ok || string(v) != "7" {
		t.Fatalf("KVValue = %s, %v; want 7", v, ok)
	}
	if existed, err := fleet.KV("p:seen").Delete("k"); err != nil || !existed {
		t.Fatalf("Delete = %v, %v; want true", existed, err)
	}
	if _, ok, err := fleet.KV("p:seen").Get("k"); ok || err != nil {
		t.Fatalf("Get after Delete = %v, %v; want not found", ok, err)
	}
}

func TestCounterAndConfig(t *testing.T) {
	h := fleettest.New(t)
	if cfg, err := fleet.Config[cookieTags](); err != nil || cfg != (cookieTags{}) {
		t.Fatalf("Config with none given = %+v, %v; want the zero value", cfg, err)
	}
	h.Config(cookieTags{Site: "c"})
	if cfg, err := fleet.Config[cookieTags](); err != nil || cfg.Site != "c" {
		t.Fatalf("Config = %+v, %v; want site c", cfg, err)
	}
	h.Counter("p:done", 41)
	if v, err := fleet.Counter("p:done").Incr(); err != nil || v != 42 {
		t.Fatalf("Incr = %d, %v; want 42", v, err)
	}
	if v, err := fleet.Counter("p:done").IncrBy(-2); err != nil || v != 40 || h.CounterValue("p:done") != 40 {
		t.Fatalf("IncrBy(-2) = %d, %v; want 40", v, err)
	}
}

func TestLock(t *testing.T) {
	h := fleettest.New(t)
	held, err := fleet.Lock("p:a", time.Minute, 0)
	if err != nil || held == nil || held.Fence != 1 || !h.Held("p:a") {
		t.Fatalf("Lock = %+v, %v; want acquired with fence 1", held, err)
	}
	if again, err := fleet.Lock("p:a", time.Minute, time.Second); again != nil || err != nil {
		t.Fatalf("Lock while held = %+v, %v; want nil, nil", again, err)
	}
	if ok, err := held.Release(); !ok || err != nil || h.Held("p:a") {
		t.Fatalf("Release = %v, %v; want released", ok, err)
	}
	if next, err := fleet.Lock("p:a", time.Minute, 0); err != nil || next == nil || next.Fence != 2 {
		t.Fatalf("Lock after release = %+v, %v; want fence 2", next, err)
	}
	h.Lock("p:b")
	if other, err := fleet.Lock("p:b", time.Minute, time.Minute); other != nil || err != nil || !h.Held("p:b") {
		t.Fatalf("Lock held by another slot = %+v, %v; want nil, nil", other, err)
	}
}

func TestSubmit(t *testing.T) {
	h := fleettest.New(t)
	first, err := fleet.SubmitOnce(harvest, "x", cookieTags{Site: "x"})
	if err != nil {
		t.Fatalf("SubmitOnce = %v", err)
	}
	if again, err := fleet.SubmitOnce(harvest, "x", cookieTags{Site: "x"}); err != nil || again != first {
		t.Fatalf("SubmitOnce again = %q, %v; want the first task %q", again, err, first)
	}
	if _, err := fleet.SubmitOnce(harvest, "x", cookieTags{Site: "other"}); !errors.Is(err, fleet.ErrConflict) {
		t.Fatalf("SubmitOnce of another payload under the key = %v, want ErrConflict", err)
	}
	if _, err := fleet.Submit(harvest, cookieTags{Site: "y"}); err != nil {
		t.Fatalf("Submit = %v", err)
	}
	if got := fleettest.Submitted(h, harvest); len(got) != 2 || got[0].Site != "x" || got[1].Site != "y" {
		t.Fatalf("Submitted = %+v, want x then y", got)
	}
}

func TestHTTP(t *testing.T) {
	h := fleettest.New(t)
	h.HTTP("http://x/", 403, "no").Header("Set-Cookie", "a=1").Header("Set-Cookie", "b=2")
	resp, err := fleet.Get("http://x/", fleet.Header{"User-Agent": {"UA"}})
	if err != nil || resp.Status != 403 || string(resp.Body) != "no" || strings.Join(resp.Header.Values("set-cookie"), ",") != "a=1,b=2" {
		t.Fatalf("Get = %+v, %v", resp, err)
	}
	h.HTTPError("http://down/", "refused", "connection refused")
	var ne *fleet.NetError
	if _, err := fleet.Get("http://down/", nil); !errors.As(err, &ne) || ne.Code != "refused" {
		t.Fatalf("Get of a refused URL = %v, want a NetError refused", err)
	}
	reqs := h.Requests()
	if len(reqs) != 2 || reqs[0].Method != "GET" || reqs[0].URL != "http://x/" || reqs[0].Header.Get("User-Agent") != "UA" {
		t.Fatalf("Requests = %+v", reqs)
	}
}

func TestUnansweredURLFailsTheTest(t *testing.T) {
	tb := &wirefake.RecordingTB{}
	defer tb.RunCleanups()
	fleettest.New(tb)
	if _, err := fleet.Get("http://nowhere/", nil); err == nil {
		t.Fatal("Get of a URL with no answer succeeded")
	}
	if len(tb.Errs) != 1 || !strings.Contains(tb.Errs[0], "GET http://nowhere/, which has no answer") {
		t.Fatalf("reported %q, want the URL with no answer", tb.Errs)
	}
}

func TestFailAndRecords(t *testing.T) {
	h := fleettest.New(t)
	h.Fail(abi.OpCounterIncr, abi.Unavailable, "backend down")
	if _, err := fleet.Counter("p:done").Incr(); !errors.Is(err, fleet.ErrUnavailable) || !strings.Contains(err.Error(), "backend down") {
		t.Fatalf("Incr = %v, want ErrUnavailable with the host's message", err)
	}
	fleet.Info("hello", "n", 1)
	if err := fleet.Metric("p_seen", fleet.MetricGauge, 3); err != nil {
		t.Fatalf("Metric = %v", err)
	}
	if _, _, err := fleet.KV("p:kv").Get("k"); err != nil {
		t.Fatalf("Get = %v", err)
	}
	want := []fleettest.Call{{Op: abi.OpCounterIncr, Name: "p:done"}, {Op: abi.OpLog}, {Op: abi.OpMetric, Name: "p_seen"}, {Op: abi.OpKVGet, Name: "p:kv", Key: "k"}}
	if got := h.Calls(); len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] || got[3] != want[3] {
		t.Fatalf("Calls = %+v, want %+v", got, want)
	}
	if logs := h.Logs(); len(logs) != 1 || logs[0].Level != "info" || logs[0].Message != "hello" || logs[0].Attrs["n"] != float64(1) {
		t.Fatalf("Logs = %+v", logs)
	}
	if m := h.Metrics(); len(m) != 1 || m[0] != (fleettest.Metric{Name: "p_seen", Kind: "gauge", Value: 3}) {
		t.Fatalf("Metrics = %+v", m)
	}
}

// TestPoolHealth: the fake keeps health as the host does: a claim prefers the lowest
// score, a penalty retires past max_error_score, a credit never goes below 0, and the
// last of max_uses retires the item when released.
func TestPoolHealth(t *testing.T) {
	h := fleettest.New(t)
	ids := h.Pool(cookies,
		fleettest.Item{Payload: cookie{"sick"}, Score: 2, Health: fleet.Health{MaxErrorScore: 2}},
		fleettest.Item{Payload: cookie{"well"}, Health: fleet.Health{MaxUses: 2}},
	)
	for use := 1; use <= 2; use++ {
		it, err := fleet.Pool(cookies).Claim(time.Minute)
		if err != nil || it == nil || it.ID != ids[1] || it.Uses != use {
			t.Fatalf("claim %d = %+v, %v; want the healthy item, use %d", use, it, err, use)
		}
		if err := it.Release(); err != nil {
			t.Fatal(err)
		}
	}
	items := fleettest.Items(h, cookies)
	if len(items) != 1 || items[0].ID != ids[0] {
		t.Fatalf("Items after the healthy item's last use = %+v, want only the sick one", items)
	}
	sick, _ := fleet.Pool(cookies).Claim(time.Minute)
	if err := sick.MarkGood(); err != nil {
		t.Fatal(err)
	}
	if got := fleettest.Items(h, cookies)[0].Score; got != 1 {
		t.Errorf("score after MarkGood = %d, want 1", got)
	}
	if err := sick.Penalize("stale", 2); err != nil {
		t.Fatal(err)
	}
	if bad := h.MarkedBad(cookies); bad[ids[0]] != "stale" || len(fleettest.Items(h, cookies)) != 0 {
		t.Errorf("MarkedBad = %v, items %d; want the sick item retired for stale", bad, len(fleettest.Items(h, cookies)))
	}
}
