package main

import (
	"encoding/json"
	"strings"
	"testing"

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

func script(h *fleettest.Host, config string) {
	h.Reply(abi.OpConfigGet, abi.ConfigGetReply{Config: json.RawMessage(config)})
	h.Reply(abi.OpLockAcquire, abi.LockAcquireReply{Acquired: true, Token: "lock-1", Fence: 1})
	h.Reply(abi.OpLockRelease, abi.LockReleaseReply{Released: true})
	h.Reply(abi.OpPoolList, abi.PoolListReply{Items: []abi.PoolItem{}})
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
	script(h, `{"scheme":"http","cookie_ttl_seconds":60}`)
	h.Reply(abi.OpHTTP, abi.HTTPReply{Status: 200, Headers: map[string][]string{"Set-Cookie": {"cf_clearance=abc123; Path=/; HttpOnly", "__cf_bm=\"q\"; Max-Age=1800"}}})
	h.Reply(abi.OpPoolPut, abi.PoolPutReply{ID: "cookie-1"})
	h.Reply(abi.OpCounterIncr, abi.CounterReply{Value: 1})
	res := h.Handle(contracts.HarvestRequest{Site: site})
	if res.Outcome != abi.OutcomeDone {
		t.Fatalf("handle = %+v, want done", res)
	}
	if got := ops(h); got != "config_get lock_acquire pool_list http pool_put lock_release counter_incr" {
		t.Fatalf("ops = %s", got)
	}
	lock := fleettest.Requests[abi.LockAcquireRequest](h, abi.OpLockAcquire)[0]
	if lock != (abi.LockAcquireRequest{Name: "harvest:" + site, HoldMs: 30000}) {
		t.Errorf("lock_acquire = %+v, want harvest:%s held 30s without waiting", lock, site)
	}
	list := fleettest.Requests[abi.PoolListRequest](h, abi.OpPoolList)[0]
	if list.Pool != "cookies" || string(list.Where["site"]) != `"`+site+`"` || string(list.Where["fresh"]) != "true" {
		t.Errorf("pool_list = %+v, want fresh cookies of %s", list, site)
	}
	get := fleettest.Requests[abi.HTTPRequest](h, abi.OpHTTP)[0]
	if get.URL != "http://"+site+"/clearance" || get.Headers["User-Agent"][0] != DefaultUserAgent {
		t.Errorf("http = %+v, want GET http://%s/clearance with the default User-Agent", get, site)
	}
	put := fleettest.Requests[abi.PoolPutRequest](h, abi.OpPoolPut)[0]
	var cookie contracts.CfCookie
	if err := json.Unmarshal(put.Payload, &cookie); err != nil {
		t.Fatal(err)
	}
	if put.Pool != "cookies" || string(put.Tags) != `{"site":"`+site+`","fresh":true}` || put.TTLMs != 60000 ||
		cookie.Site != site || cookie.UserAgent != DefaultUserAgent || len(cookie.Cookies) != 2 || cookie.Cookies["cf_clearance"] != "abc123" || cookie.Cookies["__cf_bm"] != "q" {
		t.Errorf("pool_put = %s %s ttl %d, cookie %+v", put.Pool, put.Tags, put.TTLMs, cookie)
	}
	if rel := fleettest.Requests[abi.LockReleaseRequest](h, abi.OpLockRelease)[0]; rel.Token != "lock-1" {
		t.Errorf("lock_release = %+v, want the lease's token", rel)
	}
	if c := fleettest.Requests[abi.CounterIncrRequest](h, abi.OpCounterIncr)[0]; c.Name != HarvestsCounter {
		t.Errorf("counter_incr = %+v", c)
	}
}

func TestDefaults(t *testing.T) {
	h := fleettest.New(t)
	script(h, `{}`)
	h.Reply(abi.OpHTTP, abi.HTTPReply{Status: 200, Headers: map[string][]string{"Set-Cookie": {"a=1"}}})
	h.Reply(abi.OpPoolPut, abi.PoolPutReply{ID: "cookie-1"})
	h.Reply(abi.OpCounterIncr, abi.CounterReply{Value: 1})
	if res := h.Handle(contracts.HarvestRequest{Site: "example.com"}); res.Outcome != abi.OutcomeDone {
		t.Fatalf("handle = %+v", res)
	}
	if get := fleettest.Requests[abi.HTTPRequest](h, abi.OpHTTP)[0]; get.URL != "https://example.com/clearance" {
		t.Errorf("clearance URL = %s, want https by default", get.URL)
	}
	if put := fleettest.Requests[abi.PoolPutRequest](h, abi.OpPoolPut)[0]; put.TTLMs != DefaultCookieTTL.Milliseconds() {
		t.Errorf("ttl = %dms, want the default %v", put.TTLMs, DefaultCookieTTL)
	}
}

func TestSomeoneElseHarvests(t *testing.T) {
	h := fleettest.New(t)
	h.Reply(abi.OpConfigGet, abi.ConfigGetReply{Config: json.RawMessage(`{}`)})
	h.Reply(abi.OpLockAcquire, abi.LockAcquireReply{Acquired: false})
	if res := h.Handle(contracts.HarvestRequest{Site: site}); res.Outcome != abi.OutcomeDone {
		t.Fatalf("handle = %+v, want done", res)
	}
	if got := ops(h); got != "config_get lock_acquire" {
		t.Fatalf("ops = %s, want nothing after a lock held elsewhere", got)
	}
}

func TestFreshCookieExists(t *testing.T) {
	h := fleettest.New(t)
	script(h, `{}`)
	h.Reply(abi.OpPoolList, abi.PoolListReply{Items: []abi.PoolItem{{ID: "c0", Payload: json.RawMessage(`{"cookies":{"a":"1"},"user_agent":"u","site":"` + site + `"}`), Tags: json.RawMessage(`{"site":"` + site + `","fresh":true}`)}}})
	if res := h.Handle(contracts.HarvestRequest{Site: site}); res.Outcome != abi.OutcomeDone {
		t.Fatalf("handle = %+v, want done", res)
	}
	if got := ops(h); got != "config_get lock_acquire pool_list lock_release" {
		t.Fatalf("ops = %s, want no harvest and the lock released", got)
	}
}

func TestClearanceRefused(t *testing.T) {
	for name, reply := range map[string]abi.HTTPReply{
		"status":    {Status: 503},
		"no cookie": {Status: 200},
		"network":   {Error: "timeout", ErrorCode: "timeout"},
	} {
		t.Run(name, func(t *testing.T) {
			h := fleettest.New(t)
			script(h, `{}`)
			h.Reply(abi.OpHTTP, reply)
			if res := h.Handle(contracts.HarvestRequest{Site: site}); res.Outcome != abi.OutcomeFail {
				t.Fatalf("handle = %+v, want fail", res)
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
