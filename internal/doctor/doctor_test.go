package doctor

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/daemon"
	"github.com/fleethost/fleet/internal/grants"
)

// unconfinedArg makes the test binary a worker process that serves the daemon
// (host.ServeWorker) without confining itself.
const unconfinedArg = "doctor-test-unconfined-worker"

func TestMain(m *testing.M) {
	if len(os.Args) == 2 && os.Args[1] == unconfinedArg {
		if err := host.ServeWorker(context.Background(), os.NewFile(3, "worker"), slog.New(slog.DiscardHandler), nil); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestSummary: doctor's line of a plugin is the daemon's log attributes of it
// (daemon.ContractAttrs), read as one line.
func TestSummary(t *testing.T) {
	for _, tt := range []struct {
		d    abi.Describe
		want string
	}{
		{abi.Describe{Type: "t", Version: "1.0.0", Mode: abi.ModeLoop}, "t 1.0.0, loop"},
		{abi.Describe{Type: "s", Version: "2.1.0", Mode: abi.ModeBatch,
			Consumes: &abi.QueueContract{Name: "scrape"},
			Pools:    []abi.PoolContract{{Name: "cookies"}, {Name: "proxies"}},
			Submits:  []abi.QueueContract{{Name: "found"}}},
			"s 2.1.0, batch, consumes scrape, pools cookies,proxies, submits found"},
	} {
		if got := summary(&tt.d); got != tt.want {
			t.Errorf("summary(%s) = %q, want %q", tt.d.Type, got, tt.want)
		}
	}
}

// TestIsolation: the isolation check is skipped when no plugin runs in a worker, and
// fails, naming what asks for the worker and the command, when the worker cannot start.
func TestIsolation(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-fleet-host")
	isolated := grants.File{"scraper": {Grant: host.Grant{Isolate: host.IsolateProcess}}}
	tests := []struct {
		name    string
		isolate string
		gf      grants.File
		want    string
		ok      bool
	}{
		{"nothing isolates", "", grants.File{"scraper": {}}, `skip  isolation: no --isolate process and no grant's "isolate": "process"`, true},
		{"the flag", host.IsolateProcess, nil, "FAIL  isolation: a worker process, as --isolate process asks for, does not start confined: worker: start " + missing, false},
		{"a bad flag", "thread", nil, `FAIL  isolation: --isolate is "thread", want "none" or "process"`, false},
		{"a grant", "", isolated, `FAIL  isolation: a worker process, as grant scraper's "isolate": "process" asks for, does not start confined: worker: start ` + missing, false},
	}
	for _, tt := range tests {
		var out strings.Builder
		c := &checks{out: &out, ok: true}
		c.isolation(context.Background(), daemon.Options{Host: host.Config{Isolate: tt.isolate, WorkerCommand: []string{missing, "worker"}}}, tt.gf)
		if !strings.HasPrefix(out.String(), tt.want) || c.ok != tt.ok {
			t.Errorf("%s: isolation wrote %q, ok %v; want a line starting %q, ok %v", tt.name, out.String(), c.ok, tt.want, tt.ok)
		}
	}
}
