package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
	fleetredis "github.com/fleethost/fleet/primitives/redis"
)

// stateRig is a daemon (worker plugin, a token) on a Redis that the test also writes to
// through the backend, as plugins of the fleet would: the state the operator reads back.
type stateRig struct {
	d *daemon
	b primitives.Backend
}

func newStateRig(t *testing.T) *stateRig {
	t.Helper()
	srv := testutil.NewRedis(t)
	b, err := fleetredis.Open(srv.URL(), fleetredis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	d := startDaemon(t, []string{"FLEET_TOKEN=" + token}, "--plugins", pluginsDir(t, workerPkg), "--redis", srv.URL())
	return &stateRig{d: d, b: b}
}

// runOK runs fleet-host with args and env and returns its stdout, failing the test
// unless it exits 0.
func runOK(t *testing.T, env []string, args ...string) string {
	t.Helper()
	code, out, errOut := run(t, env, "", args...)
	if code != 0 {
		t.Fatalf("fleet-host %s = exit %d, %s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// The operator reads what plugins share, whatever any plugin is granted (the worker is
// granted no KV, counter, pool or lock of these), behind the token.
func TestAPIOperatorReads(t *testing.T) {
	r := newStateRig(t)
	ctx := t.Context()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(r.b.KVSet(ctx, "scraper:state", "cursor", []byte(`{"page": 3}`), 0, primitives.KVQuota{}))
	must(r.b.KVSet(ctx, "scraper:state", "raw", []byte(`not json`), 0, primitives.KVQuota{}))
	_, err := r.b.CounterIncr(ctx, "scraper:pages", 41, primitives.NameQuota{})
	must(err)
	_, err = r.b.PoolPut(ctx, "cookies", []byte(`{"c": 1}`), primitives.Tags{"site": `"a"`}, time.Hour, primitives.PoolPutOptions{})
	must(err)
	scored, err := r.b.PoolPut(ctx, "cookies", []byte(`{"c": 2}`), primitives.Tags{"site": `"b"`, "fresh": `true`}, 0,
		primitives.PoolPutOptions{Health: primitives.PoolHealth{MaxUses: 50, MaxErrorScore: 3}})

	must(err)
	must(r.b.PoolMarkBad(ctx, "cookies", scored, "stale", 2))
	claimed, ok, err := r.b.PoolClaim(primitives.WithHolder(ctx, "scraper/1"), "cookies", primitives.Tags{"site": `"a"`}, time.Hour)
	must(err)
	if !ok {
		t.Fatal("PoolClaim found nothing")
	}
	lock, ok, err := r.b.LockAcquire(ctx, "harvest:site-a", time.Hour, 0, primitives.NameQuota{Owner: "harvester", Max: 10})
	must(err)
	if !ok {
		t.Fatal("LockAcquire = not acquired")
	}

	var kv struct {
		Namespace, Key string
		Value          json.RawMessage
	}
	r.d.getJSON("/api/v1/kv/scraper:state/cursor", token, &kv)
	if kv.Namespace != "scraper:state" || kv.Key != "cursor" || string(kv.Value) != `{"page":3}` {
		t.Errorf("GET kv = %+v %s, want the JSON value", kv, kv.Value)
	}
	r.d.getJSON("/api/v1/kv/scraper:state/raw", token, &kv)
	if string(kv.Value) != `"not json"` {
		t.Errorf("GET kv (not JSON) value = %s, want it as a JSON string", kv.Value)
	}
	if status, b := r.d.request(http.MethodGet, "/api/v1/kv/scraper:state/absent", token, nil); status != http.StatusNotFound || !strings.Contains(string(b), `"NotFound"`) {
		t.Errorf("GET kv (absent) = %d %s, want 404 NotFound", status, b)
	}

	var c struct {
		Counter string
		Value   int64
	}
	r.d.getJSON("/api/v1/counters/scraper:pages", token, &c)
	if c.Counter != "scraper:pages" || c.Value != 41 {
		t.Errorf("GET counter = %+v, want 41", c)
	}
	r.d.getJSON("/api/v1/counters/never-touched", token, &c)
	if c.Value != 0 {
		t.Errorf("GET counter (never touched) = %+v, want 0", c)
	}

	type item struct {
		ID        string
		Payload   json.RawMessage
		Tags      map[string]json.RawMessage
		ExpiresAt *time.Time `json:"expires_at"`
		Lease     *struct {
			Holder string
			Until  time.Time
		}
		Score, Uses   int
		MaxUses       int `json:"max_uses"`
		MaxErrorScore int `json:"max_error_score"`
	}
	type page struct {
		Pool  string
		Items []item
		More  bool
	}
	var items page
	r.d.getJSON("/api/v1/pools/cookies/items", token, &items)
	if len(items.Items) != 2 || items.More {
		t.Fatalf("GET pool items = %+v, want both items and no more", items)
	}
	for _, it := range items.Items {
		if it.ID == claimed.ID {
			if it.Lease == nil || it.Lease.Holder != "scraper/1" || it.Lease.Until.Before(time.Now().Add(50*time.Minute)) {
				t.Errorf("leased item %+v: want a lease held by scraper/1 for about an hour", it)
			}
			if it.ExpiresAt == nil || string(it.Tags["site"]) != `"a"` || string(it.Payload) != `{"c":1}` || it.Uses != 1 || it.Score != 0 {
				t.Errorf("leased item %+v: want its TTL, tag, payload, and one use", it)
			}
		} else if it.Lease != nil || it.ExpiresAt != nil || string(it.Tags["fresh"]) != "true" || it.Score != 2 || it.MaxErrorScore != 3 || it.MaxUses != 50 {
			t.Errorf("free item %+v: want no lease, no TTL, tag fresh true, score 2 of 3, 50 uses", it)
		}
	}
	// A filter's value is JSON when it parses as a scalar, else a string.
	for _, q := range []string{"where=site=b", `where=site="b"`, "where=fresh=true&where=site=b"} {
		items = page{}
		r.d.getJSON("/api/v1/pools/cookies/items?"+q, token, &items)
		if len(items.Items) != 1 || string(items.Items[0].Payload) != `{"c":2}` {
			t.Errorf("GET pool items?%s = %+v, want the one item of site b", q, items.Items)
		}
	}
	items = page{}
	r.d.getJSON("/api/v1/pools/cookies/items?where=fresh=%22true%22", token, &items)
	if len(items.Items) != 0 {
		t.Errorf(`GET pool items?where=fresh="true" = %+v, want none (the tag is the boolean)`, items.Items)
	}
	items = page{}
	r.d.getJSON("/api/v1/pools/cookies/items?limit=1", token, &items)
	if len(items.Items) != 1 || !items.More {
		t.Errorf("GET pool items?limit=1 = %+v, want one item and more", items)
	}
	for _, q := range []string{"limit=0", "limit=1001", "where=site"} {
		if status, b := r.d.request(http.MethodGet, "/api/v1/pools/cookies/items?"+q, token, nil); status != http.StatusBadRequest {
			t.Errorf("GET pool items?%s = %d %s, want 400", q, status, b)
		}
	}

	var l struct {
		Lock  string
		Held  bool
		Owner string
		Fence int64
		Until *time.Time
	}
	r.d.getJSON("/api/v1/locks/harvest:site-a", token, &l)
	if !l.Held || l.Owner != "harvester" || l.Fence != lock.Fence || l.Until == nil || l.Until.Before(time.Now().Add(50*time.Minute)) {
		t.Errorf("GET lock = %+v, want held by harvester with fence %d for about an hour", l, lock.Fence)
	}
	if strings.Contains(string(mustGet(t, r.d, "/api/v1/locks/harvest:site-a")), lock.Token) {
		t.Error("GET lock shows the holder's token")
	}
	l.Held = true
	r.d.getJSON("/api/v1/locks/harvest:free", token, &l)
	if l.Held {
		t.Errorf("GET lock (free) = %+v, want not held", l)
	}

	// Every read needs the token; a bad name is 400.
	for _, path := range []string{"/api/v1/kv/scraper:state/cursor", "/api/v1/counters/scraper:pages", "/api/v1/pools/cookies/items", "/api/v1/locks/harvest:site-a"} {
		if status, _ := r.d.request(http.MethodGet, path, "", nil); status != http.StatusUnauthorized {
			t.Errorf("GET %s without the token = %d, want 401", path, status)
		}
	}
	if status, b := r.d.request(http.MethodGet, "/api/v1/counters/a%7Bb%7D", token, nil); status != http.StatusBadRequest {
		t.Errorf("GET counter with braces = %d %s, want 400", status, b)
	}
}

// mustGet GETs path with the token and returns a 200's body.
func mustGet(t *testing.T, d *daemon, path string) []byte {
	t.Helper()
	status, b := d.request(http.MethodGet, path, token, nil)
	if status != http.StatusOK {
		t.Fatalf("GET %s = %d %s, want 200", path, status, b)
	}
	return b
}

// The operator's commands: each act through the API with the token, a line or a table,
// or the API's answer with --json; flags after the arguments; --api without a scheme.
func TestOperatorCommands(t *testing.T) {
	r := newStateRig(t)
	ctx := t.Context()
	addr := strings.TrimPrefix(r.d.api, "http://")
	env := []string{"FLEET_API=" + addr, "FLEET_TOKEN=" + token}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	ok := func(args ...string) string { t.Helper(); return runOK(t, env, args...) }
	must(r.b.KVSet(ctx, "scraper:state", "cursor", []byte(`{"page":3}`), 0, primitives.KVQuota{}))
	_, err := r.b.CounterIncr(ctx, "scraper:pages", 41, primitives.NameQuota{})
	must(err)
	_, err = r.b.PoolPut(ctx, "cookies", []byte(`{"c":1}`), primitives.Tags{"site": `"a"`}, 0, primitives.PoolPutOptions{})
	must(err)
	_, err = r.b.PoolPut(ctx, "cookies", []byte(`{"c":2}`), primitives.Tags{"site": `"b"`}, 0, primitives.PoolPutOptions{})
	must(err)
	_, _, err = r.b.PoolClaim(primitives.WithHolder(ctx, "scraper/1"), "cookies", primitives.Tags{"site": `"a"`}, time.Hour)
	must(err)
	lock, _, err := r.b.LockAcquire(ctx, "harvest:site-a", time.Hour, 0, primitives.NameQuota{Owner: "harvester", Max: 10})
	must(err)

	if out := ok("kv", "get", "scraper:state", "cursor"); out != "{\"page\":3}\n" {
		t.Errorf("kv get = %q, want the value", out)
	}
	// Flags after the arguments, and --api as host:port.
	code, out, errOut := run(t, nil, "", "kv", "get", "scraper:state", "cursor", "--json", "--api", addr, "--token", token)
	if code != 0 || !strings.Contains(out, `"namespace": "scraper:state"`) {
		t.Errorf("kv get ... --json --api %s = exit %d, %s%s; want the entry as JSON", addr, code, out, errOut)
	}
	if code, _, errOut := run(t, env, "", "kv", "get", "scraper:state", "absent"); code != 1 || !strings.Contains(errOut, "404") {
		t.Errorf("kv get of an absent key = exit %d, %q; want 1 and a 404", code, errOut)
	}
	if out := ok("counter", "get", "scraper:pages"); out != "41\n" {
		t.Errorf("counter get = %q, want 41", out)
	}
	if out := ok("pool", "items", "cookies", "--where", "site=a"); !strings.Contains(out, "scraper/1") || strings.Contains(out, `{"c":2}`) {
		t.Errorf("pool items --where site=a = %q, want the item of site a leased by scraper/1", out)
	}
	var items struct {
		Items []struct {
			Lease *struct{ Holder string }
		}
	}
	if err := json.Unmarshal([]byte(ok("pool", "items", "cookies", "--json")), &items); err != nil || len(items.Items) != 2 {
		t.Errorf("pool items --json = %+v, %v; want both items", items, err)
	}
	want := fmt.Sprintf("lock harvest:site-a is held by harvester, fence %d, until", lock.Fence)
	if out := ok("lock", "show", "harvest:site-a"); !strings.HasPrefix(out, want) {
		t.Errorf("lock show = %q, want it to start %q", out, want)
	}
	if out := ok("lock", "show", "harvest:free"); out != "lock harvest:free is free\n" {
		t.Errorf("lock show (free) = %q", out)
	}

	// Paused, the worker claims nothing: tasks parked meanwhile stay for the operator.
	if out := ok("pause", "worker"); out != "paused worker (fleet)\n" {
		t.Errorf("pause worker = %q", out)
	}
	testutil.WaitFor(t, 30*time.Second, "the worker's slot paused", func() bool {
		var a struct {
			SlotStates []struct{ State string } `json:"slot_states"`
		}
		r.d.getJSON("/api/v1/automations/worker", token, &a)
		return len(a.SlotStates) == 1 && a.SlotStates[0].State == "paused"
	})
	for range 3 {
		_, _, err := r.b.QueuePush(ctx, "work", []byte(`{"n": 1}`), primitives.QueuePushOptions{})
		must(err)
		l, claimed, err := r.b.QueueClaim(ctx, "work", time.Minute, 0)
		must(err)
		if !claimed {
			t.Fatal("QueueClaim found nothing: the paused worker claimed the task")
		}
		_, err = r.b.QueueRelease(ctx, "work", l.ID, l.Token, primitives.Retry{Reason: "broke", MaxAttempts: 1})
		must(err)
	}
	var parked struct {
		Queue string
		Tasks []struct {
			LastError string `json:"last_error"`
		}
	}
	if err := json.Unmarshal([]byte(ok("tasks", "parked", "work", "--json")), &parked); err != nil || len(parked.Tasks) != 3 || parked.Tasks[0].LastError != "broke" {
		t.Errorf("tasks parked work --json = %+v, %v; want the 3 parked with their error", parked, err)
	}
	if out := ok("tasks", "parked", "work"); strings.Count(out, "broke") != 3 {
		t.Errorf("tasks parked work = %q, want 3 rows", out)
	}
	if out := ok("tasks", "requeue", "work", "--all"); out != "requeued 3 parked tasks of queue work\n" {
		t.Errorf("tasks requeue work --all = %q", out)
	}
	var q queueStats
	r.d.getJSON("/api/v1/queues/work", token, &q)
	if q.Parked != 0 || q.Depth != 3 {
		t.Errorf("queue after requeue --all = %+v, want 3 waiting, none parked", q)
	}
	if out := ok("resume", "worker", "--json"); !strings.Contains(out, `"paused": false`) {
		t.Errorf("resume worker --json = %q", out)
	}

	if code, out, errOut := run(t, nil, "", "submit", "worker", `{"n": 1}`, "--api", addr, "--token", token); code != 0 || len(strings.TrimSpace(out)) == 0 {
		t.Errorf("submit TYPE JSON --api --token = exit %d, %q %q; want a task id (flags after the arguments)", code, out, errOut)
	}

	// No daemon: the error names the flag and the variable.
	code, _, errOut = run(t, nil, "", "counter", "get", "x", "--api", "127.0.0.1:1")
	if code != 1 || !strings.Contains(errOut, "connection refused") || !strings.Contains(errOut, "--api") || !strings.Contains(errOut, "FLEET_API") {
		t.Errorf("counter get against no daemon = exit %d, %q; want 1 naming --api and FLEET_API", code, errOut)
	}
	if code, _, errOut := run(t, env, "", "counter", "get", "x"); code != 0 {
		t.Errorf("counter get x = exit %d, %s", code, errOut)
	}
}
