package fleet

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/guest-sdk/internal/hostcall"
	"github.com/fleethost/fleet/guest-sdk/internal/wirefake"
)

type cookie struct {
	Cookies   map[string]string `json:"cookies"`
	UserAgent string            `json:"user_agent"`
}

type cookieTags struct {
	Site  string `json:"site"`
	Fresh bool   `json:"fresh"`
}

var testPool = NewPool[cookie, cookieTags]("cookies")

func TestErrorsIs(t *testing.T) {
	for _, kind := range abi.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			h := wirefake.New(t)
			h.Fail(abi.OpCounterGet, kind, "the host's words")
			_, err := Counter("c").Get()
			if err == nil {
				t.Fatal("Counter.Get() = nil error, want one")
			}
			for k, s := range sentinels {
				if got := errors.Is(err, s); got != (k == kind) {
					t.Errorf("errors.Is(%v, %v) = %v, want %v", err, s, got, k == kind)
				}
			}
			var he *HostError
			if !errors.As(err, &he) || he.Kind != kind || he.Op != "counter_get" || he.Message != "the host's words" {
				t.Fatalf("errors.As(%v) = %+v, want kind %s, op counter_get and the host's message", err, he, kind)
			}
			if want := "fleet: counter_get: " + string(kind) + ": the host's words"; err.Error() != want {
				t.Errorf("err.Error() = %q, want %q", err.Error(), want)
			}
		})
	}
	if len(sentinels) != len(abi.Kinds) {
		t.Errorf("%d sentinels for %d kinds", len(sentinels), len(abi.Kinds))
	}
}

