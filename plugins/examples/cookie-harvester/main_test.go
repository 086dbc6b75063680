package main

import (
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/guest-sdk/fleettest"
	"github.com/fleethost/fleet/plugins/examples/contracts"
)

const site = "127.0.0.1:8080"

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
	if d.Type != "cookie-harvester" || d.Consumes.Name != "harvest" || len(d.Pools) != 1 || d.Pools[0].Name != "cookies" || len(d.ConfigSchema) == 0 {
		t.Fatalf("Describe() = %+v", d)
	}
}

func TestHarvest(t *testing.T) {
	h := fleettest.New(t)
	h.Config(Config{Scheme: "http", CookieTTLSeconds: 60})
	h.HTTP("http://"+site+"/clearance", 200, "").
		Header("Set-Cookie", "cf_clearance=abc123; Path=/; HttpOnly").
		Header("Set-Cookie", `__cf_bm="q"; Max-Age=1800`)
	start := time.Now()
	res := h.Handle(contracts.HarvestRequest{Site: site})
	if res.Outcome != abi.OutcomeDone {
		t.Fatalf("handle = %+v, want done", res)
	}
	if got := ops(h); got != "config_get lock_acquire pool_list http pool_put lock_release counter_incr" {
		t.Fatalf("ops = %s", got)
	}
	if h.Held(LockPrefix + site) {
		t.Errorf("lock %s%s is still held, want it released", LockPrefix, site)
	}
	if get := h.Requests()[0]; get.URL != "http://"+site+"/clearance" || get.Header.Get("User-Agent") != DefaultUserAgent {
		t.Errorf("http = %+v, want GET http://%s/clearance with the default User-Agent", get, site)
	}
	items := fleettest.Items(h, contracts.Cookies)
	if len(items) != 1 {
		t.Fatalf("cookies = %+v, want the harvested one", items)
	}
	cookie := items[0]
	if cookie.Tags != (contracts.CfCookieTags{Site: site, Fresh: true}) || cookie.ExpiresAt.Before(start.Add(time.Minute)) || cookie.ExpiresAt.After(time.Now().Add(time.Minute)) ||
		cookie.Payload.Site != site || cookie.Payload.UserAgent != DefaultUserAgent || len(cookie.Payload.Cookies) != 2 || cookie.Payload.Cookies["cf_clearance"] != "abc123" || cookie.Payload.Cookies["__cf_bm"] != "q" {
		t.Errorf("cookie = %+v, want the harvested one for a minute", cookie)
	}
	if n := h.CounterValue(HarvestsCounter); n != 1 {
		t.Errorf("%s = %d, want 1", HarvestsCounter, n)
	}
}

func TestDefaults(t *testing.T) {
	h := fleettest.New(t)
	h.HTTP("https://example.com/clearance", 200, "").Header("Set-Cookie", "a=1")
	start := time.Now()
	if res := h.Handle(contracts.HarvestRequest{Site: "example.com"}); res.Outcome != abi.OutcomeDone {
		t.Fatalf("handle = %+v", res)
	}
	if get := h.Requests()[0]; get.URL != "https://example.com/clearance" {
		t.Errorf("clearance URL = %s, want https by default", get.URL)
	}
	if items := fleettest.Items(h, contracts.Cookies); len(items) != 1 || items[0].ExpiresAt.Before(start.Add(DefaultCookieTTL)) || items[0].ExpiresAt.After(time.Now().Add(DefaultCookieTTL)) {
		t.Errorf("cookies = %+v, want one that lasts the default %v", items, DefaultCookieTTL)
	}
}

func TestSomeoneElseHarvests(t *testing.T) {
	h := fleettest.New(t)
	h.Lock(LockPrefix + site)
	if res := h.Handle(contracts.HarvestRequest{Site: site}); res.Outcome != abi.OutcomeDone {
		t.Fatalf("handle = %+v, want done", res)
	}
	if got := ops(h); got != "config_get lock_acquire" {
		t.Fatalf("ops = %s, want nothing after a lock held elsewhere", got)
	}
}

func TestFreshCookieExists(t *testing.T) {
	h := fleettest.New(t)
	h.Pool(contracts.Cookies, fleettest.Item{
		Payload: contracts.CfCookie{Cookies: map[string]string{"a": "1"}, UserAgent: "u", Site: site},
		Tags:    contracts.CfCookieTags{Site: site, Fresh: true},
	})
	if res := h.Handle(contracts.HarvestRequest{Site: site}); res.Outcome != abi.OutcomeDone {
		t.Fatalf("handle = %+v, want done", res)
	}
	if got := ops(h); got != "config_get lock_acquire pool_list lock_release" {
		t.Fatalf("ops = %s, want no harvest and the lock released", got)
	}
}

func TestClearanceRefused(t *testing.T) {
	url := "https://" + site + "/clearance"
	for name, tt := range map[string]struct {
		answer  func(h *fleettest.Host)
		outcome string
	}{
		"5xx":       {func(h *fleettest.Host) { h.HTTP(url, 503, "") }, abi.OutcomeFail},
		"429":       {func(h *fleettest.Host) { h.HTTP(url, 429, "") }, abi.OutcomeFail},
		"404 parks": {func(h *fleettest.Host) { h.HTTP(url, 404, "") }, abi.OutcomePark},
		"no cookie": {func(h *fleettest.Host) { h.HTTP(url, 200, "") }, abi.OutcomeFail},
		"network":   {func(h *fleettest.Host) { h.HTTPError(url, "timeout", "timeout") }, abi.OutcomeFail},
	} {
		t.Run(name, func(t *testing.T) {
			h := fleettest.New(t)
			tt.answer(h)
			if res := h.Handle(contracts.HarvestRequest{Site: site}); res.Outcome != tt.outcome {
				t.Fatalf("handle = %+v, want %s", res, tt.outcome)
			}
			if got := ops(h); got != "config_get lock_acquire pool_list http lock_release" {
				t.Fatalf("ops = %s, want no put and the lock released", got)
			}
		})
	}
}

func TestBadSite(t *testing.T) {
	h := fleettest.New(t)
	for _, s := range []string{"", "a/b", "user@host", "[::1]:80", strings.Repeat("a", 191)} {
		if res := h.Handle(contracts.HarvestRequest{Site: s}); res.Outcome != abi.OutcomeFail {
			t.Errorf("handle(%q) = %+v, want fail", s, res)
		}
	}
	if len(h.Calls()) != 0 {
		t.Fatalf("bad sites reached the host: %v", h.Ops())
	}
}
