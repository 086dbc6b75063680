package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
)

// Hostile plugins that reach for what belongs to another: the honest counter's queue,
// another's pool, the fleet's record of a contract, another type's names. Each runs
// beside the honest counter plugin, which must keep completing its tasks.

// watGuest is a WAT guest described by d (testutil.GuestWAT) whose fleet_handle, and
// fleet_tick for a loop plugin, runs handle, which may use imports and the functions and
// data of funcs, and then answers done.
func watGuest(t *testing.T, d abi.Describe, imports, funcs, handle string) string {
	t.Helper()
	return testutil.WAT(t, testutil.GuestWAT{Describe: d, Result: `{"outcome":"done"}`, Imports: imports, Funcs: funcs, Handle: handle}.Source(t))
}

// watString escapes s for a WAT string literal.
func watString(s string) string { return strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) }

// folderOf is a fresh plugins folder holding the plugin at wasm as <name>.wasm.
func folderOf(t *testing.T, wasm, name string) string {
	t.Helper()
	dir := t.TempDir()
	b, err := os.ReadFile(wasm)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".wasm"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// refusedBeside loads the plugin at wasm in a host of its own on the sandbox's backend, as
// another host of the fleet would, with grants; it wants New to refuse it, naming every
// part of want, and returns the error.
func refusedBeside(t *testing.T, r *sandbox, wasm, name string, grants map[string]host.Grant, want ...string) error {
	t.Helper()
	cfg := r.cfg
	cfg.PluginsDir, cfg.Grants = folderOf(t, wasm, name), grants
	h, err := host.New(context.Background(), cfg)
	if err == nil {
		h.Close()
		t.Fatalf("host.New started %s, which asks for what it is not granted", name)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("host.New = %v, want it to name %s", err, w)
		}
	}
	return err
}

// TestSandboxGrantsForeignQueue: a plugin that declares the counter's queue as its own
// (it would ack the counter's tasks) does not start: not granted, or granted only submit
// on it. Its host refuses it before recording anything, and the counter, beside it on the
// same backend, completes every one of its tasks itself.
func TestSandboxGrantsForeignQueue(t *testing.T) {
	for _, kind := range backendKinds {
		t.Run(kind, func(t *testing.T) {
			r := newSandbox(t, kind)
			thief := watGuest(t, abi.Describe{ABIVersion: abi.Version, Type: "thief", Version: "1.0.0", Mode: abi.ModeBatch,
				Consumes: &abi.QueueContract{Name: honestQueue, Payload: json.RawMessage(`{"type":"object"}`)}}, "", "", "")
			missing := `"queues": {"count": ["consume"]} (it consumes queue "count")`
			refusedBeside(t, r, thief, "thief", nil, `type "thief" is not granted what it declares`, missing)
			err := refusedBeside(t, r, thief, "thief", map[string]host.Grant{"thief": {Queues: map[string][]string{honestQueue: {"submit"}}}}, missing)
			t.Logf("refused: %v", err)
			if _, found, _ := r.b.KVGet(context.Background(), "fleet-contracts", "queue:"+honestQueue); found {
				t.Error("a refused plugin recorded the counter's contract")
			}
			r.start(t)
			r.honestCompletes(t, 50)
			// The counter's incr comes before its ack and its iteration's event: wait for
			// the events, then count them.
			waitFor(t, "the counter's 50 iterations", func() bool { return len(r.ev.Finished("counter")) >= 50 })
			if got := len(r.ev.Finished("counter")); got != 50 {
				t.Errorf("the counter finished %d tasks, want all 50", got)
			}
			if s := testutil.QueueStats(t, r.b, honestQueue); s != (primitives.QueueStats{}) {
				t.Errorf("queue %s = %+v, want every task acked", honestQueue, s)
			}
		})
	}
}

