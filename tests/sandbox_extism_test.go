package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
)

// Hostile plugins over the Extism transport (abi/EXTISM.md): hand-written guests that
// import Extism's kernel, as a PDK's do, run beside the honest counter plugin on one host
// and backend, as the native cases of the other sandbox_*_test.go files do.

// A hostile Extism guest of TestSandboxExtism: a plugin of type name (its queue too),
// with its grant beyond the queue, and the first iteration it must end with.
type extismHostile struct {
	name                   string
	imports, funcs, handle string
	grant                  host.Grant
	config                 string // its configuration, "" for none
	outcome                slotstate.Outcome
	death                  slotstate.Death // the death reason, "" if it must not die
	reason                 string          // a part of the iteration's reason
}

// guest is the case's Extism WAT guest (testutil.ExtismGuestWAT), consuming its queue
// and taking a configuration object if it has one, whose fleet_handle runs its handle
// and then outputs done.
func (c extismHostile) guest(t *testing.T) string {
	t.Helper()
	d := abi.Describe{ABIVersion: abi.Version, Type: c.name, Version: "1.0.0", Mode: abi.ModeBatch,
		Consumes: &abi.QueueContract{Name: c.name, Payload: json.RawMessage(`{"type":"object"}`)}}
	if c.config != "" {
		d.ConfigSchema = json.RawMessage(`{"type":"object"}`)
	}
	return testutil.WAT(t, testutil.ExtismGuestWAT{Describe: d, Result: `{"outcome":"done"}`,
		Imports: c.imports, Funcs: c.funcs, Handle: c.handle}.Source(t))
}

// extismData lays out strings as data segments from 8192 on (where ExtismGuestWAT leaves
// Handle room) and returns the segments and each string's offset.
func extismData(strs ...string) (segments string, at []int) {
	var b strings.Builder
	off := 8192
	for _, s := range strs {
		fmt.Fprintf(&b, "(data (i32.const %d) \"%s\")\n", off, watString(s))
		at = append(at, off)
		off += len(s) + 1
	}
	return b.String(), at
}

// failUnless is WAT that fails the task the Extism way, with the block reply as its
// message, unless reply starts with the n bytes at want.
func failUnless(reply string, want, n int) string {
	return fmt.Sprintf(`(if (i32.eqz (call $starts %s (i32.const %d) (i32.const %d)))
      (then (call $error_set %s) (return (i32.const 1))))`, reply, want, n, reply)
}

// The functions a hostile guest imports beyond ExtismGuestWAT's own: Extism's, and
// fleet's kv_get.
const (
	importHTTPRequest = `(import "extism:host/env" "http_request" (func $http_request (param i64 i64) (result i64)))`
	importVarGet      = `(import "extism:host/env" "var_get" (func $var_get (param i64) (result i64)))`
	importVarSet      = `(import "extism:host/env" "var_set" (func $var_set (param i64 i64)))`
	importConfigGet   = `(import "extism:host/env" "config_get" (func $config_get (param i64) (result i64)))`
	importStoreU64    = `(import "extism:host/env" "store_u64" (func $store_u64 (param i64 i64)))`
	importLogInfo     = `(import "extism:host/env" "log_info" (func $log_info (param i64)))`
	importKVGet       = `(import "extism:host/user" "kv_get" (func $kv_get (param i64) (result i64)))`
)

// extismDenied is the guest that calls fleet operations on what belongs to the honest
// counter plugin and to no one it was granted, each of which must answer a
// PermissionDenied envelope: it fails the task with the reply of the first that does not,
// and is done otherwise. siteURL is an HTTP server it is not granted.
func extismDenied(siteURL string) extismHostile {
	reqs := []struct{ op, req string }{
		{"kv_get", `{"namespace":"counter:secrets","key":"k"}`},
		{"kv_set", `{"namespace":"counter:secrets","key":"k","value":"stolen"}`},
		{"kv_delete", `{"namespace":"counter:secrets","key":"k"}`},
		{"counter_incr", `{"name":"` + honestCounter + `","delta":1000}`},
		{"counter_get", `{"name":"` + honestCounter + `"}`},
		{"submit", `{"queue":"` + honestQueue + `","payload":{}}`},
		{"pool_put", `{"pool":"counter-secrets","payload":{"v":"planted"}}`},
		{"pool_claim", `{"pool":"counter-secrets","hold_ms":60000}`},
		{"pool_list", `{"pool":"counter-secrets"}`},
		{"lock_acquire", `{"name":"counter:lock","hold_ms":60000}`},
		{"http", `{"method":"GET","url":"` + siteURL + `/fleet-http"}`},
	}
	const denied = `{"error":{"kind":"PermissionDenied"`
	strs := []string{denied}
	var imports, handle strings.Builder
	for _, r := range reqs {
		strs = append(strs, r.req)
		fmt.Fprintf(&imports, "(import \"extism:host/user\" %q (func $%s (param i64) (result i64)))\n", r.op, r.op)
	}
	data, at := extismData(strs...)
	handle.WriteString("(local $r i64)\n")
	for i, r := range reqs {
		fmt.Fprintf(&handle, "(local.set $r (call $%s (call $block (i32.const %d) (i32.const %d))))\n", r.op, at[i+1], len(r.req))
		handle.WriteString(failUnless("(local.get $r)", at[0], len(denied)) + "\n")
	}
	return extismHostile{name: "ex-denied", imports: imports.String(), funcs: data, handle: handle.String(), outcome: "done"}
}

