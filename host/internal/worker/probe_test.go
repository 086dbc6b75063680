package worker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/fleethost/fleet/internal/confine"
	"github.com/fleethost/fleet/internal/testutil"
)

// TestWorkerLogsLayers: the daemon's line of a worker's start names the layers the
// worker's own Apply set (no_new_privs, rlimits, seccomp) beside Prepare's, and the
// confined worker runs a guest's call.
func TestWorkerLogsLayers(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("confinement is Linux's")
	}
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
	if runtime.GOOS != "linux" {
		t.Skip("confinement is Linux's")
	}
	layers, rep, err := Probe(context.Background(), Params{Command: []string{os.Args[0], confinedArg}, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
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
	if runtime.GOOS != "linux" {
		t.Skip("the checks are Linux's")
	}
	layers, rep, err := Probe(context.Background(), Params{Command: []string{os.Args[0], serveArg}, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
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

// TestProbeFails: a worker that exits at start, or cannot confine itself, fails the
// probe, saying how.
func TestProbeFails(t *testing.T) {
	for _, tt := range []struct{ arg, want string }{
		{exitArg, "exit status 3"},
		{unconfinableArg, "confine: the test's worker cannot"},
	} {
		_, _, err := Probe(context.Background(), Params{Command: []string{os.Args[0], tt.arg}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Probe(%s) = %v, want an error with %q", tt.arg, err, tt.want)
		}
	}
}

// TestRouteConfinement: the worker's first frame on its own socket is its layers, at
// most maxLayers of JSON, once; an answer before them breaks the protocol, except the
// error of a worker that could not confine itself.
func TestRouteConfinement(t *testing.T) {
	layers := []byte(`{"Seccomp":{"Active":true,"Note":"filter"}}`)
	tests := []struct {
		name   string
		frames []frame
		ok     bool
	}{
		{"layers, then the answer", []frame{{kind: kConfined, payload: layers}, {kind: kCompiled, payload: []byte{1}}}, true},
		{"the error of an unconfined worker", []frame{{kind: kError, payload: []byte("confine: no")}}, true},
		{"an answer first", []frame{{kind: kCompiled, payload: []byte{1}}}, false},
		{"layers twice", []frame{{kind: kConfined, payload: layers}, {kind: kConfined, payload: layers}}, false},
		{"layers over the cap", []frame{{kind: kConfined, payload: []byte(`{"Seccomp":{"Note":"` + strings.Repeat("x", maxLayers) + `"}}`)}}, false},
		{"layers that are no JSON", []frame{{kind: kConfined, payload: []byte("{")}}, false},
		{"two answers", []frame{{kind: kConfined, payload: layers}, {kind: kCompiled}, {kind: kProbed}}, false},
	}
	for _, tt := range tests {
		p := &process{answers: make(chan frame, 1)}
		var err error
		for _, f := range tt.frames {
			if err = p.route(f); err != nil {
				break
			}
		}
		if ok := err == nil; ok != tt.ok || (err != nil && !errors.Is(err, errProtocol)) {
			t.Errorf("%s: route = %v, want ok %v (else errProtocol)", tt.name, err, tt.ok)
		}
		if tt.ok && tt.frames[0].kind == kConfined && p.confinement().Seccomp.Note != "filter" {
			t.Errorf("%s: confinement = %+v, want the worker's seccomp", tt.name, p.confinement())
		}
	}
}

// TestReportWire: a report crosses as it is, each error its errno, and a report cut
// short or over maxChecks checks breaks the protocol.
func TestReportWire(t *testing.T) {
	rep := confine.Report{{Name: "socket(AF_INET)", Err: syscall.EPERM}, {Name: "open /etc/hostname", Err: syscall.EACCES}, {Name: "kill(1, 0)"}}
	got, err := decodeReport(encodeReport(rep))
	if err != nil || got.String() != rep.String() || len(got.Allowed()) != 1 {
		t.Errorf("decodeReport(encodeReport(r)) = %q, %v; want %q", got, err, rep)
	}
	b := encodeReport(rep)
	if _, err := decodeReport(b[:len(b)-1]); !errors.Is(err, errProtocol) {
		t.Errorf("decodeReport of a report cut short = %v, want errProtocol", err)
	}
	if _, err := decodeReport(encodeReport(make(confine.Report, maxChecks+1))); !errors.Is(err, errProtocol) {
		t.Errorf("decodeReport of %d checks = %v, want errProtocol", maxChecks+1, err)
	}
}