// TestSandboxGrantsPoolRoles: the hostile guest is granted put, and only put, on its pool,
// which holds another plugin's secret items. It can add items, but its list, claim (for
// 292 years), size, release and mark_bad are PermissionDenied naming the missing role, and
// none reaches the backend: the secrets stay unread, unleased and good. The counter
// completes its tasks beside it.
func TestSandboxGrantsPoolRoles(t *testing.T) {
	for _, kind := range backendKinds {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			r := newSandbox(t, kind)
			r.install(t, testutil.BuildPlugin(t, "tests/testdata/hostile"), "hostile")
			r.grants["hostile"] = host.Grant{
				Queues: map[string][]string{"hostile": {"consume"}, "hostile-sub": {"submit"}},
				Pools:  map[string][]string{"hostile-items": {"put"}},
			}
			var secrets []string
			for i := range 3 {
				id, err := r.b.PoolPut(ctx, "hostile-items", []byte(fmt.Sprintf(`{"v":"secret %d"}`, i)), primitives.Tags{"site": `"s"`}, 0, primitives.PoolPutOptions{})
				if err != nil {
					t.Fatal(err)
				}
				secrets = append(secrets, id)
			}
			r.start(t)
			pool := `"pool":"hostile-items"`
			cases := []struct{ name, req, want string }{
				{"pool_put/ok", `{` + pool + `,"payload":{"v":"mine"},"tags":{"site":"m"}}`, ""},
				{"pool_list/denied", `{` + pool + `}`, "list"},
				{"pool_size/denied", `{` + pool + `}`, "list"},
				{"pool_claim/denied", `{` + pool + `,"hold_ms":9223372036854}`, "claim"},
				{"pool_release/denied", `{` + pool + `,"id":"` + secrets[0] + `","token":"t"}`, "claim"},
				{"pool_mark_bad/denied", `{` + pool + `,"id":"` + secrets[1] + `","reason":"mine now"}`, "mark_bad"},
			}
			for _, c := range cases {
				payload, _ := json.Marshal(map[string]any{"case": c.name, "op": strings.SplitN(c.name, "/", 2)[0], "req": c.req})
				if _, err := r.h.Submit(ctx, "hostile", payload); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, "every hostile task handled", func() bool { return len(r.ev.Finished("hostile")) >= len(cases) })
			r.honestCompletes(t, 50)
			for _, c := range cases {
				v, ok, err := r.b.KVGet(ctx, "hostile:results", c.name)
				var got hostileRecord
				if err != nil || !ok || json.Unmarshal(v, &got) != nil {
					t.Errorf("%s: no record (%s, %v, %v)", c.name, v, ok, err)
					continue
				}
				switch {
				case c.want == "" && got.Kind != "":
					t.Errorf("%s = %s %s, want it admitted", c.name, got.Kind, got.Message)
				case c.want != "" && (got.Kind != abi.PermissionDenied || !strings.Contains(got.Message, "not granted "+c.want+` on pool "hostile-items"`)):
					t.Errorf("%s = %s %q, want PermissionDenied naming the role %s", c.name, got.Kind, got.Message, c.want)
				}
			}
			// The secrets are untouched: each is still there, good and free to claim.
			if n, err := r.b.PoolSize(ctx, "hostile-items"); err != nil || n != 4 {
				t.Errorf("pool size = %d, %v; want the 3 secrets and the hostile's own item", n, err)
			}
			for range secrets {
				if _, ok, err := r.b.PoolClaim(ctx, "hostile-items", primitives.Tags{"site": `"s"`}, 1e9); err != nil || !ok {
					t.Errorf("a secret item could not be claimed (%v, %v): the hostile guest leased or marked it", ok, err)
				}
			}
		})
	}
}

// TestSandboxGrantsContractFirst: on Redis, a plugin that only submits to the counter's
// queue, with a schema of its own, starts first: it checks the queue's contract but never
// writes it, so that the counter, the queue's consumer, still starts, fleet-wide, and
// records its own. A plugin that declares the queue as its own and is not granted it never
// gets that far.
func TestSandboxGrantsContractFirst(t *testing.T) {
	ctx := context.Background()
	r := newSandbox(t, "redis")
	squatter := watGuest(t, abi.Describe{ABIVersion: abi.Version, Type: "squatter", Version: "1.0.0", Mode: abi.ModeLoop,
		Submits: []abi.QueueContract{{Name: honestQueue, Payload: json.RawMessage(`{"type":"array"}`)}}}, "", "", "")
	cfg := r.cfg
	cfg.PluginsDir = folderOf(t, squatter, "squatter")
	cfg.Grants = map[string]host.Grant{"squatter": {Queues: map[string][]string{honestQueue: {"submit"}}}}
	cfg.SlotsByType = map[string]int{"squatter": 0}
	hs, err := host.New(ctx, cfg)
	if err != nil {
		t.Fatalf("host.New(squatter, granted submit) = %v", err)
	}
	defer hs.Close()
	if v, found, _ := r.b.KVGet(ctx, "fleet-contracts", "queue:"+honestQueue); found {
		t.Fatalf("a submitter recorded the queue's contract: %s", v)
	}
	consumer := watGuest(t, abi.Describe{ABIVersion: abi.Version, Type: "squatter", Version: "1.0.0", Mode: abi.ModeBatch,
		Consumes: &abi.QueueContract{Name: honestQueue, Payload: json.RawMessage(`{"type":"array"}`)}}, "", "", "")
	refusedBeside(t, r, consumer, "squatter", cfg.Grants, `"queues": {"count": ["consume"]}`)
	r.start(t)
	r.honestCompletes(t, 50)
	if v, found, _ := r.b.KVGet(ctx, "fleet-contracts", "queue:"+honestQueue); !found || strings.Contains(string(v), "array") {
		t.Errorf("queue:%s record = %s, %v; want the counter's own", honestQueue, v, found)
	}
}

