package tests

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/api"
	"github.com/fleethost/fleet/primitives"
)

// quotaFlood is a sandbox with the quota guest (tests/testdata/quota) installed under grant g,
// beside the honest plugin, configured with config (its mode, ...), and granted the pool
// and queue it declares. The flood starts
// when the sandbox does, unless config says "wait": then at go.
func quotaFlood(t *testing.T, kind string, config map[string]any, g host.Grant) *sandbox {
	t.Helper()
	r := newSandbox(t, kind)
	installPlugin(t, "tests/testdata/quota", r.dir, "quota")
	cfg, _ := json.Marshal(config)
	r.cfg.Configs = map[string]json.RawMessage{"quota": cfg}
	g.Pools = map[string][]string{"quota-items": {"put"}}
	g.Queues = map[string][]string{"quota-jobs": {"submit"}}
	r.grants["quota"] = g
	if config["wait"] == nil {
		r.quotaGo(t)
	}
	return r
}

// quotaGo lets the flood write.
func (r *sandbox) quotaGo(t *testing.T) {
	t.Helper()
	if _, err := r.b.CounterIncr(context.Background(), "quota:go", 1, primitives.NameQuota{}); err != nil {
		t.Fatal(err)
	}
}

// counters reads the flood's counts: writes accepted, refused LimitExceeded, failed
// otherwise.
func (r *sandbox) counters(t *testing.T) (ok, limited, other int64) {
	t.Helper()
	ctx := context.Background()
	ok, _ = r.b.CounterGet(ctx, "quota:ok")
	limited, _ = r.b.CounterGet(ctx, "quota:limited")
	other, _ = r.b.CounterGet(ctx, "quota:other")
	return ok, limited, other
}

// quotaHeld waits until the flood has been refused at least refusals times and has
// exactly want writes accepted, then checks that the honest plugin completes its tasks
// beside it while the flood goes on, and that the refusals held meanwhile: still want
// accepted, none failing otherwise.
func (r *sandbox) quotaHeld(t *testing.T, what string, want, refusals int64) {
	t.Helper()
	waitFor(t, what, func() bool {
		ok, limited, _ := r.counters(t)
		return ok == want && limited >= refusals
	})
	r.honestCompletes(t, 50)
	ok, limited, other := r.counters(t)
	t.Logf("flood: %d writes accepted, %d refused LimitExceeded", ok, limited)
	if ok != want || other != 0 {
		t.Errorf("flood: %d accepted, %d failed otherwise; want %d accepted and no other failure", ok, other, want)
	}
}

// A plugin that kv_sets distinct keys in a loop is held by its default kv_max_keys of
// 10,000: exactly that many are accepted, the rest are LimitExceeded.
func TestSandboxKVKeysQuota(t *testing.T) {
	for _, kind := range backendKinds {
		t.Run(kind, func(t *testing.T) {
			r := quotaFlood(t, kind, map[string]any{"mode": "kv", "value_bytes": 1}, host.Grant{})
			r.start(t)
			r.quotaHeld(t, "the kv flood is refused past its default 10,000 keys", 10_000, 1)
		})
	}
}

// A plugin that creates distinct counter names in a loop (each kept for good by the
// backend), or takes distinct locks and holds them, is held by its default
// counter_max_names, or lock_max_names, of 10,000: exactly that many are created or
// held, the rest are LimitExceeded. The flood's own tally counters are created by the test, not
// by the plugin, so that they count against no quota.
func TestSandboxNamesQuota(t *testing.T) {
	for _, mode := range []string{"counter", "lock"} {
		for _, kind := range backendKinds {
			t.Run(mode+"/"+kind, func(t *testing.T) {
				r := quotaFlood(t, kind, map[string]any{"mode": mode, "wait": true}, host.Grant{})
				for _, name := range []string{"quota:ok", "quota:limited", "quota:other"} {
					if _, err := r.b.CounterIncr(context.Background(), name, 0, primitives.NameQuota{}); err != nil {
						t.Fatal(err)
					}
				}
				r.start(t)
				r.quotaGo(t)
				r.quotaHeld(t, "the "+mode+" flood is refused past its default 10,000 names", 10_000, 1)
			})
		}
	}
}

// A plugin that kv_sets distinct 200 KB keys in a loop (the issue's +877 MiB) is held by
// its kv_max_bytes: exactly the keys that fit are accepted, so the backend holds at most
// the quota, whatever the flood tries. The host's live heap growth is logged beside
// what the flood tried; it includes the flood's two instances, each of which may grow
// to its 16 MiB memory limit building its strings, so it is a figure, not a bound.
func TestSandboxKVBytesQuota(t *testing.T) {
	const quota, value, refusals = 16 << 20, 200_000, 100
	for _, kind := range backendKinds {
		t.Run(kind, func(t *testing.T) {
			r := quotaFlood(t, kind, map[string]any{"mode": "kv", "value_bytes": value, "writes": 50, "wait": true}, host.Grant{KVMaxBytes: quota})
			r.start(t)
			before := liveHeap()
			r.quotaGo(t)
			// A key costs its namespace, its 24-byte key and its value's JSON (2 quotes).
			cost := primitives.KVCost("quota:data", "0123456789abcdef01234567", make([]byte, value+2))
			r.quotaHeld(t, "the kv flood is refused past 16 MiB", quota/cost, refusals)
			growth := liveHeap() - before
			ok, limited, _ := r.counters(t)
			t.Logf("heap: %+d MiB with %d MB held of %d MB tried (%s backend)", growth>>20, ok*cost/1e6, (ok+limited)*value/1e6, kind)
		})
	}
}

