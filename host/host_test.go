package host_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
)

// TestPlugins: what an operator sees of a loaded plugin.
func TestPlugins(t *testing.T) {
	r := newRig(t)
	d := batchDescribe("lister", "lister-q", anyObject)
	d.Pools = []abi.PoolContract{{Name: "things", Payload: json.RawMessage(`{}`), Tags: json.RawMessage(`{}`)}}
	d.Submits = []abi.QueueContract{{Name: "elsewhere", Payload: json.RawMessage(`{}`)}}
	file := r.wat("done", "lister", d)
	r.cfg.SlotsByType = map[string]int{"lister": 3}
	r.cfg.Grants = map[string]host.Grant{"lister": {KV: []string{"shared:*"}, CallTimeout: time.Second,
		Pools:  map[string][]string{"things": {"mark_bad", "list"}, "unused": {"put"}},
		Queues: map[string][]string{"lister-q": {"submit", "consume"}, "elsewhere": {"submit"}}}}
	r.cfg.PluginsDir = r.dir
	h, err := host.New(context.Background(), r.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	b, _ := os.ReadFile(file)
	sum := sha256.Sum256(b)
	ps := h.Plugins()
	if len(ps) != 1 {
		t.Fatalf("Plugins() = %+v, want 1", ps)
	}
	p := ps[0]
	if p.Type != "lister" || p.Version != "0.1.0" || p.Mode != "batch" || p.Slots != 3 ||
		p.Digest != "sha256:"+hex.EncodeToString(sum[:]) || p.Consumes.Name != "lister-q" ||
		len(p.Pools) != 1 || len(p.Submits) != 1 {
		t.Errorf("Plugins()[0] = %+v", p)
	}
	g := p.Grant
	if strings.Join(g.KV, ",") != "shared:*" || strings.Join(g.Locks, ",") != "lister:*" || strings.Join(g.Counters, ",") != "lister:*" ||
		g.CallTimeout != time.Second || g.MemoryLimitPages != 256 || g.MaxPayload != 256<<10 || len(g.HTTP.Hosts) != 0 {
		t.Errorf("effective grant = %+v", g)
	}
	// Pools and queues: what it declares, with the roles granted in a fixed order; a
	// queue role it does not ask for (submit on the queue it consumes) and a pool it does
	// not declare are left out, and the latter is logged.
	wantPools := map[string][]string{"things": {"list", "mark_bad"}}
	wantQueues := map[string][]string{"lister-q": {"consume"}, "elsewhere": {"submit"}}
	if !reflect.DeepEqual(g.Pools, wantPools) || !reflect.DeepEqual(g.Queues, wantQueues) {
		t.Errorf("effective pools, queues = %v, %v; want %v, %v", g.Pools, g.Queues, wantPools, wantQueues)
	}
	if !strings.Contains(r.logs.String(), `undeclared="pools \"unused\""`) {
		t.Errorf("a grant of an undeclared pool was not logged; logs:\n%s", r.logs)
	}
	if g.MaxHostCalls != 1000 || g.MaxReply != 8<<20 || g.MaxPoolList != 1000 {
		t.Errorf("effective caps = %d host calls, %d reply bytes, %d pool_list items; want the defaults 1000, 8 MiB, 1000",
			g.MaxHostCalls, g.MaxReply, g.MaxPoolList)
	}
}

// TestCompilationCacheOnDisk: compiled code lands in CacheDir.
func TestCompilationCacheOnDisk(t *testing.T) {
	r := newRig(t)
	r.wat("done", "cached", batchDescribe("cached", "cached-q", anyObject))
	r.cfg.CacheDir = t.TempDir()
	r.cfg.PluginsDir = r.dir
	h, err := host.New(context.Background(), r.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	n := 0
	entries, _ := os.ReadDir(r.cfg.CacheDir)
	for _, e := range entries {
		if e.IsDir() {
			sub, _ := os.ReadDir(r.cfg.CacheDir + "/" + e.Name())
			n += len(sub)
		}
	}
	if n == 0 {
		t.Errorf("CacheDir %s holds no compiled module", r.cfg.CacheDir)
	}
}

// TestContractConflict: a plugin whose queue or pool schema disagrees with one already
// registered is refused, naming the contract, the schema and where they differ.
func TestContractConflict(t *testing.T) {
	tests := []struct {
		name string
		a, b abi.Describe
		want []string
	}{
		{
			"queue",
			batchDescribe("a", "jobs", `{"type":"object","properties":{"site":{"type":"string"}}}`),
			batchDescribe("b", "jobs", `{"type":"object","properties":{"site":{"type":"integer"}}}`),
			[]string{`plugin "b"`, `queue "jobs"`, "payload schema", `plugin "a"`, "/properties/site/type", `"integer" here`, `"string" there`},
		},
		{
			"pool tags",
			func() abi.Describe {
				d := batchDescribe("a", "qa", anyObject)
				d.Pools = []abi.PoolContract{{Name: "cookies", Payload: json.RawMessage(`{}`), Tags: json.RawMessage(`{"properties":{"fresh":{"type":"boolean"}}}`)}}
				return d
			}(),
			func() abi.Describe {
				d := batchDescribe("b", "qb", anyObject)
				d.Pools = []abi.PoolContract{{Name: "cookies", Payload: json.RawMessage(`{}`), Tags: json.RawMessage(`{"properties":{"fresh":{"type":"boolean"},"site":{"type":"string"}}}`)}}
				return d
			}(),
			[]string{`pool "cookies"`, "tags schema", "/properties/site", "absent there"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t)
			r.wat("done", "1a", tt.a)
			r.wat("done", "2b", tt.b)
			r.cfg.PluginsDir = r.dir
			_, err := host.New(context.Background(), r.cfg)
			if err == nil {
				t.Fatal("host.New loaded conflicting plugins")
			}
			wantRefusal(t, err, tt.want...)
		})
	}
}

// TestFleetContractConflict: two hosts on one backend, each loading one side of a
// disagreement: the second is refused by the contract the first recorded.
func TestFleetContractConflict(t *testing.T) {
	r := newRig(t)
	dirA, dirB := t.TempDir(), t.TempDir()
	watPlugin(t, dirA, "done", "a", batchDescribe("a", "shared-q", `{"type":"object","required":["x"]}`))
	watPlugin(t, dirB, "done", "b", batchDescribe("b", "shared-q", `{"type":"object","required":["y"]}`))
	cfg := r.cfg
	cfg.Grants = map[string]host.Grant{"a": consumer("shared-q"), "b": consumer("shared-q")}
	cfg.PluginsDir = dirA
	ha, err := host.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ha.Close()
	// A third host with the same contract as the first loads fine.
	hc, err := host.New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("host.New(same contract) = %v", err)
	}
	hc.Close()
	cfg.PluginsDir = dirB
	_, err = host.New(context.Background(), cfg)
	if err == nil {
		t.Fatal("the second host loaded a plugin that disagrees with the fleet")
	}
	wantRefusal(t, err, `queue "shared-q"`, "the fleet", "required-property-added", "/properties/y")
}

