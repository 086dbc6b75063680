package host_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
)

// asPlugin builds the AssemblyScript plugin testdata/assemblyscript/<name>.ts (Extism's
// PDK) and copies it into dir as <file>.wasm.
func asPlugin(t *testing.T, name, dir, file string) string {
	t.Helper()
	return copyPlugin(t, testutil.BuildAS(t, name), dir, file)
}

// TestExtismWorker: the AssemblyScript worker, over the Extism transport, and the Go
// counter, natively, share one backend (memory, then Redis): each of 40 tasks has the
// worker claim and release a pool item, write and read back KV, count, and submit a task
// that the Go counter handles. Every task of both is done, the counters end exact, the
// KV holds what the worker wrote, and the pool holds its items again, none leased.
func TestExtismWorker(t *testing.T) {
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			r := newRig(t)
			if backend == "redis" {
				r = newRedisRig(t)
			}
			const n = 40
			r.cfg.Slots = 2
			r.grant("as-worker", host.Grant{
				Queues: map[string][]string{"as-jobs": {"consume"}, "count": {"submit"}},
				Pools:  map[string][]string{"as-pool": {"claim", "mark_bad"}},
			})
			r.grant("counter", consumer("count"))
			asPlugin(t, "worker", r.dir, "as-worker")
			goPlugin(t, "plugins/examples/counter", r.dir, "counter")
			ctx := context.Background()
			for i := range 3 {
				if _, err := r.backend.PoolPut(ctx, "as-pool", []byte(`{"i":`+string(rune('0'+i))+`}`), nil, 0, primitives.PoolPutOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			h, stop := r.start()
			ids := map[string]bool{}
			for i := range n {
				id, err := h.Submit(ctx, "as-jobs", []byte(`{"n":`+itoa(i)+`}`))
				if err != nil {
					t.Fatal(err)
				}
				ids[id] = true
			}
			waitFor(t, "the Go counter at 40", func() bool { return testutil.Counter(t, r.backend, "counter:done") >= n })
			stop()
			if got := testutil.Counter(t, r.backend, "as-worker:done"); got != n {
				t.Errorf("as-worker:done = %d, want %d", got, n)
			}
			if got := testutil.Counter(t, r.backend, "counter:done"); got != n {
				t.Errorf("counter:done = %d, want %d", got, n)
			}
			if got := r.events.Outcomes(""); got["done"] != 2*n || len(got) != 1 {
				t.Errorf("outcomes = %v, want %d done", got, 2*n)
			}
			for _, q := range []string{"as-jobs", "count"} {
				if s := testutil.QueueStats(t, r.backend, q); s != (primitives.QueueStats{}) {
					t.Errorf("queue %s stats = %+v, want every task acked", q, s)
				}
			}
			for id := range ids {
				if v, ok, err := r.backend.KVGet(ctx, "as-worker:seen", id); err != nil || !ok || len(v) == 0 {
					t.Errorf("KV as-worker:seen/%s = %q, %v, %v; want the task's n", id, v, ok, err)
				}
			}
			if s, err := r.backend.PoolStats(ctx, "as-pool"); err != nil || s.Size != 3 || s.Leased != 0 {
				t.Errorf("pool stats = %+v, %v; want 3 items, none leased", s, err)
			}
			// Each task claimed once, penalised by 2 and credited by 1 over Extism.
			items, err := r.backend.PoolList(ctx, "as-pool", nil, 10)
			uses, score := 0, 0
			for _, it := range items {
				uses, score = uses+it.Uses, score+it.Score
			}
			if err != nil || uses != n || score != n {
				t.Errorf("as-pool items' uses and scores add up to %d and %d (%v), want %d each", uses, score, err, n)
			}
		})
	}
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}

// TestExtismSDKModulesRefused: every module in the Extism Go SDK's wasm/ folder (its own
// test plugins: Rust, C, Go, Haskell, AssemblyScript) is refused at load with a message
// and no trap: those that import Extism's kernel as Extism modules that are not fleet
// plugins, naming the missing export; the two that do not (noop, an instrumented C
// module) by the native transport, as the WASI commands they are.
func TestExtismSDKModulesRefused(t *testing.T) {
	dir := filepath.Join(testutil.GoModCache(t), "github.com", "extism", "go-sdk@v1.7.1", "wasm")
	files, err := filepath.Glob(filepath.Join(dir, "*.wasm"))
	if err != nil || len(files) < 20 {
		t.Fatalf("the SDK's wasm/ folder %s holds %d modules (%v); want its test plugins (go mod download github.com/extism/go-sdk@v1.7.1)", dir, len(files), err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := newRig(t)
			copyPlugin(t, f, r.dir, "plugin")
			r.cfg.PluginsDir = r.dir
			h, err := newHost(r.cfg)
			if err == nil {
				h.Close()
				t.Fatal("host.New loaded it")
			}
			b, _ := os.ReadFile(f)
			want := []string{"plugin.wasm", "an Extism module but not a fleet plugin", "does not export fleet_describe"}
			if !strings.Contains(string(b), "extism:host/env") {
				want = []string{"plugin.wasm", "native: built as a command, not a reactor"}
			}
			wantRefusal(t, err, want...)
			if strings.Contains(err.Error(), "wasm error") {
				t.Errorf("the refusal is a trap: %v", err)
			}
		})
	}
}

// TestExtismLoop: a loop plugin over Extism (a hand-written one, on the kernel's
// functions alone) ticks through fleet_tick.
func TestExtismLoop(t *testing.T) {
	r := newRig(t)
	r.wat("extismdone", "looper", abi.Describe{ABIVersion: abi.Version, Type: "looper", Version: "1.0.0", Mode: abi.ModeLoop})
	_, stop := r.start()
	waitFor(t, "5 ticks", func() bool { return len(r.events.Finished("")) >= 5 })
	stop()
	if got := r.events.Outcomes(""); got["done"] < 5 || len(got) != 1 {
		t.Errorf("outcomes = %v, want only done ticks", got)
	}
}
