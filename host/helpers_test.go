package host_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"text/template"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/primitives/memory"
	fleetredis "github.com/fleethost/fleet/primitives/redis"
)

// cacheDir is the wazero compilation cache shared by the tests, kept across runs next to
// testutil's build cache: compiling a Go guest under -race takes tens of seconds, and the
// cache is keyed by the module's content, the wazero version and the CPU.
var cacheDir = testutil.WazeroCacheDir()

func newLogger(t *testing.T) (*slog.Logger, *testutil.LogBuffer) {
	lb := &testutil.LogBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("host log:\n%s", lb)
		}
	})
	return slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug})), lb
}

// describeJSON is a describe document for a WAT guest.
func batchDescribe(typ, queue, schema string) abi.Describe {
	return abi.Describe{ABIVersion: abi.Version, Type: typ, Version: "0.1.0", Mode: abi.ModeBatch,
		Consumes: &abi.QueueContract{Name: queue, Payload: json.RawMessage(schema)}}
}

// watPlugin renders the WAT template testdata/<name>.wat with d as its describe
// document, compiles it, and copies the .wasm into dir as <file>.wasm.
func watPlugin(t *testing.T, dir, name, file string, d abi.Describe) string {
	t.Helper()
	return watPluginTB(t, dir, name, file, d)
}

func watPluginTB(t testing.TB, dir, name, file string, d abi.Describe) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("testdata", name+".wat"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := template.New(name).Funcs(template.FuncMap{}).Parse(string(src))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	data := watData{Describe: strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(string(doc)), DescribeLen: len(doc)}
	if len(doc) > 4096 {
		t.Fatalf("describe of %d bytes does not fit the template's 4 KiB", len(doc))
	}
	if err := tmpl.Execute(&out, data); err != nil {
		t.Fatal(err)
	}
	return copyPluginTB(t, testutil.WAT(t, out.String()), dir, file)
}

type watData struct {
	Describe    string
	DescribeLen int
}

// Packed is abi.Packed for templates.
func (watData) Packed(ptr, n uint32) uint64 { return abi.Packed(ptr, n) }

// wat is watPlugin into the rig's folder, with the plugin granted, explicitly, what d
// declares (see declared), added to what its type is granted already.
func (r *rig) wat(name, file string, d abi.Describe) string {
	r.t.Helper()
	g, add := r.cfg.Grants[d.Type], declared(d)
	for _, m := range []struct {
		into *map[string][]string
		from map[string][]string
	}{{&g.Pools, add.Pools}, {&g.Queues, add.Queues}} {
		if *m.into == nil {
			*m.into = map[string][]string{}
		}
		for name, roles := range m.from {
			(*m.into)[name] = append((*m.into)[name], roles...)
		}
	}
	r.grant(d.Type, g)
	return watPlugin(r.t, r.dir, name, file, d)
}

// grant sets the rig's grant of typ.
func (r *rig) grant(typ string, g host.Grant) {
	if r.cfg.Grants == nil {
		r.cfg.Grants = map[string]host.Grant{}
	}
	r.cfg.Grants[typ] = g
}

// declared is the grant that gives a plugin described by d what it declares: consume on
// the queue it consumes, submit on each it submits to, every role on each pool. The
// tests that use it are about something other than grants; grant_test.go tests those.
func declared(d abi.Describe) host.Grant {
	g := host.Grant{Pools: map[string][]string{}, Queues: map[string][]string{}}
	if d.Consumes != nil {
		g.Queues[d.Consumes.Name] = []string{"consume"}
	}
	for _, q := range d.Submits {
		g.Queues[q.Name] = append(g.Queues[q.Name], "submit")
	}
	for _, p := range d.Pools {
		g.Pools[p.Name] = host.PoolRoles()
	}
	return g
}

// consumer is the grant of a plugin that consumes queue and uses nothing else.
func consumer(queue string) host.Grant {
	return host.Grant{Queues: map[string][]string{queue: {"consume"}}}
}

// goGuest builds testdata/goguest and copies it into dir as <file>.wasm.
func goGuest(t *testing.T, dir, file string) string {
	t.Helper()
	return goPlugin(t, "host/testdata/goguest", dir, file)
}