// liveHeap is the bytes of the heap live after a collection.
func liveHeap() int64 {
	var m runtime.MemStats
	runtime.GC() // twice: what sync.Pools hold survives one collection
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// A plugin that submits in a loop to a queue nobody consumes (the 100,000
// submits all accepted) is held by its max_queue_depth: the queue holds exactly that.
func TestSandboxSubmitDepth(t *testing.T) {
	for _, kind := range backendKinds {
		t.Run(kind, func(t *testing.T) {
			const depth = 300
			r := quotaFlood(t, kind, map[string]any{"mode": "submit"}, host.Grant{MaxQueueDepth: depth, SubmitRate: 1_000_000})
			r.start(t)
			r.quotaHeld(t, "the submit flood is refused at the queue's depth cap", depth, 1)
			if st, err := r.b.QueueStats(context.Background(), "quota-jobs"); err != nil || st.Depth != depth {
				t.Errorf("QueueStats(flood-jobs) = %+v, %v; want a depth of %d", st, err, depth)
			}
		})
	}
}

// The same flood under its submit_rate: a host admits a burst of one second's worth and
// then the rate, whatever the guest tries.
func TestSandboxSubmitRate(t *testing.T) {
	const rate = 5
	r := quotaFlood(t, "memory", map[string]any{"mode": "submit"}, host.Grant{SubmitRate: rate})
	start := time.Now()
	r.start(t)
	waitFor(t, "the submit flood is refused past its rate", func() bool {
		_, limited, _ := r.counters(t)
		return limited >= 1000
	})
	r.honestCompletes(t, 50)
	ok, limited, other := r.counters(t)
	bound := int64(rate + rate*time.Since(start).Seconds() + 1)
	t.Logf("flood: %d submits accepted, %d refused, in %v", ok, limited, time.Since(start).Round(time.Millisecond))
	if ok > bound || other != 0 {
		t.Errorf("flood: %d submits accepted (bound %d at %d/s), %d failed otherwise", ok, bound, rate, other)
	}
}

// A plugin that pool_puts in a loop is held by its max_pool_items.
func TestSandboxPoolItems(t *testing.T) {
	for _, kind := range backendKinds {
		t.Run(kind, func(t *testing.T) {
			const items = 300
			r := quotaFlood(t, kind, map[string]any{"mode": "pool"}, host.Grant{MaxPoolItems: items})
			r.start(t)
			r.quotaHeld(t, "the pool flood is refused at its item cap", items, 1)
			if n, err := r.b.PoolSize(context.Background(), "quota-items"); err != nil || n != items {
				t.Errorf("PoolSize(flood-items) = %d, %v; want %d", n, err, items)
			}
		})
	}
}

// A plugin that pool_puts 50 KB items in a loop is held by its max_pool_bytes: exactly
// the items that fit are accepted.
func TestSandboxPoolBytes(t *testing.T) {
	const quota, value = 1 << 20, 50_000
	for _, kind := range backendKinds {
		t.Run(kind, func(t *testing.T) {
			r := quotaFlood(t, kind, map[string]any{"mode": "pool", "value_bytes": value, "writes": 30}, host.Grant{MaxPoolBytes: quota})
			r.start(t)
			// An item costs its payload {"v":"<24 hex><value>"} and its tag site="x".
			cost := primitives.PoolCost(make([]byte, len(`{"v":""}`)+24+value), primitives.Tags{"site": `"x"`})
			r.quotaHeld(t, "the pool flood is refused past 1 MiB", quota/cost, 1)
		})
	}
}

// The HTTP API's submit respects the queue's depth cap, the max_queue_depth of the
// plugin that consumes it: past it, 429 with Retry-After and a LimitExceeded body that
// names the field, and the queue keeps its depth.
func TestSandboxAPISubmitQueueFull(t *testing.T) {
	const depth = 3
	r := newSandbox(t, "memory")
	r.cfg.SlotsByType = map[string]int{"counter": 0} // nothing consumes: the queue fills
	g := r.grants["counter"]
	g.MaxQueueDepth = depth
	r.grants["counter"] = g
	r.start(t)
	srv := httptest.NewServer(api.New(api.Params{Host: r.h, Backend: r.b, Log: testLogger(t)}))
	t.Cleanup(srv.Close)
	for i := range depth + 1 {
		resp, err := http.Post(srv.URL+"/api/v1/automations/counter/tasks", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := http.StatusAccepted
		if i == depth {
			want = http.StatusTooManyRequests
		}
		if resp.StatusCode != want {
			t.Fatalf("submit #%d = %d %s, want %d", i+1, resp.StatusCode, body, want)
		}
		if i == depth && (resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), `"LimitExceeded"`) ||
			!strings.Contains(string(body), `max_queue_depth of \"counter\"`)) {
			t.Errorf("submit past the cap = Retry-After %q, %s; want a Retry-After and LimitExceeded naming max_queue_depth",
				resp.Header.Get("Retry-After"), body)
		}
	}
	if st, _ := r.b.QueueStats(context.Background(), honestQueue); st.Depth != depth {
		t.Errorf("QueueStats(%s).Depth = %d, want %d", honestQueue, st.Depth, depth)
	}
}