// extismHostiles are the cases of TestSandboxExtism; siteURL is an HTTP server that no
// plugin is granted.
func extismHostiles(siteURL string) []extismHostile {
	deadline := host.Grant{CallTimeout: 300 * time.Millisecond}
	httpReq := `{"method":"GET","url":"` + siteURL + `/extism-http"}`
	httpData, httpAt := extismData(httpReq)
	varData, varAt := extismData("k", "v")
	cfgData, cfgAt := extismData("greeting", "hi", "secret")
	const limited = `{"error":{"kind":"LimitExceeded"`
	limitData, limitAt := extismData(limited)
	return []extismHostile{
		{name: "ex-spin", handle: `(loop $l (br $l))`, grant: deadline, outcome: "died", death: "deadline", reason: "deadline"},
		// issue 10's call tree, 2^48 calls and no loop: the deadline checks at function
		// entry cut it.
		{name: "ex-call-tree", funcs: callTree(), handle: `(call $f0)`, grant: deadline, outcome: "died", death: "deadline", reason: "deadline"},
		{name: "ex-recursion", funcs: `(func $r (call $r))`, handle: `(call $r)`, outcome: "died", death: "stack"},
		// Grows its own memory a page at a time until the limit refuses, then dies as a
		// PDK's allocator does.
		{name: "ex-memory-bomb", handle: `
		  (block $full (loop $more
		    (br_if $full (i32.eq (memory.grow (i32.const 1)) (i32.const -1)))
		    (br $more)))
		  unreachable`,
			grant: host.Grant{MemoryLimitPages: 64}, outcome: "died", death: "memory"},
		// Fills the kernel's memory (where its input, output and every host reply live)
		// with 1 MiB blocks until alloc refuses, then dies.
		{name: "ex-kernel-bomb", handle: `
		  (block $full (loop $more
		    (br_if $full (i64.eqz (call $alloc (i64.const 1048576))))
		    (br $more)))
		  unreachable`,
			grant: host.Grant{MemoryLimitPages: 64}, outcome: "died", death: "memory"},
		// Asks the kernel for 2^63-1 bytes (refused: 0, else it fails), sends a block
		// over the request limit to kv_get (refused as a value), then sets blocks of
		// absurd lengths as its output, over and over, and returns: the host reads
		// nothing past the kernel's memory, and the output it cannot read is a bad result.
		{name: "ex-absurd-blocks", imports: importKVGet, funcs: limitData, handle: fmt.Sprintf(`(local $b i64) (local $r i64) (local $i i32)
		  (if (i64.ne (call $alloc (i64.const 0x7fffffffffffffff)) (i64.const 0)) (then (return (i32.const 2))))
		  (local.set $b (call $alloc (i64.const 0x400001)))
		  (local.set $r (call $kv_get (local.get $b)))
		  %s
		  (block $done (loop $more
		    (br_if $done (i32.ge_u (local.get $i) (i32.const 1000)))
		    (call $output_set (local.get $b) (i64.const 0xffffffff))
		    (call $output_set (call $alloc (i64.const 0x4000000000000000)) (i64.const 0xfffffff0))
		    (local.set $i (i32.add (local.get $i) (i32.const 1)))
		    (br $more)))
		  (return (i32.const 0))`, failUnless("(local.get $r)", limitAt[0], len(limited))),
			outcome: "died", death: "bad_result"},
		// Writes where the Extism SDK's kernel kept a block's header and its allocator's
		// root, which made that kernel loop or trap, then logs the block: the kernel's
		// bookkeeping is the host's, so the writes are Extism memory like any other, and
		// the task is done.
		{name: "ex-kernel-scribble", imports: importStoreU64 + importLogInfo,
			handle:  testutil.ExtismKernelScribble(`(call $store_u64 (i64.const 1) (i64.const 0x7ffffff0))`, `(call $log_info (local.get $b))`),
			outcome: "done"},
		// Logs through Extism's log_info, 10 times 64 KiB of 7-byte lines and one line of
		// 256 KiB: the guest log cuts each line and rate-limits them (logFlood).
		{name: "ex-log-flood", imports: importStoreU64 + importLogInfo, funcs: `
		  (func $fill (param $n i64) (param $v i64) (result i64) (local $b i64) (local $i i64)
		    (local.set $b (call $alloc (local.get $n)))
		    (block $done (loop $more
		      (br_if $done (i64.ge_u (local.get $i) (local.get $n)))
		      (call $store_u64 (i64.add (local.get $b) (local.get $i)) (local.get $v))
		      (local.set $i (i64.add (local.get $i) (i64.const 8)))
		      (br $more)))
		    (local.get $b))`, handle: `(local $i i32)
		  (block $done (loop $more
		    (br_if $done (i32.ge_u (local.get $i) (i32.const 10)))
		    (call $log_info (call $fill (i64.const 65536) (i64.const 0x0a61616161616161)))
		    (local.set $i (i32.add (local.get $i) (i32.const 1)))
		    (br $more)))
		  (call $log_info (call $fill (i64.const 262144) (i64.const 0x6161616161616161)))`,
			outcome: "done"},
		// Extism's own HTTP stays off: its http_request traps before it sends.
		{name: "ex-http", imports: importHTTPRequest, funcs: httpData,
			handle:  fmt.Sprintf(`(drop (call $http_request (call $block (i32.const %d) (i32.const %d)) (i64.const 0)))`, httpAt[0], len(httpReq)),
			outcome: "died", death: "trap", reason: "is not allowed"},
		// Vars are off: var_get finds nothing (else the task fails), var_set traps.
		{name: "ex-vars", imports: importVarGet + importVarSet, funcs: varData, handle: fmt.Sprintf(`
		  (if (i64.ne (call $var_get (call $block (i32.const %d) (i32.const 1))) (i64.const 0))
		    (then (return (i32.const 1))))
		  (call $var_set (call $block (i32.const %d) (i32.const 1)) (call $block (i32.const %d) (i32.const 1)))`, varAt[0], varAt[0], varAt[1]),
			outcome: "died", death: "trap", reason: "Vars are disabled"},
		// Extism's config_get reads the plugin's own configuration; a key it was not given
		// finds nothing.
		{name: "ex-config", imports: importConfigGet, funcs: cfgData, handle: fmt.Sprintf(`(local $v i64)
		  (local.set $v (call $config_get (call $block (i32.const %d) (i32.const 8))))
		  (if (i64.eqz (local.get $v)) (then (return (i32.const 2))))
		  %s
		  (if (i64.ne (call $config_get (call $block (i32.const %d) (i32.const 6))) (i64.const 0))
		    (then (return (i32.const 3))))`, cfgAt[0], failUnless("(local.get $v)", cfgAt[1], 2), cfgAt[2]),
			config: `{"greeting":"hi"}`, outcome: "done"},
		extismDenied(siteURL),
	}
}