// TestRequests checks the bytes each client call puts on the wire.
func TestRequests(t *testing.T) {
	tests := []struct {
		name  string
		op    abi.Op
		reply any
		do    func() error
		want  string
	}{
		{"pool put", abi.OpPoolPut, abi.PoolPutReply{ID: "i1"}, func() error {
			_, err := Pool(testPool).Put(cookie{Cookies: map[string]string{"cf": "1"}, UserAgent: "ua"}, cookieTags{Site: "x", Fresh: true}, 1500*time.Millisecond+1)
			return err
		}, `{"pool":"cookies","payload":{"cookies":{"cf":"1"},"user_agent":"ua"},"tags":{"site":"x","fresh":true},"ttl_ms":1501}`},
		{"pool claim where", abi.OpPoolClaim, abi.PoolClaimReply{}, func() error {
			_, err := Pool(testPool).Where(Eq("site", "x"), Eq("fresh", true)).Claim(20 * time.Second)
			return err
		}, `{"pool":"cookies","where":{"fresh":true,"site":"x"},"hold_ms":20000}`},
		{"pool list limit", abi.OpPoolList, abi.PoolListReply{}, func() error {
			_, err := Pool(testPool).Where(Eq("site", "x")).Limit(1).List()
			return err
		}, `{"pool":"cookies","where":{"site":"x"},"limit":1}`},
		{"pool size", abi.OpPoolSize, abi.PoolSizeReply{Size: 3}, func() error {
			_, err := Pool(testPool).Size()
			return err
		}, `{"pool":"cookies"}`},
		{"kv set", abi.OpKVSet, abi.Empty{}, func() error {
			return KV("ns").Set("k", map[string]int{"a": 1}, 0)
		}, `{"namespace":"ns","key":"k","value":{"a":1}}`},
		{"kv delete", abi.OpKVDelete, abi.KVDeleteReply{Existed: true}, func() error {
			_, err := KV("ns").Delete("k")
			return err
		}, `{"namespace":"ns","key":"k"}`},
		{"lock", abi.OpLockAcquire, abi.LockAcquireReply{}, func() error {
			_, err := Lock("harvest:x", 30*time.Second, 0)
			return err
		}, `{"name":"harvest:x","hold_ms":30000}`},
		{"counter decr", abi.OpCounterIncr, abi.CounterReply{Value: -1}, func() error {
			_, err := Counter("c").Decr()
			return err
		}, `{"name":"c","delta":-1}`},
		{"counter incrby 0 reads", abi.OpCounterGet, abi.CounterReply{}, func() error {
			_, err := Counter("c").IncrBy(0)
			return err
		}, `{"name":"c"}`},
		{"submit once", abi.OpSubmit, abi.SubmitReply{TaskID: "t"}, func() error {
			_, err := SubmitOnce(NewQueue[cookieTags]("q"), "site:s", cookieTags{Site: "s"})
			return err
		}, `{"queue":"q","payload":{"site":"s","fresh":false},"key":"site:s"}`},
		{"config", abi.OpConfigGet, abi.ConfigGetReply{}, func() error {
			_, err := Config[cookieTags]()
			return err
		}, `{}`},
		{"http", abi.OpHTTP, abi.HTTPReply{Status: 200}, func() error {
			_, err := HTTP(Request{URL: "http://x/", Header: Header{"Cookie": {"a=b"}}, Body: []byte("hi"), Timeout: 2 * time.Second})
			return err
		}, `{"method":"GET","url":"http://x/","headers":{"Cookie":["a=b"]},"body":"aGk=","timeout_ms":2000}`},
		{"metric", abi.OpMetric, abi.Empty{}, func() error {
			return Metric("bytes", MetricCounter, 12)
		}, `{"name":"bytes","kind":"counter","value":12}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := wirefake.New(t)
			h.Reply(tt.op, tt.reply)
			if err := tt.do(); err != nil {
				t.Fatalf("call = %v, want nil", err)
			}
			calls := h.Calls()
			if len(calls) != 1 || calls[0].Op != tt.op || string(calls[0].Request) != tt.want {
				t.Fatalf("calls = %s, want one %s call with %s", fmtCalls(calls), tt.op, tt.want)
			}
		})
	}
}

func fmtCalls(calls []wirefake.Call) string {
	var b strings.Builder
	for _, c := range calls {
		b.WriteString(string(c.Op) + " " + string(c.Request) + "; ")
	}
	return b.String()
}

func TestReplies(t *testing.T) {
	h := wirefake.New(t)
	now := time.UnixMilli(time.Now().UnixMilli())
	h.Reply(abi.OpPoolClaim, abi.PoolClaimReply{Found: true, Token: "tok", UntilMs: now.Add(20 * time.Second).UnixMilli(), Item: &abi.PoolItem{
		ID: "i1", Payload: json.RawMessage(`{"cookies":{"cf":"1"},"user_agent":"ua"}`), Tags: json.RawMessage(`{"site":"x","fresh":true}`), CreatedAtMs: now.UnixMilli(),
	}})
	h.Reply(abi.OpPoolExtend, abi.PoolExtendReply{UntilMs: now.Add(time.Minute).UnixMilli()})
	h.Reply(abi.OpPoolRelease, abi.Empty{})
	h.Reply(abi.OpPoolMarkBad, abi.Empty{})
	item, err := Pool(testPool).Where(Eq("site", "x")).Claim(20 * time.Second)
	if err != nil || item == nil {
		t.Fatalf("Claim = %v, %v, want an item", item, err)
	}
	if item.ID != "i1" || item.Payload.Cookies["cf"] != "1" || item.Tags != (cookieTags{"x", true}) || !item.CreatedAt.Equal(now) || !item.LeasedUntil.Equal(now.Add(20*time.Second)) {
		t.Fatalf("Claim = %+v", item)
	}
	if err := item.Extend(time.Minute); err != nil {
		t.Fatal(err)
	}
	if !item.LeasedUntil.Equal(now.Add(time.Minute)) {
		t.Errorf("LeasedUntil after Extend = %v, want the host's until %v", item.LeasedUntil, now.Add(time.Minute))
	}
	if ext := wirefake.Requests[abi.PoolExtendRequest](h, abi.OpPoolExtend); len(ext) != 1 || ext[0] != (abi.PoolExtendRequest{Pool: "cookies", ID: "i1", Token: "tok", HoldMs: 60000}) {
		t.Errorf("extend requests = %+v", ext)
	}
	if err := item.Release(); err != nil {
		t.Fatal(err)
	}
	if err := item.MarkBad("403"); err != nil {
		t.Fatal(err)
	}
	rel := wirefake.Requests[abi.PoolReleaseRequest](h, abi.OpPoolRelease)
	bad := wirefake.Requests[abi.PoolMarkBadRequest](h, abi.OpPoolMarkBad)
	if len(rel) != 1 || rel[0] != (abi.PoolReleaseRequest{Pool: "cookies", ID: "i1", Token: "tok"}) {
		t.Errorf("release requests = %+v", rel)
	}
	if len(bad) != 1 || bad[0] != (abi.PoolMarkBadRequest{Pool: "cookies", ID: "i1", Reason: "403"}) {
		t.Errorf("mark_bad requests = %+v", bad)
	}

	h.Reply(abi.OpPoolClaim, abi.PoolClaimReply{Found: false})
	if item, err := Pool(testPool).Claim(time.Second); item != nil || err != nil {
		t.Errorf("Claim on an empty pool = %v, %v, want nil, nil", item, err)
	}

	h.Reply(abi.OpPoolList, abi.PoolListReply{Items: []abi.PoolItem{{ID: "i2", Payload: json.RawMessage(`{"cookies":{},"user_agent":""}`), Tags: json.RawMessage(`{"site":"y","fresh":false}`)}}})
	items, err := Pool(testPool).List()
	if err != nil || len(items) != 1 || items[0].Tags.Site != "y" {
		t.Fatalf("List = %+v, %v", items, err)
	}
	if err := items[0].Release(); !errors.Is(err, ErrValueError) {
		t.Errorf("Release of a listed item = %v, want ErrValueError", err)
	}
	if err := items[0].Extend(time.Minute); !errors.Is(err, ErrValueError) {
		t.Errorf("Extend of a listed item = %v, want ErrValueError", err)
	}

	h.Reply(abi.OpLockAcquire, abi.LockAcquireReply{Acquired: true, Token: "lt", Fence: 9})
	h.Reply(abi.OpLockRelease, abi.LockReleaseReply{Released: true})
	held, err := Lock("l", time.Second, 0)
	if err != nil || held == nil || held.Fence != 9 {
		t.Fatalf("Lock = %+v, %v, want fence 9", held, err)
	}
	if ok, err := held.Release(); !ok || err != nil {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	if got := wirefake.Requests[abi.LockReleaseRequest](h, abi.OpLockRelease); len(got) != 1 || got[0].Token != "lt" {
		t.Errorf("lock_release requests = %+v, want the lease's token", got)
	}
	h.Reply(abi.OpLockAcquire, abi.LockAcquireReply{Acquired: false})
	if held, err := Lock("l", time.Second, 0); held != nil || err != nil {
		t.Errorf("Lock when held elsewhere = %v, %v, want nil, nil", held, err)
	}

	h.Reply(abi.OpKVGet, abi.KVGetReply{Found: true, Value: json.RawMessage(`{"site":"z","fresh":true}`)})
	if v, ok, err := GetAs[cookieTags](KV("ns"), "k"); err != nil || !ok || v.Site != "z" {
		t.Errorf("GetAs = %+v, %v, %v", v, ok, err)
	}
	if _, ok, err := GetAs[int](KV("ns"), "k"); ok || !errors.Is(err, ErrValueError) {
		t.Errorf("GetAs[int] of an object = %v, %v, want ErrValueError", ok, err)
	}
	h.Reply(abi.OpKVGet, abi.KVGetReply{Found: false})
	if v, ok, err := KV("ns").Get("k"); v != nil || ok || err != nil {
		t.Errorf("Get of an absent key = %s, %v, %v, want nil, false, nil", v, ok, err)
	}

	h.Reply(abi.OpConfigGet, abi.ConfigGetReply{Config: json.RawMessage(`{"site":"c","fresh":true}`)})
	if cfg, err := Config[cookieTags](); err != nil || cfg.Site != "c" {
		t.Errorf("Config = %+v, %v", cfg, err)
	}
	h.Reply(abi.OpConfigGet, abi.ConfigGetReply{Config: json.RawMessage(`null`)})
	if cfg, err := Config[cookieTags](); err != nil || cfg != (cookieTags{}) {
		t.Errorf("Config without one = %+v, %v, want the zero value", cfg, err)
	}
}

// TestClaimUndecodable: an item whose payload does not fit P is given back, and the error
// says why.
func TestClaimUndecodable(t *testing.T) {
	h := wirefake.New(t)
	h.Reply(abi.OpPoolClaim, abi.PoolClaimReply{Found: true, Token: "tok", Item: &abi.PoolItem{ID: "i1", Payload: json.RawMessage(`[1]`)}})
	h.Reply(abi.OpPoolRelease, abi.Empty{})
	item, err := Pool(testPool).Claim(time.Second)
	if item != nil || !errors.Is(err, ErrValueError) || !strings.Contains(err.Error(), "does not decode") {
		t.Fatalf("Claim = %v, %v, want nil and a ValueError", item, err)
	}
	if got := h.Ops(); len(got) != 2 || got[1] != abi.OpPoolRelease {
		t.Fatalf("ops = %v, want pool_claim then pool_release", got)
	}
}

func TestBadFilter(t *testing.T) {
	h := wirefake.New(t)
	_, err := Pool(testPool).Where(Eq("site", []string{"x"})).Claim(time.Second)
	if !errors.Is(err, ErrValueError) {
		t.Fatalf("Claim with a slice filter = %v, want ErrValueError", err)
	}
	_, err = Pool(testPool).Where(Eq("site", "x"), Eq("site", "y")).List()
	if !errors.Is(err, ErrValueError) {
		t.Fatalf("List with a tag twice = %v, want ErrValueError", err)
	}
	if len(h.Calls()) != 0 {
		t.Fatalf("bad filters reached the host: %v", h.Ops())
	}
}

// TestOversizedReply runs a reply larger than the reply buffer through the SDK: it is
// fetched and decoded whole.
func TestOversizedReply(t *testing.T) {
	h := wirefake.New(t)
	big := strings.Repeat("é", 40<<10)
	value, _ := json.Marshal(big)
	h.Reply(abi.OpKVGet, abi.KVGetReply{Found: true, Value: value})
	before := hostcall.ReplyCap()
	got, ok, err := GetAs[string](KV("ns"), "big")
	if err != nil || !ok || got != big {
		t.Fatalf("GetAs(big) = %d bytes, %v, %v, want %d bytes", len(got), ok, err, len(big))
	}
	if after := hostcall.ReplyCap(); after <= before || after < len(value) {
		t.Fatalf("reply buffer %d -> %d bytes, want grown past %d", before, after, len(value))
	}
}

func TestHTTP(t *testing.T) {
	h := wirefake.New(t)
	h.Reply(abi.OpHTTP, abi.HTTPReply{Status: 403, Headers: map[string][]string{"Set-Cookie": {"a=1", "b=2"}}, Body: []byte("no"), FinalURL: "http://x/final"})
	resp, err := Get("http://x/", nil)
	if err != nil || resp.Status != 403 || string(resp.Body) != "no" || resp.URL != "http://x/final" {
		t.Fatalf("Get = %+v, %v", resp, err)
	}
	if got := resp.Header.Values("set-cookie"); len(got) != 2 || resp.Header.Get("SET-COOKIE") != "a=1" {
		t.Errorf("Header.Values(set-cookie) = %v, want both cookies", got)
	}

	h.Reply(abi.OpHTTP, abi.HTTPReply{Error: "dial tcp: connection refused", ErrorCode: "refused"})
	_, err = Get("http://x/", nil)
	var ne *NetError
	var he *HostError
	if !errors.As(err, &ne) || ne.Code != "refused" || ne.URL != "http://x/" || errors.As(err, &he) {
		t.Fatalf("Get on a refused connection = %#v, want a *NetError only", err)
	}

	h.Fail(abi.OpHTTP, abi.PermissionDenied, `host "x" is not allowed`)
	_, err = Get("http://x/", nil)
	if !errors.Is(err, ErrPermissionDenied) || errors.As(err, &ne) {
		t.Fatalf("Get of a host not granted = %v, want ErrPermissionDenied", err)
	}
}

func TestLog(t *testing.T) {
	h := wirefake.New(t)
	Info("harvested", "site", "x", "n", 3, "err", errors.New("boom"), 42)
	Log(LevelDebug, "plain")
	got := wirefake.Requests[abi.LogRequest](h, abi.OpLog)
	if len(got) != 2 {
		t.Fatalf("log requests = %+v, want 2", got)
	}
	want := map[string]any{"site": "x", "n": float64(3), "err": "boom", "!BADKEY6": float64(42)}
	if got[0].Level != "info" || got[0].Message != "harvested" || len(got[0].Attrs) != len(want) {
		t.Fatalf("log request = %+v, want attrs %v", got[0], want)
	}
	for k, v := range want {
		if got[0].Attrs[k] != v {
			t.Errorf("attr %s = %#v, want %#v", k, got[0].Attrs[k], v)
		}
	}
	if got[1].Level != "debug" || got[1].Attrs != nil {
		t.Errorf("second log request = %+v", got[1])
	}
}

func TestMillis(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want int64
	}{
		{0, 0}, {time.Nanosecond, 1}, {time.Millisecond, 1}, {1500 * time.Microsecond, 2},
		{25 * time.Minute, 1500000}, {-time.Nanosecond, -1}, {-2 * time.Millisecond, -2},
	}
	for _, tt := range tests {
		if got := millis(tt.d); got != tt.want {
			t.Errorf("millis(%v) = %d, want %d", tt.d, got, tt.want)
		}
	}
}

// A claim decodes into the item that the claim before it left (claimItem), or into one of
// its own while that one is in use, and reads each reply afresh either way: a longer
// payload then a shorter one, and a reply that says found without an item.
func TestClaimReusesItsReplyItem(t *testing.T) {
	h := wirefake.New(t)
	claim := func(payload, tags string) (*Item[cookie, cookieTags], error) {
		h.Reply(abi.OpPoolClaim, abi.PoolClaimReply{Found: true, Token: "tok", Item: &abi.PoolItem{ID: "i-" + tags, Payload: json.RawMessage(payload), Tags: json.RawMessage(tags)}})
		return Pool(testPool).Claim(time.Second)
	}
	for _, held := range []bool{false, true} {
		if held {
			claimItem.Lock()
		}
		long, err := claim(`{"cookies":{"a":"1","bb":"22","ccc":"333"},"user_agent":"a long user agent"}`, `{"site":"long","fresh":true}`)
		if err != nil || long.Payload.UserAgent != "a long user agent" || len(long.Payload.Cookies) != 3 || long.Tags != (cookieTags{"long", true}) {
			t.Fatalf("claim (item held: %v) = %+v, %v", held, long, err)
		}
		short, err := claim(`{"cookies":{},"user_agent":"u"}`, `{"site":"s","fresh":false}`)
		if err != nil || short.Payload.UserAgent != "u" || len(short.Payload.Cookies) != 0 || short.Tags != (cookieTags{"s", false}) || short.ID != `i-{"site":"s","fresh":false}` {
			t.Fatalf("claim after a longer one (item held: %v) = %+v, %v", held, short, err)
		}
		if long.Payload.UserAgent != "a long user agent" {
			t.Fatalf("the first claim's item changed to %+v", long)
		}
		if held {
			claimItem.Unlock()
		}
	}
	h.Reply(abi.OpPoolClaim, abi.PoolClaimReply{Found: true, Token: "tok"})
	if it, err := Pool(testPool).Claim(time.Second); it != nil || !errors.Is(err, ErrInternal) || !strings.Contains(err.Error(), "found without an item") {
		t.Fatalf("Claim of a reply without an item = %+v, %v; want ErrInternal", it, err)
	}
}

// TestRateLimitedWait: a RateLimited reply to http is ErrRateLimited with the host's
// wait, which RateLimitedWait hands to Retry; any other error is not rate limited.
func TestRateLimitedWait(t *testing.T) {
	h := wirefake.New(t)
	h.On(abi.OpHTTP, func(json.RawMessage) (any, *abi.Error) {
		return nil, &abi.Error{Kind: abi.RateLimited, Message: "example.com:443: rate limited", WaitMs: 1500}
	})
	_, err := Get("https://example.com/", nil)
	if !errors.Is(err, ErrRateLimited) {
		t.Fatalf("Get() = %v, want ErrRateLimited", err)
	}
	if w, ok := RateLimitedWait(err); !ok || w != 1500*time.Millisecond {
		t.Errorf("RateLimitedWait(%v) = %v, %v, want 1.5s, true", err, w, ok)
	}
	if w, ok := RateLimitedWait(ErrUnavailable); ok || w != 0 {
		t.Errorf("RateLimitedWait(ErrUnavailable) = %v, %v, want 0, false", w, ok)
	}
}

// TestHealthWire: the health calls and fields as the SDK writes and reads them.
func TestHealthWire(t *testing.T) {
	h := wirefake.New(t)
	h.Reply(abi.OpPoolPut, abi.PoolPutReply{ID: "i1"})
	h.Reply(abi.OpPoolClaim, abi.PoolClaimReply{Found: true, Token: "tok", Item: &abi.PoolItem{
		ID: "i1", Payload: json.RawMessage(`{"cookies":{},"user_agent":""}`), Tags: json.RawMessage(`{"site":"x","fresh":true}`), Score: 2, Uses: 3, MaxUses: 50, MaxErrorScore: 4,
	}})
	h.Reply(abi.OpPoolMarkGood, abi.Empty{})
	h.Reply(abi.OpPoolMarkBad, abi.Empty{})
	if _, err := Pool(testPool).WithHealth(Health{MaxUses: 50, MaxErrorScore: 4}).Put(cookie{}, cookieTags{Site: "x"}, 0); err != nil {
		t.Fatal(err)
	}
	if put := wirefake.Requests[abi.PoolPutRequest](h, abi.OpPoolPut); len(put) != 1 || put[0].MaxUses != 50 || put[0].MaxErrorScore != 4 {
		t.Errorf("put requests = %+v, want max_uses 50, max_error_score 4", put)
	}
	item, err := Pool(testPool).Claim(time.Second)
	if err != nil || item == nil {
		t.Fatalf("Claim = %v, %v", item, err)
	}
	if item.Score != 2 || item.Uses != 3 || item.MaxUses != 50 || item.MaxErrorScore != 4 {
		t.Errorf("Claim's health = %d %d %d %d, want 2 3 50 4", item.Score, item.Uses, item.MaxUses, item.MaxErrorScore)
	}
	if err := item.MarkGood(); err != nil {
		t.Fatal(err)
	}
	if err := item.Penalize("stale", 2); err != nil {
		t.Fatal(err)
	}
	if err := item.Penalize("stale", 0); !errors.Is(err, ErrValueError) {
		t.Errorf("Penalize(0) = %v, want ErrValueError: a weight of 0 would evict", err)
	}
	if good := wirefake.Requests[abi.PoolMarkGoodRequest](h, abi.OpPoolMarkGood); len(good) != 1 || good[0] != (abi.PoolMarkGoodRequest{Pool: "cookies", ID: "i1"}) {
		t.Errorf("mark_good requests = %+v", good)
	}
	if bad := wirefake.Requests[abi.PoolMarkBadRequest](h, abi.OpPoolMarkBad); len(bad) != 1 || bad[0] != (abi.PoolMarkBadRequest{Pool: "cookies", ID: "i1", Reason: "stale", Weight: 2}) {
		t.Errorf("mark_bad requests = %+v, want one of weight 2 (Penalize(0) sends nothing)", bad)
	}
}
