package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/demosite"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
)

// hostileCase is one host call that the hostile guest (testdata/hostile) makes with the
// request bytes req, in which "@PAD@" becomes pad bytes 'x'.
type hostileCase struct {
	name string // "<op>/<what>", the KV key the guest records under
	req  string
	pad  int
	kind abi.Kind // the error kind the guest must get; "" for a result
}

// The hostile plugin's limits (see the grant in TestHostileCalls).
const (
	hostileMaxPayload = 4096
	overPayload       = hostileMaxPayload + 1
	overName          = primitives.MaxNameLen + 1
)

// hostileCases: for every host function, a malformed request, an unknown field, a field
// of the wrong type, and, where they apply, an unknown tag, a wrongly typed tag, an
// oversized value or name, a refused grant and a missing item; plus one well-formed call,
// which proves that the guest reaches the op at all.
func hostileCases(siteURL string) []hostileCase {
	const pool = `"pool":"hostile-items"`
	return []hostileCase{
		{"pool_put/ok", `{` + pool + `,"payload":{"v":"a"},"tags":{"site":"x","fresh":true}}`, 0, ""},
		{"pool_put/empty", ``, 0, abi.ValueError},
		{"pool_put/malformed", `{` + pool + `,`, 0, abi.ValueError},
		{"pool_put/not-an-object", `["pool"]`, 0, abi.ValueError},
		{"pool_put/unknown-field", `{` + pool + `,"payload":{"v":"a"},"colour":1}`, 0, abi.TypeError},
		{"pool_put/wrong-type", `{"pool":7,"payload":{"v":"a"}}`, 0, abi.ValueError},
		{"pool_put/unknown-tag", `{` + pool + `,"payload":{"v":"a"},"tags":{"colour":"red"}}`, 0, abi.TypeError},
		{"pool_put/wrong-type-tag", `{` + pool + `,"payload":{"v":"a"},"tags":{"fresh":"yes"}}`, 0, abi.ValueError},
		{"pool_put/object-tag", `{` + pool + `,"payload":{"v":"a"},"tags":{"site":{"a":1}}}`, 0, abi.ValueError},
		{"pool_put/payload-unknown-field", `{` + pool + `,"payload":{"v":"a","w":1}}`, 0, abi.TypeError},
		{"pool_put/payload-wrong-type", `{` + pool + `,"payload":{"v":1}}`, 0, abi.ValueError},
		{"pool_put/oversized-payload", `{` + pool + `,"payload":{"v":"@PAD@"}}`, overPayload, abi.LimitExceeded},
		{"pool_put/oversized-tags", `{` + pool + `,"payload":{"v":"a"},"tags":{"site":"@PAD@"}}`, overPayload, abi.LimitExceeded},
		{"pool_put/oversized-name", `{"pool":"@PAD@","payload":{"v":"a"}}`, overName, abi.ValueError},
		{"pool_put/negative-ttl", `{` + pool + `,"payload":{"v":"a"},"ttl_ms":-1}`, 0, abi.ValueError},
		{"pool_put/wrapping-ttl", `{` + pool + `,"payload":{"v":"a"},"ttl_ms":18446744073710}`, 0, abi.ValueError},
		{"pool_put/ttl-past-max", `{` + pool + `,"payload":{"v":"a"},"ttl_ms":2592000001}`, 0, abi.ValueError},
		{"pool_put/denied", `{"pool":"cookies","payload":{"v":"a"}}`, 0, abi.PermissionDenied},

		{"pool_claim/ok", `{` + pool + `,"where":{"site":"x"},"hold_ms":60000}`, 0, ""},
		{"pool_claim/malformed", `{` + pool + `,"hold_ms":`, 0, abi.ValueError},
		{"pool_claim/unknown-field", `{` + pool + `,"hold_ms":1000,"colour":1}`, 0, abi.TypeError},
		{"pool_claim/wrong-type", `{` + pool + `,"hold_ms":"1000"}`, 0, abi.ValueError},
		{"pool_claim/unknown-tag", `{` + pool + `,"where":{"colour":"red"},"hold_ms":1000}`, 0, abi.TypeError},
		{"pool_claim/wrong-type-tag", `{` + pool + `,"where":{"fresh":"yes"},"hold_ms":1000}`, 0, abi.ValueError},
		{"pool_claim/null-tag", `{` + pool + `,"where":{"site":null},"hold_ms":1000}`, 0, abi.ValueError},
		{"pool_claim/zero-hold", `{` + pool + `}`, 0, abi.ValueError},
		{"pool_claim/wrapping-hold", `{` + pool + `,"hold_ms":18446744073710}`, 0, abi.ValueError},
		{"pool_claim/max-int-hold", `{` + pool + `,"hold_ms":9223372036854775807}`, 0, abi.ValueError},
		{"pool_claim/negative-hold", `{` + pool + `,"hold_ms":-1}`, 0, abi.ValueError},
		{"pool_claim/oversized-name", `{"pool":"@PAD@","hold_ms":1000}`, overName, abi.ValueError},
		{"pool_claim/denied", `{"pool":"cookies","hold_ms":1000}`, 0, abi.PermissionDenied},

		{"pool_list/ok", `{` + pool + `,"where":{"fresh":true},"limit":5}`, 0, ""},
		{"pool_list/malformed", `{` + pool + `,"limit":5`, 0, abi.ValueError},
		{"pool_list/unknown-field", `{` + pool + `,"order":"asc"}`, 0, abi.TypeError},
		{"pool_list/wrong-type", `{` + pool + `,"limit":"5"}`, 0, abi.ValueError},
		{"pool_list/unknown-tag", `{` + pool + `,"where":{"colour":"red"}}`, 0, abi.TypeError},
		{"pool_list/wrong-type-tag", `{` + pool + `,"where":{"site":7}}`, 0, abi.ValueError},
		{"pool_list/negative-limit", `{` + pool + `,"limit":-1}`, 0, abi.ValueError},
		{"pool_list/oversized-name", `{"pool":"@PAD@"}`, overName, abi.ValueError},
		{"pool_list/denied", `{"pool":"cookies"}`, 0, abi.PermissionDenied},

		{"pool_release/malformed", `{` + pool + `,"id":"x","token":`, 0, abi.ValueError},
		{"pool_release/unknown-field", `{` + pool + `,"id":"x","token":"t","force":true}`, 0, abi.TypeError},
		{"pool_release/wrong-type", `{` + pool + `,"id":5,"token":"t"}`, 0, abi.ValueError},
		{"pool_release/not-found", `{` + pool + `,"id":"no-such-item","token":"t"}`, 0, abi.NotFound},
		{"pool_release/long-id", `{` + pool + `,"id":"@PAD@","token":"t"}`, 300, abi.NotFound},
		{"pool_release/denied", `{"pool":"cookies","id":"x","token":"t"}`, 0, abi.PermissionDenied},

		{"pool_extend/malformed", `{` + pool + `,"id":"x","token":"t","hold_ms":`, 0, abi.ValueError},
		{"pool_extend/unknown-field", `{` + pool + `,"id":"x","token":"t","hold_ms":1000,"force":true}`, 0, abi.TypeError},
		{"pool_extend/wrong-type", `{` + pool + `,"id":"x","token":"t","hold_ms":"1000"}`, 0, abi.ValueError},
		{"pool_extend/zero-hold", `{` + pool + `,"id":"x","token":"t"}`, 0, abi.ValueError},
		{"pool_extend/negative-hold", `{` + pool + `,"id":"x","token":"t","hold_ms":-1}`, 0, abi.ValueError},
		{"pool_extend/max-int-hold", `{` + pool + `,"id":"x","token":"t","hold_ms":9223372036854775807}`, 0, abi.ValueError},
		{"pool_extend/not-found", `{` + pool + `,"id":"no-such-item","token":"t","hold_ms":1000}`, 0, abi.NotFound},
		{"pool_extend/denied", `{"pool":"cookies","id":"x","token":"t","hold_ms":1000}`, 0, abi.PermissionDenied},

		{"pool_mark_bad/malformed", `{` + pool + `,"id":"x",`, 0, abi.ValueError},
		{"pool_mark_bad/unknown-field", `{` + pool + `,"id":"x","reason":"r","ban":true}`, 0, abi.TypeError},
		{"pool_mark_bad/wrong-type", `{` + pool + `,"id":"x","reason":["r"]}`, 0, abi.ValueError},
		{"pool_mark_bad/not-found", `{` + pool + `,"id":"no-such-item","reason":"r"}`, 0, abi.NotFound},
		{"pool_mark_bad/oversized-reason", `{` + pool + `,"id":"x","reason":"@PAD@"}`, 1025, abi.LimitExceeded},
		{"pool_mark_bad/denied", `{"pool":"cookies","id":"x","reason":"r"}`, 0, abi.PermissionDenied},

		{"pool_size/ok", `{` + pool + `}`, 0, ""},
		{"pool_size/malformed", `{` + pool, 0, abi.ValueError},
		{"pool_size/unknown-field", `{` + pool + `,"leased":true}`, 0, abi.TypeError},
		{"pool_size/wrong-type", `{"pool":["hostile-items"]}`, 0, abi.ValueError},
		{"pool_size/oversized-name", `{"pool":"@PAD@"}`, overName, abi.ValueError},
		{"pool_size/denied", `{"pool":"cookies"}`, 0, abi.PermissionDenied},

		{"kv_get/ok", `{"namespace":"hostile:kv","key":"k"}`, 0, ""},
		{"kv_get/malformed", `{"namespace":"hostile:kv","key":"k"`, 0, abi.ValueError},
		{"kv_get/trailing-data", `{"namespace":"hostile:kv","key":"k"} {}`, 0, abi.ValueError},
		{"kv_get/unknown-field", `{"namespace":"hostile:kv","key":"k","default":1}`, 0, abi.TypeError},
		{"kv_get/wrong-type", `{"namespace":"hostile:kv","key":5}`, 0, abi.ValueError},
		{"kv_get/empty-key", `{"namespace":"hostile:kv","key":""}`, 0, abi.ValueError},
		{"kv_get/oversized-key", `{"namespace":"hostile:kv","key":"@PAD@"}`, overName, abi.ValueError},
		{"kv_get/oversized-request", `{"namespace":"hostile:kv","key":"k","x":"@PAD@"}`, abi.MaxRequest, abi.LimitExceeded},
		{"kv_get/denied", `{"namespace":"scraper:results","key":"k"}`, 0, abi.PermissionDenied},
		{"kv_get/contracts", `{"namespace":"fleet-contracts","key":"queue:hostile"}`, 0, abi.PermissionDenied},

		{"kv_set/ok", `{"namespace":"hostile:kv","key":"k","value":{"a":1}}`, 0, ""},
		{"kv_set/malformed", `{"namespace":"hostile:kv","key":"k","value":{"a":}`, 0, abi.ValueError},
		{"kv_set/unknown-field", `{"namespace":"hostile:kv","key":"k","value":1,"nx":true}`, 0, abi.TypeError},
		{"kv_set/wrong-type", `{"namespace":"hostile:kv","key":"k","value":1,"ttl_ms":"60s"}`, 0, abi.ValueError},
		{"kv_set/missing-value", `{"namespace":"hostile:kv","key":"k"}`, 0, abi.ValueError},
		{"kv_set/oversized-value", `{"namespace":"hostile:kv","key":"k","value":"@PAD@"}`, overPayload, abi.LimitExceeded},
		{"kv_set/oversized-key", `{"namespace":"hostile:kv","key":"@PAD@","value":1}`, overName, abi.ValueError},
		{"kv_set/negative-ttl", `{"namespace":"hostile:kv","key":"k","value":1,"ttl_ms":-5}`, 0, abi.ValueError},
		{"kv_set/wrapping-ttl", `{"namespace":"hostile:kv","key":"k","value":1,"ttl_ms":18446744073710}`, 0, abi.ValueError},
		{"kv_set/max-int-ttl", `{"namespace":"hostile:kv","key":"k","value":1,"ttl_ms":9223372036854775807}`, 0, abi.ValueError},
		{"kv_set/denied", `{"namespace":"fleet-contracts","key":"queue:hostile","value":{}}`, 0, abi.PermissionDenied},

		{"kv_delete/ok", `{"namespace":"hostile:kv","key":"gone"}`, 0, ""},
		{"kv_delete/malformed", `{"namespace":`, 0, abi.ValueError},
		{"kv_delete/unknown-field", `{"namespace":"hostile:kv","key":"k","all":true}`, 0, abi.TypeError},
		{"kv_delete/wrong-type", `{"namespace":"hostile:kv","key":{}}`, 0, abi.ValueError},
		{"kv_delete/oversized-key", `{"namespace":"hostile:kv","key":"@PAD@"}`, overName, abi.ValueError},
		{"kv_delete/denied", `{"namespace":"other:kv","key":"k"}`, 0, abi.PermissionDenied},

		{"lock_acquire/ok", `{"name":"hostile:lock","hold_ms":60000}`, 0, ""},
		{"lock_acquire/malformed", `{"name":"hostile:lock","hold_ms":60000`, 0, abi.ValueError},
		{"lock_acquire/unknown-field", `{"name":"hostile:lock","hold_ms":1000,"steal":true}`, 0, abi.TypeError},
		{"lock_acquire/wrong-type", `{"name":"hostile:lock","hold_ms":"1s"}`, 0, abi.ValueError},
		{"lock_acquire/zero-hold", `{"name":"hostile:lock2"}`, 0, abi.ValueError},
		{"lock_acquire/negative-wait", `{"name":"hostile:lock2","hold_ms":1000,"wait_ms":-1}`, 0, abi.ValueError},
		{"lock_acquire/wrapping-hold", `{"name":"hostile:lock2","hold_ms":18446744073710}`, 0, abi.ValueError},
		{"lock_acquire/hold-past-max", `{"name":"hostile:lock2","hold_ms":2592000001}`, 0, abi.ValueError},
		{"lock_acquire/max-int-wait", `{"name":"hostile:lock2","hold_ms":1000,"wait_ms":9223372036854775807}`, 0, abi.ValueError},
		{"lock_acquire/oversized-name", `{"name":"@PAD@","hold_ms":1000}`, overName, abi.ValueError},
		{"lock_acquire/denied", `{"name":"harvest:example.com","hold_ms":1000}`, 0, abi.PermissionDenied},
		{"lock_acquire/contracts", `{"name":"fleet-contracts","hold_ms":1000}`, 0, abi.PermissionDenied},

		{"lock_release/ok", `{"name":"hostile:lock3","token":"not-the-holder"}`, 0, ""},
		{"lock_release/malformed", `{"name":"hostile:lock3",}`, 0, abi.ValueError},
		{"lock_release/unknown-field", `{"name":"hostile:lock3","token":"t","fence":1}`, 0, abi.TypeError},
		{"lock_release/wrong-type", `{"name":"hostile:lock3","token":true}`, 0, abi.ValueError},
		{"lock_release/oversized-name", `{"name":"@PAD@","token":"t"}`, overName, abi.ValueError},
		{"lock_release/denied", `{"name":"harvest:example.com","token":"t"}`, 0, abi.PermissionDenied},

		{"counter_incr/ok", `{"name":"hostile:n","delta":2}`, 0, ""},
		{"counter_incr/malformed", `{"name":"hostile:n","delta":}`, 0, abi.ValueError},
		{"counter_incr/unknown-field", `{"name":"hostile:n","step":1}`, 0, abi.TypeError},
		{"counter_incr/wrong-type", `{"name":"hostile:n","delta":"1"}`, 0, abi.ValueError},
		{"counter_incr/fractional", `{"name":"hostile:n","delta":1.5}`, 0, abi.ValueError},
		{"counter_incr/oversized-name", `{"name":"@PAD@"}`, overName, abi.ValueError},
		{"counter_incr/denied", `{"name":"scraper:scraped"}`, 0, abi.PermissionDenied},

		{"counter_get/ok", `{"name":"hostile:n"}`, 0, ""},
		{"counter_get/malformed", `{"name"`, 0, abi.ValueError},
		{"counter_get/unknown-field", `{"name":"hostile:n","reset":true}`, 0, abi.TypeError},
		{"counter_get/wrong-type", `{"name":12}`, 0, abi.ValueError},
		{"counter_get/denied", `{"name":"counter:done"}`, 0, abi.PermissionDenied},

		{"submit/ok", `{"queue":"hostile-sub","payload":{"n":1}}`, 0, ""},
		{"submit/malformed", `{"queue":"hostile-sub","payload":{"n":1}`, 0, abi.ValueError},
		{"submit/unknown-field", `{"queue":"hostile-sub","payload":{"n":1},"priority":9}`, 0, abi.TypeError},
		{"submit/wrong-type", `{"queue":["hostile-sub"],"payload":{"n":1}}`, 0, abi.ValueError},
		{"submit/payload-unknown-field", `{"queue":"hostile-sub","payload":{"n":1,"m":2}}`, 0, abi.TypeError},
		{"submit/payload-wrong-type", `{"queue":"hostile-sub","payload":{"n":"1"}}`, 0, abi.ValueError},
		{"submit/missing-payload", `{"queue":"hostile-sub"}`, 0, abi.ValueError},
		{"submit/oversized-payload", `{"queue":"hostile-sub","payload":{"n":1,"pad":"@PAD@"}}`, overPayload, abi.LimitExceeded},
		{"submit/oversized-name", `{"queue":"@PAD@","payload":{"n":1}}`, overName, abi.ValueError},
		{"submit/denied", `{"queue":"scrape","payload":{"url":"http://x/"}}`, 0, abi.PermissionDenied},

		{"config_get/ok", `{}`, 0, ""},
		{"config_get/malformed", `{`, 0, abi.ValueError},
		{"config_get/unknown-field", `{"key":"scheme"}`, 0, abi.TypeError},
		{"config_get/wrong-type", `[]`, 0, abi.ValueError},

		{"log/ok", `{"level":"info","message":"hostile says hi","attrs":{"n":1}}`, 0, ""},
		{"log/long-message", `{"level":"info","message":"@PAD@"}`, 10000, ""}, // cut, not refused
		{"log/malformed", `{"level":"info","message":"x`, 0, abi.ValueError},
		{"log/unknown-field", `{"level":"info","message":"x","color":"red"}`, 0, abi.TypeError},
		{"log/wrong-type", `{"level":"info","message":42}`, 0, abi.ValueError},
		{"log/bad-level", `{"level":"shout","message":"x"}`, 0, abi.ValueError},
		{"log/too-many-attrs", logAttrs(33), 0, abi.LimitExceeded},

		{"metric/ok", `{"name":"hostile_calls","kind":"counter","value":1}`, 0, ""},
		{"metric/malformed", `{"name":"hostile_calls","kind":"counter","value":}`, 0, abi.ValueError},
		{"metric/unknown-field", `{"name":"hostile_calls","kind":"counter","value":1,"help":"x"}`, 0, abi.TypeError},
		{"metric/wrong-type", `{"name":"hostile_calls","kind":"counter","value":"1"}`, 0, abi.ValueError},
		{"metric/bad-name", `{"name":"hostile calls!","kind":"counter","value":1}`, 0, abi.ValueError},
		{"metric/oversized-name", `{"name":"@PAD@","kind":"gauge","value":1}`, 129, abi.ValueError},
		{"metric/bad-kind", `{"name":"hostile_calls","kind":"histogram","value":1}`, 0, abi.ValueError},
		{"metric/negative-counter", `{"name":"hostile_calls","kind":"counter","value":-1}`, 0, abi.ValueError},
		{"metric/kind-change", `{"name":"hostile_calls","kind":"gauge","value":1}`, 0, abi.ValueError},

		{"http/ok", `{"method":"GET","url":"` + siteURL + `/page/1"}`, 0, ""},
		{"http/malformed", `{"method":"GET","url":"` + siteURL, 0, abi.ValueError},
		{"http/unknown-field", `{"method":"GET","url":"` + siteURL + `/","follow":true}`, 0, abi.TypeError},
		{"http/wrong-type", `{"method":"GET","url":5}`, 0, abi.ValueError},
		{"http/wrong-type-header", `{"method":"GET","url":"` + siteURL + `/","headers":{"X-A":"b"}}`, 0, abi.ValueError},
		{"http/bad-base64-body", `{"method":"POST","url":"` + siteURL + `/","body":"not base64!"}`, 0, abi.ValueError},
		{"http/oversized-body", `{"method":"POST","url":"` + siteURL + `/","body":"@PAD@"}`, 8000, abi.LimitExceeded},
		{"http/wrapping-timeout", `{"method":"GET","url":"` + siteURL + `/page/1","timeout_ms":18446744073710}`, 0, abi.ValueError},
		{"http/denied", `{"method":"GET","url":"http://example.com/"}`, 0, abi.PermissionDenied},
	}
}

