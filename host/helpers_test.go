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

// goGuest builds testdata/goguest and copies it into dir as <file>.wasm.
func goGuest(t *testing.T, dir, file string) string {
	t.Helper()
	return goPlugin(t, "host/testdata/goguest", dir, file)
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

// events records what slots report.
type events struct {
	mu  sync.Mutex
	all []host.SlotEvent
}

func (e *events) observe(ev host.SlotEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, ev)
}

// finished returns the finished iterations so far.
func (e *events) finished() []host.SlotEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []host.SlotEvent
	for _, ev := range e.all {
		if ev.Kind == "finished" {
			out = append(out, ev)
		}
	}
	return out
}

func (e *events) count(kind string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ev := range e.all {
		if ev.Kind == kind {
			n++
		}
	}
	return n
}

func (e *events) outcomes() map[string]int {
	out := map[string]int{}
	for _, ev := range e.finished() {
		out[ev.Outcome]++
	}
	return out
}

// rig is a host under test with its backend, its plugins folder and its events.
type rig struct {
	t       *testing.T
	dir     string
	backend primitives.Backend
	cfg     host.Config
	events  *events
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
	ev := &events{}
	r := &rig{t: t, dir: t.TempDir(), backend: b, events: ev, logs: lb}
	r.cfg = host.Config{
		Backend:      b,
		CacheDir:     cacheDir,
		Logger:       log,
		PollInterval: 10 * time.Millisecond,
		RetryDelay:   time.Millisecond,
		Observe:      ev.observe,
	}
	return r
}

// start makes the host and runs it; the returned stop drains it and waits for Run.
func (r *rig) start() (*host.Host, func()) {
	r.t.Helper()
	r.cfg.PluginsDir = r.dir
	h, err := host.New(context.Background(), r.cfg)
	if err != nil {
		r.t.Fatalf("host.New: %v", err)
	}
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
	return h, stop
}

// waitFor polls cond until it holds, failing the test after a generous bound; it asserts
// that something happens, not how fast.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, 60*time.Second, what, cond)
}

func push(t *testing.T, b primitives.Backend, queue, payload string) string {
	t.Helper()
	id, err := b.QueuePush(context.Background(), queue, []byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func newHost(cfg host.Config) (*host.Host, error) {
	return host.New(context.Background(), cfg)
}