// goGuest is goGuest into the rig's folder as goguest.wasm, granted its queue.
func (r *rig) goGuest() string {
	r.t.Helper()
	r.grant("goguest", consumer("goguest-jobs"))
	return goGuest(r.t, r.dir, "goguest")
}

// goPlugin builds the Go guest in pkg (module-relative) and copies it into dir as
// <file>.wasm.
func goPlugin(t *testing.T, pkg, dir, file string) string {
	t.Helper()
	return copyPlugin(t, testutil.BuildPlugin(t, pkg), dir, file)
}

func copyPlugin(t *testing.T, wasm, dir, file string) string {
	t.Helper()
	return copyPluginTB(t, wasm, dir, file)
}

func buildTB(tb testing.TB, pkg string) string {
	tb.Helper()
	return testutil.BuildPlugin(tb, pkg)
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func copyPluginTB(t testing.TB, wasm, dir, file string) string {
	t.Helper()
	b, err := os.ReadFile(wasm)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, file+".wasm")
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

// wantRefusal logs err, host.New's refusal, and checks that it mentions each of want.
func wantRefusal(t *testing.T, err error, want ...string) {
	t.Helper()
	t.Logf("refused: %v", err)
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("host.New = %q, want it to mention %q", err, w)
		}
	}
}

// rig is a host under test with its backend, its plugins folder and its events.
type rig struct {
	t       *testing.T
	dir     string
	backend primitives.Backend
	cfg     host.Config
	events  *testutil.SlotEvents
	logs    *testutil.LogBuffer
	redis   *testutil.Redis // nil on the memory backend
}

// newRig is a rig on the memory backend.
func newRig(t *testing.T) *rig {
	testutil.CheckGoroutines(t)
	b := memory.New(memory.Options{})
	t.Cleanup(func() { b.Close() })
	return rigOn(t, b)
}

// newRedisRig is a rig on the Redis backend, with a redis-server of its own.
func newRedisRig(t *testing.T) *rig {
	testutil.CheckGoroutines(t)
	srv := testutil.NewRedis(t)
	b, err := fleetredis.Open(srv.URL(), fleetredis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	r := rigOn(t, b)
	r.redis = srv
	return r
}

func rigOn(t *testing.T, b primitives.Backend) *rig {
	log, lb := newLogger(t)
	ev := &testutil.SlotEvents{}
	r := &rig{t: t, dir: t.TempDir(), backend: b, events: ev, logs: lb}
	r.cfg = host.Config{
		Backend:      b,
		CacheDir:     cacheDir,
		Logger:       log,
		PollInterval: 10 * time.Millisecond,
		RetryDelay:   time.Millisecond,
		// A failed task comes back within milliseconds: the tests that park by failing
		// wait out the backoff of each attempt.
		RetryBackoff: primitives.Backoff{Base: time.Millisecond, Factor: 2, Max: 10 * time.Millisecond},
		Observe:      ev.Observe,
	}
	return r
}

// start makes the host and runs it; the returned stop drains it and waits for Run.
func (r *rig) start() (*host.Host, func()) {
	r.t.Helper()
	h := r.build()
	return h, r.run(h)
}

// build makes the host on the rig's folder, without running it.
func (r *rig) build() *host.Host {
	r.t.Helper()
	r.cfg.PluginsDir = r.dir
	h, err := host.New(context.Background(), r.cfg)
	if err != nil {
		r.t.Fatalf("host.New: %v", err)
	}
	return h
}

// run runs h; the returned stop drains it, waits for Run and closes h.
func (r *rig) run(h *host.Host) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				r.t.Errorf("Run = %v", err)
			}
			if err := h.Close(); err != nil {
				r.t.Errorf("Close = %v", err)
			}
		})
	}
	r.t.Cleanup(stop)
	return stop
}

// waitFor polls cond until it holds, failing the test after a generous bound; it asserts
// that something happens, not how fast.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, 60*time.Second, what, cond)
}

func push(t *testing.T, b primitives.Backend, queue, payload string) string {
	t.Helper()
	id, _, err := b.QueuePush(context.Background(), queue, []byte(payload), primitives.QueuePushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func newHost(cfg host.Config) (*host.Host, error) {
	return host.New(context.Background(), cfg)
}