// TestSandboxExtism runs hostile Extism guests, all at once beside the honest counter
// plugin on one host and backend: a spin and a call tree cut at their deadline, a
// recursion at its stack limit, bombs of the guest's memory and of the kernel's at the
// memory limit, blocks and outputs of absurd sizes, writes over where the Extism SDK's
// kernel kept its bookkeeping, a flood of Extism log lines, Extism's own HTTP and vars
// (off), its config (the plugin's own) and fleet operations on what the counter owns
// (PermissionDenied, as a value the guest reads). Each hostile task's only iteration
// ends with the outcome and death reason it names; the honest plugin completes its tasks
// before, beside and after them; nothing outside the grants is touched; and the host
// stops cleanly, leaving no goroutine behind.
func TestSandboxExtism(t *testing.T) {
	for _, kind := range sandboxKinds {
		t.Run(kind, func(t *testing.T) {
			testutil.CheckGoroutines(t)
			sandboxExtism(t, kind)
		})
	}
}

func sandboxExtism(t *testing.T, kind string) {
	ctx := context.Background()
	var hits atomic.Int64
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hits.Add(1) }))
	t.Cleanup(site.Close)

	r := newSandbox(t, kind)
	var logs *testutil.LogBuffer
	r.cfg.Logger, logs = testLogs(t)
	r.cfg.MaxAttempts = 1 // a dead task parks, and says why
	r.cfg.SlotsByType = map[string]int{}
	r.cfg.Configs = map[string]json.RawMessage{}
	cases := extismHostiles(site.URL)
	for _, c := range cases {
		r.install(t, c.guest(t), c.name)
		if c.config != "" {
			r.cfg.Configs[c.name] = json.RawMessage(c.config)
		}
		g := c.grant
		g.Queues = map[string][]string{c.name: {"consume"}}
		r.grants[c.name] = g
		r.cfg.SlotsByType[c.name] = 1
	}
	// What the counter owns and the hostile guests reach for.
	if err := r.b.KVSet(ctx, "counter:secrets", "k", []byte(`"the counter's"`), 0, primitives.KVQuota{}); err != nil {
		t.Fatal(err)
	}
	secret, err := r.b.PoolPut(ctx, "counter-secrets", []byte(`{"v":"secret"}`), nil, 0, primitives.PoolPutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r.start(t)
	started := time.Now()
	r.honestCompletes(t, 50)
	for _, c := range cases {
		if _, err := r.h.Submit(ctx, c.name, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	r.honestCompletes(t, 50)
	waitFor(t, "every hostile task's iteration", func() bool {
		for _, c := range cases {
			if len(r.ev.Finished(c.name)) == 0 {
				return false
			}
		}
		return true
	})
	r.honestCompletes(t, 50)

	for _, c := range cases {
		fin := r.ev.Finished(c.name)
		ev := fin[0]
		if len(fin) != 1 || ev.Outcome != c.outcome || ev.Death != c.death || !strings.Contains(ev.Reason, c.reason) {
			t.Errorf("%s: %d iterations, the first %s, death %q (%s); want one, %s, death %q, its reason naming %q",
				c.name, len(fin), ev.Outcome, ev.Death, ev.Reason, c.outcome, c.death, c.reason)
		}
		want := primitives.QueueStats{}
		if c.death != "" {
			want.Parked = 1
		}
		if s := testutil.QueueStats(t, r.b, c.name); s != want {
			t.Errorf("%s: queue %+v, want %+v", c.name, s, want)
		}
	}

	logFlood(t, logs, started)

	// Nothing outside the grants was touched: the counter counted its 150 tasks and no
	// more, its queue holds nothing of the thief's, its KV value, pool item and lock are
	// as the test left them, and no request reached the server.
	if n := testutil.Counter(t, r.b, honestCounter); n != 150 {
		t.Errorf("%s = %d, want the honest plugin's 150", honestCounter, n)
	}
	if s := testutil.QueueStats(t, r.b, honestQueue); s != (primitives.QueueStats{}) {
		t.Errorf("queue %s = %+v, want every task acked", honestQueue, s)
	}
	if v, ok, err := r.b.KVGet(ctx, "counter:secrets", "k"); err != nil || !ok || string(v) != `"the counter's"` {
		t.Errorf("counter:secrets k = %s, %v, %v; want it untouched", v, ok, err)
	}
	if n, err := r.b.PoolSize(ctx, "counter-secrets"); err != nil || n != 1 {
		t.Errorf("counter-secrets size = %d, %v; want the secret alone", n, err)
	}
	if c, ok, err := r.b.PoolClaim(ctx, "counter-secrets", nil, time.Minute); err != nil || !ok || c.ID != secret {
		t.Errorf("the secret item could not be claimed (%+v, %v, %v): a hostile guest leased it", c, ok, err)
	}
	if l, held, err := r.b.LockShow(ctx, "counter:lock"); err != nil || held {
		t.Errorf("counter:lock = %+v, %v, %v; want it free", l, held, err)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the server the guests are not granted got %d requests", n)
	}
}

// logFlood checks what ex-log-flood's 81,921 lines left in the host's log since started:
// no more lines than its plugin's output limiter lets through (a burst of 20, then 10 a
// second: the token bucket's own bound, not a timing assertion), none over the guest
// log's 2 KiB line and its record.
func logFlood(t *testing.T, logs *testutil.LogBuffer, started time.Time) {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, " slot=ex-log-flood/") && strings.Contains(l, " stream=guest") {
			lines = append(lines, l)
		}
	}
	bound := 20 + int(time.Since(started)/(100*time.Millisecond)) + 1
	if len(lines) == 0 || len(lines) > bound {
		t.Errorf("ex-log-flood wrote %d guest log lines, want 1 to %d (20 + 10/s)", len(lines), bound)
	}
	for _, l := range lines {
		if len(l) > 2048+512 {
			t.Errorf("a guest log line of ex-log-flood is %d bytes, want at most its 2 KiB and the record", len(l))
			break
		}
	}
	t.Logf("ex-log-flood: %d guest log lines of 81,921", len(lines))
}