// logAttrs is a log request with n attributes.
func logAttrs(n int) string {
	attrs := map[string]int{}
	for i := range n {
		attrs[fmt.Sprintf("a%d", i)] = i
	}
	b, _ := json.Marshal(map[string]any{"level": "info", "message": "x", "attrs": attrs})
	return string(b)
}

// hostileRecord is what the hostile guest stores per task.
type hostileRecord struct {
	Kind    abi.Kind        `json:"kind"`
	Message string          `json:"message"`
	OK      json.RawMessage `json:"ok"`
	Fault   string          `json:"fault"`
	Seq     int             `json:"seq"`
}

// TestHostileCalls: a real wasm guest calls every host function with malformed requests,
// unknown fields and tags, wrongly typed fields and tags, oversized values and names,
// and names outside its grant. Each call gets the error kind the ABI promises, as an
// envelope (never a fault or a trap), and the slot goes on: every case is followed by a
// probe task on the same slot, every task is acked, and the instance is never replaced
// (the guest's own task count runs 1, 2, 3, ... without a restart).
func TestHostileCalls(t *testing.T) {
	for _, kind := range sandboxKinds {
		t.Run(kind, func(t *testing.T) {
			testutil.CheckGoroutines(t)
			hostileCalls(t, kind)
		})
	}
}

