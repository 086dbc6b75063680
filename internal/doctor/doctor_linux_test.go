package doctor

// The isolation check's probes are Linux's (internal/confine).

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/daemon"
)

// TestIsolationAllowed: a worker that starts and does not confine itself fails the
// check, which names what its probe could still do.
func TestIsolationAllowed(t *testing.T) {
	var out strings.Builder
	c := &checks{out: &out, ok: true}
	c.isolation(context.Background(), daemon.Options{Host: host.Config{Isolate: host.IsolateProcess, WorkerCommand: []string{os.Args[0], unconfinedArg}}}, nil)
	for _, want := range []string{"FAIL  isolation: workers confined by start ", "; a worker may still: socket(AF_INET); socket(AF_UNIX); "} {
		if !strings.Contains(out.String(), want) || c.ok {
			t.Errorf("isolation of an unconfined worker wrote %q, ok %v; want %q in a FAIL line", out.String(), c.ok, want)
		}
	}
}
