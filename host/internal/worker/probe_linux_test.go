package worker

// The tests of a worker's confinement, which is Linux's (internal/confine).

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/fleethost/fleet/internal/confine"
	"github.com/fleethost/fleet/internal/testutil"
)

// TestWorkerLogsLayers: the daemon's line of a worker's start names the layers the
// worker's own Apply set (no_new_privs, rlimits, seccomp) beside Prepare's, and the
// confined worker runs a guest's call.
func TestWorkerLogsLayers(t *testing.T) {
	logs := &testutil.LogBuffer{}
	rt, _, caller := newRuntimeOf(t, confinedArg, slog.New(slog.NewTextHandler(logs, nil)))
	ctx := context.Background()
	in, err := rt.Instantiate(ctx, "w/0", caller(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close(ctx)
	if _, err := in.Handle(ctx, []byte("n")); err != nil {
		t.Fatalf("Handle in a confined worker = %v", err)
	}
	line := ""
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `msg="host: worker process started"`) {
			line = l
		}
	}
	_, confined, _ := strings.Cut(line, ` confined="`)
	confined, _, _ = strings.Cut(confined, `"`)
	for _, want := range []string{"start", "no_new_privs", "rlimits", "seccomp"} {
		if !slices.Contains(strings.Fields(confined), want) {
			t.Errorf("the start's confined=%q lacks %s:\n%s", confined, want, line)
		}
	}
}

// TestProbeConfined: a worker confined as `fleet-host worker` is, probed, denies every
// check Probe makes, and its layers are Prepare's and its Apply's.
func TestProbeConfined(t *testing.T) {
	layers, rep := probe(t, confinedArg)
	t.Logf("layers:\n%sreport:\n%s", layers, rep)
	// Probe harms nothing it is let do, so this unconfined test may count its checks.
	if n := len(confine.Probe(os.Getpid())); len(rep) != n || len(rep.Allowed()) != 0 {
		t.Errorf("Probe = %d checks, allowed %v; want %d, all denied", len(rep), rep.Allowed(), n)
	}
	for _, want := range []string{"start", "no_new_privs", "rlimits", "seccomp"} {
		if !slices.Contains(layers.On(), want) {
			t.Errorf("Probe's layers on = %q, want %s among them", layers.On(), want)
		}
	}
}

// TestProbeUnconfined: a worker that does not confine itself is probed all the same,
// and its report lists what it may do; its layers are Prepare's alone.
func TestProbeUnconfined(t *testing.T) {
	layers, rep := probe(t, serveArg)
	allowed := []string{}
	for _, c := range rep.Allowed() {
		allowed = append(allowed, c.Name)
	}
	if !slices.Contains(allowed, "socket(AF_UNIX)") || !slices.Contains(allowed, "mmap writable and executable") {
		t.Errorf("an unconfined worker's allowed checks = %q, want socket(AF_UNIX) and mmap among them", allowed)
	}
	if layers.Seccomp != (confine.Layer{}) || layers.Start == (confine.Layer{}) {
		t.Errorf("an unconfined worker's layers = %+v, want Prepare's and no seccomp", layers)
	}
}

// probe probes a worker that is this test binary run with arg.
func probe(t *testing.T, arg string) (confine.Layers, confine.Report) {
	t.Helper()
	layers, rep, err := Probe(context.Background(), Params{Command: []string{os.Args[0], arg}, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return layers, rep
}
