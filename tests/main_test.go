// Package tests holds fleet-host's end-to-end tests: the example plugins and hostile
// guests built to wasm, run by real hosts on the memory backend and on a real Redis,
// against the loopback demo site; and the benchmarks of host calls against the same calls
// made natively.
//
// TestMain doubles as a host process: with FLEET_E2E_CHILD set, the test binary runs one
// host from the environment until SIGTERM (see runChild), so that a test can start
// several hosts as separate processes without depending on cmd/fleet-host.
package tests

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/primitives/memory"
	fleetredis "github.com/fleethost/fleet/primitives/redis"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	if len(os.Args) == 3 && os.Args[1] == faultWorkerArg {
		os.Exit(faultWorker(os.Args[2]))
	}
	os.Exit(m.Run())
}

// cacheDir is the wazero compilation cache shared by every test and child process, kept
// across runs next to testutil's build cache (the host tests use the same folder):
// compiling a Go guest under -race takes tens of seconds, and the cache is keyed by the
// module's content, the wazero version and the CPU.
var cacheDir = testutil.WazeroCacheDir()

// backendKind names the backends every end-to-end test runs on.
var backendKinds = []string{"memory", "redis"}

// sandboxKinds are the kinds the sandbox and hostile suites run on: the backends, and
// "process", the memory backend with every plugin in a worker process (Config.Isolate),
// on memory only: the worker's crossing is the same whatever answers the host calls.
var sandboxKinds = append(backendKinds, "process")

// newBackend returns a fresh backend of kind, closed (and its server stopped) when the
// test ends; srv is nil for memory.
func newBackend(tb testing.TB, kind string) (primitives.Backend, *testutil.Redis) {
	tb.Helper()
	switch kind {
	case "memory", "process":
		b := memory.New(memory.Options{})
		tb.Cleanup(func() { b.Close() })
		return b, nil
	case "redis":
		srv := testutil.NewRedis(tb)
		b, err := fleetredis.Open(srv.URL(), fleetredis.Options{})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { b.Close() })
		return b, srv
	}
	tb.Fatalf("no backend %q", kind)
	return nil, nil
}

// installPlugin builds the Go guest in pkg (module-relative) and copies it into dir as
// <name>.wasm, the way an operator drops plugins into a folder.
func installPlugin(tb testing.TB, pkg, dir, name string) {
	tb.Helper()
	copyWasm(tb, testutil.BuildPlugin(tb, pkg), dir, name)
}

// copyWasm copies the module at path into the plugins folder dir as name.wasm.
func copyWasm(tb testing.TB, path, dir, name string) {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".wasm"), b, 0o644); err != nil {
		tb.Fatal(err)
	}
}

// testLogger is a logger whose lines are shown only when the test fails.
func testLogger(t *testing.T) *slog.Logger {
	log, _ := testLogs(t)
	return log
}

// testLogs is testLogger with the buffer its lines go to, for a test to read.
func testLogs(t *testing.T) (*slog.Logger, *testutil.LogBuffer) {
	lb := &testutil.LogBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("host log:\n%s", lb)
		}
	})
	return slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelInfo})), lb
}

// startHost makes a host from cfg and runs it; stop drains it, waits for Run and closes
// it (also at cleanup).
func startHost(t *testing.T, cfg host.Config) (h *host.Host, stop func()) {
	t.Helper()
	h, err := host.New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("host.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run = %v", err)
			}
			if err := h.Close(); err != nil {
				t.Errorf("Close = %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return h, stop
}

// waitFor polls cond until it holds, failing the test after a generous bound: it asserts
// that something happens, never how fast.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, 2*time.Minute, what, cond)
}