// TestConfigValidated: a plugin's configuration is checked against its schema at load.
func TestConfigValidated(t *testing.T) {
	d := batchDescribe("cfg", "cfg-q", anyObject)
	d.ConfigSchema = json.RawMessage(`{"type":"object","properties":{"site":{"type":"string"}},"required":["site"],"additionalProperties":false}`)
	tests := []struct {
		name   string
		config string
		want   string // "" loads
	}{
		{"ok", `{"site":"x"}`, ""},
		{"missing", ``, `Config.Configs["cfg"]`},
		{"wrong type", `{"site":1}`, `Config.Configs["cfg"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t)
			r.wat("done", "cfg", d)
			if tt.config != "" {
				r.cfg.Configs = map[string]json.RawMessage{"cfg": json.RawMessage(tt.config)}
			}
			r.cfg.PluginsDir = r.dir
			h, err := host.New(context.Background(), r.cfg)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				h.Close()
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("host.New = %v, want an error naming %s", err, tt.want)
			}
		})
	}
	// A plugin with no config schema takes no configuration.
	r := newRig(t)
	r.wat("done", "plain", batchDescribe("plain", "plain-q", anyObject))
	r.cfg.Configs = map[string]json.RawMessage{"plain": json.RawMessage(`{"a":1}`)}
	r.cfg.PluginsDir = r.dir
	if _, err := host.New(context.Background(), r.cfg); err == nil || !strings.Contains(err.Error(), "declares no config schema") {
		t.Fatalf("host.New = %v, want a refusal of the configuration", err)
	}
}

// TestConfigErrors: New names the Config field that is wrong.
func TestConfigErrors(t *testing.T) {
	r := newRig(t)
	tests := []struct {
		mod  func(*host.Config)
		want string
	}{
		{func(c *host.Config) { c.Backend = nil }, "Config.Backend"},
		{func(c *host.Config) { c.Slots = -1 }, "Config.Slots"},
		{func(c *host.Config) { c.Grants = map[string]host.Grant{"x": {KV: []string{"a*b"}}} }, `Config.Grants["x"]: kv`},
		{func(c *host.Config) { c.MaxPayload = 1 << 30 }, "Config.MaxPayload"},
		{func(c *host.Config) { c.Grants = map[string]host.Grant{"x": {MaxHostCalls: -1}} }, `Config.Grants["x"]: max_host_calls is -1`},
		{func(c *host.Config) { c.Grants = map[string]host.Grant{"x": {MaxReply: 1 << 31}} }, `Config.Grants["x"]: max_reply is 2147483648, want 0..1073741824`},
		{func(c *host.Config) { c.Grants = map[string]host.Grant{"x": {MaxPoolList: -5}} }, `Config.Grants["x"]: max_pool_list is -5`},
		{func(c *host.Config) { c.Grants = map[string]host.Grant{"x": {Isolate: "vm"}} }, `Config.Grants["x"]: isolate is "vm", want "none" or "process"`},
		{func(c *host.Config) { c.MaxQueueDepth = -1 }, "Config.MaxQueueDepth"},
		{func(c *host.Config) { c.TaskLease = host.MinTaskLease - time.Millisecond }, "Config.TaskLease is 999ms, want at least 1s"},
		{func(c *host.Config) { c.ParkedRetention = -time.Hour }, "Config.ParkedRetention is negative"},
		{func(c *host.Config) { c.Grants = map[string]host.Grant{"x": {ParkedRetention: -1}} }, `Config.Grants["x"]: parked_retention is negative`},
		{func(c *host.Config) { c.Grants = map[string]host.Grant{"x": {KVMaxBytes: -1}} }, `Config.Grants["x"]: kv_max_bytes is -1`},
		{func(c *host.Config) { c.Grants = map[string]host.Grant{"x": {RetryBackoffBase: -time.Second}} }, `Config.Grants["x"]: retry_backoff_base is -1s, want > 0`},
		{func(c *host.Config) { c.Grants = map[string]host.Grant{"x": {RetryBackoffFactor: 0.5}} }, `Config.Grants["x"]: retry_backoff_factor is 0.5, want 1..100`},
		{func(c *host.Config) { c.Grants = map[string]host.Grant{"x": {RetryBackoffMax: -1}} }, `Config.Grants["x"]: retry_backoff_max is -1ns, want > 0`},
		{func(c *host.Config) {
			c.Grants = map[string]host.Grant{"x": {RetryBackoffBase: time.Hour, RetryBackoffMax: time.Minute}}
		},
			`Config.Grants["x"]: retry_backoff_max is 1m0s, below retry_backoff_base, 1h0m0s`},
		// The grant's base against Config's max (the rig's 10ms).
		{func(c *host.Config) { c.Grants = map[string]host.Grant{"x": {RetryBackoffBase: 10 * time.Minute}} }, `retry_backoff_max is 10ms, below retry_backoff_base, 10m0s`},
		{func(c *host.Config) { c.Grants = map[string]host.Grant{"x": {HandBackAlert: -1}} }, `Config.Grants["x"]: hand_back_alert is -1`},
		{func(c *host.Config) { c.RetryBackoff = primitives.Backoff{Factor: 1000} }, "Config.RetryBackoff.Factor is 1000, want 1..100"},
		{func(c *host.Config) { c.PluginsDir = t.TempDir() }, "holds no .wasm"},
	}
	for _, tt := range tests {
		cfg := r.cfg
		cfg.PluginsDir = r.dir
		tt.mod(&cfg)
		if _, err := host.New(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("host.New = %v, want an error naming %s", err, tt.want)
		}
	}
}

// TestPauseResume: a paused type claims nothing and says it is paused; resumed, it works
// its queue.
func TestPauseResume(t *testing.T) {
	r := newRig(t)
	r.wat("done", "p", batchDescribe("p", "p-q", anyObject))
	h, stop := r.start()
	if err := h.Pause("p"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the slot to say paused", func() bool { return r.events.Count(slotstate.Paused) > 0 })
	if ps := h.Plugins(); !ps[0].Paused {
		t.Errorf("Plugins() after Pause = %+v, want it paused", ps[0])
	}
	for range 5 {
		if _, err := h.Submit(context.Background(), "p-q", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	if s := testutil.QueueStats(t, r.backend, "p-q"); s.Depth != 5 {
		t.Fatalf("a paused slot claimed: stats %+v", s)
	}
	if err := h.Resume("p"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the queue to be worked", func() bool { return len(r.events.Finished("")) == 5 })
	if ps := h.Plugins(); ps[0].Paused {
		t.Errorf("Plugins() after Resume = %+v, want it not paused", ps[0])
	}
	stop()
	if err := h.Pause("nope"); err == nil {
		t.Error("Pause(unknown type) = nil")
	}
}

// TestRunTwice: Run runs once.
func TestRunTwice(t *testing.T) {
	r := newRig(t)
	r.wat("done", "once", batchDescribe("once", "once-q", anyObject))
	h, stop := r.start()
	waitFor(t, "the slot to poll", func() bool { return r.events.Count("idle") > 0 })
	if err := h.Run(context.Background()); err == nil {
		t.Error("second Run = nil, want an error")
	}
	stop()
}