func hostileCalls(t *testing.T, kind string) {
	site := demosite.New()
	site.Start()
	t.Cleanup(func() { site.Close() })
	backend, _ := newBackend(t, kind)
	dir := t.TempDir()
	installPlugin(t, "tests/testdata/hostile", dir, "hostile")
	ev := &testutil.SlotEvents{}
	cfg := host.Config{
		PluginsDir: dir,
		Backend:    backend,
		CacheDir:   cacheDir,
		Logger:     testLogger(t),
		Slots:      1,
		Grants: map[string]host.Grant{"hostile": {
			Queues:     map[string][]string{"hostile": {"consume"}, "hostile-sub": {"submit"}},
			Pools:      map[string][]string{"hostile-items": host.PoolRoles()},
			HTTP:       host.HTTP{Hosts: []string{site.Host()}, AllowPrivate: true},
			MaxPayload: hostileMaxPayload,
			// Room for the guest to build a request over abi.MaxRequest (4 MiB).
			MemoryLimitPages: 1024,
		}},
		MaxAttempts:  1, // a failed task would park, not hide behind a retry
		PollInterval: 5 * time.Millisecond,
		Observe:      ev.Observe,
	}
	isolate(t, kind, &cfg)
	h, stop := startHost(t, cfg)

	cases := hostileCases(site.URL())
	for _, c := range cases {
		for _, p := range []map[string]any{
			{"case": c.name, "op": strings.SplitN(c.name, "/", 2)[0], "req": c.req, "pad": c.pad},
			{"case": "probe-after/" + c.name},
		} {
			payload, _ := json.Marshal(p)
			if _, err := h.Submit(context.Background(), "hostile", payload); err != nil {
				t.Fatalf("Submit(%s) = %v", payload, err)
			}
		}
	}
	tasks := 2 * len(cases)
	waitFor(t, "every hostile task handled", func() bool { return len(ev.Finished("hostile")) >= tasks })
	stop()

	if got := ev.Outcomes("hostile"); got["done"] != tasks || len(got) != 1 {
		t.Errorf("outcomes = %v, want %d done and nothing else", got, tasks)
	}
	if s := testutil.QueueStats(t, backend, "hostile"); s != (primitives.QueueStats{}) {
		t.Errorf("queue stats = %+v, want all zero", s)
	}
	read := func(key string) (hostileRecord, bool) {
		v, ok, err := backend.KVGet(context.Background(), "hostile:results", key)
		if err != nil || !ok {
			t.Errorf("no record of %s: %v, %v", key, ok, err)
			return hostileRecord{}, false
		}
		var r hostileRecord
		if err := json.Unmarshal(v, &r); err != nil {
			t.Errorf("record of %s = %s: %v", key, v, err)
			return hostileRecord{}, false
		}
		return r, true
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := read(c.name)
			if !ok {
				return
			}
			t.Logf("%s: kind %q %s %.120s", c.name, got.Kind, got.Message, got.OK)
			if got.Fault != "" {
				t.Errorf("%s: the call answered %s, want an envelope", c.name, got.Fault)
			}
			if got.Kind != c.kind {
				t.Errorf("%s = kind %q (%s), want %q", c.name, got.Kind, got.Message, c.kind)
			} else if c.kind != "" && got.Message == "" {
				t.Errorf("%s = kind %q with no message, want one that says what was wrong", c.name, got.Kind)
			}
			if c.kind == "" && len(got.OK) == 0 {
				t.Errorf("%s answered neither a result nor an error", c.name)
			}
			// A refused host names the grant that would admit it, for this plugin.
			if want := `add "http_hosts": ["example.com"] to "hostile" in the grants file`; c.name == "http/denied" && !strings.HasSuffix(got.Message, want) {
				t.Errorf("%s = %q, want it to end %s", c.name, got.Message, want)
			}
			// The instance is the same one throughout: its own task count never restarts.
			if want := 2*i + 1; got.Seq != want {
				t.Errorf("%s ran as the instance's task %d, want %d (was the instance replaced?)", c.name, got.Seq, want)
			}
			probe, ok := read("probe-after/" + c.name)
			if ok && probe.Seq != 2*i+2 {
				t.Errorf("the probe after %s ran as the instance's task %d, want %d", c.name, probe.Seq, 2*i+2)
			}
		})
	}
}
