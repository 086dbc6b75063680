package worker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/fleethost/fleet/internal/confine"
)

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