// TestSandboxGrantsTypeNames: type "shop:eu" is refused at load, naming the byte, since
// "shop"'s default grant "shop:*" would cover its names. Type "shop" beside type
// "shop-eu" reaches its own KV namespace "shop:own" but not "shop-eu:secrets": its
// default ends at ':', which no type holds. The counter completes beside both.
func TestSandboxGrantsTypeNames(t *testing.T) {
	for _, kind := range backendKinds {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			r := newSandbox(t, kind)
			bad := watGuest(t, abi.Describe{ABIVersion: abi.Version, Type: "shop:eu", Version: "1.0.0", Mode: abi.ModeLoop}, "", "", "")
			refusedBeside(t, r, bad, "shop-colon-eu", nil, `type "shop:eu" has ':' at 4; a type is letters, digits, '-', '_' and '.' only`)

			own, theirs := `{"namespace":"shop:own","key":"k"}`, `{"namespace":"shop-eu:secrets","key":"k"}`
			fail := `{"outcome":"fail","reason":"`
			data := fmt.Sprintf(`(data (i32.const 5000) "%s") (data (i32.const 5100) "%s")
  (data (i32.const 5200) "%sown namespace refused\"}") (data (i32.const 5300) "%sreached shop-eu\"}")`,
				watString(own), watString(theirs), watString(fail), watString(fail))
			// kv_get its own namespace (the reply must be {"ok"...), then shop-eu's (the
			// reply must not be): done, else fail saying which.
			body := fmt.Sprintf(`
    (drop (call $kv_get (i32.const 5000) (i32.const %d) (i32.const 16384) (i32.const 4096)))
    (if (i32.ne (i32.load8_u (i32.const 16386)) (i32.const 111)) (then (return (i64.const %d))))
    (drop (call $kv_get (i32.const 5100) (i32.const %d) (i32.const 16384) (i32.const 4096)))
    (if (i32.eq (i32.load8_u (i32.const 16386)) (i32.const 111)) (then (return (i64.const %d))))`,
				len(own), abi.Packed(5200, uint32(len(fail)+len(`own namespace refused"}`))),
				len(theirs), abi.Packed(5300, uint32(len(fail)+len(`reached shop-eu"}`))))
			shop := watGuest(t, abi.Describe{ABIVersion: abi.Version, Type: "shop", Version: "1.0.0", Mode: abi.ModeBatch,
				Consumes: &abi.QueueContract{Name: "shop", Payload: json.RawMessage(`{}`)}},
				`(import "fleet" "kv_get" (func $kv_get (param i32 i32 i32 i32) (result i32)))`, data, body)
			shopEU := watGuest(t, abi.Describe{ABIVersion: abi.Version, Type: "shop-eu", Version: "1.0.0", Mode: abi.ModeBatch,
				Consumes: &abi.QueueContract{Name: "shop-eu", Payload: json.RawMessage(`{}`)}}, "", "", "")
			r.install(t, shop, "shop")
			r.install(t, shopEU, "shop-eu")
			r.grants["shop"] = host.Grant{Queues: map[string][]string{"shop": {"consume"}}}
			r.grants["shop-eu"] = host.Grant{Queues: map[string][]string{"shop-eu": {"consume"}}}
			r.cfg.MaxAttempts = 1 // a fail parks, and says why
			if err := r.b.KVSet(ctx, "shop-eu:secrets", "k", []byte(`"eu only"`), 0, primitives.KVQuota{}); err != nil {
				t.Fatal(err)
			}
			r.start(t)
			if _, err := r.h.Submit(ctx, "shop", []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the shop's task handled", func() bool { return len(r.ev.Finished("shop")) == 1 })
			if got := r.ev.Outcomes("shop"); got["done"] != 1 {
				parked, _ := r.b.QueueParked(ctx, "shop", 1)
				t.Errorf("shop's task = %v (%+v), want done: its own namespace granted, shop-eu's refused", got, parked)
			}
			r.honestCompletes(t, 50)
		})
	}
}
