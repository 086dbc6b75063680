package plane

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/reporter/wire"
)

func newPlane(t *testing.T, now *time.Time) *Plane {
	t.Helper()
	p, err := New(NewMemory(), Config{Key: "k", StaleAfter: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	p.now = func() time.Time { return *now }
	return p
}

// A report that is not one is a BodyError (400) that names the field; {} is one, which
// is what reporter.Probe relies on.
func TestReportRefusesBodies(t *testing.T) {
	now := t0
	p := newPlane(t, &now)
	many := `{"instance": "i", "state": {"kind": "idle"}, "iterations": [` + strings.Repeat(`{"outcome": "dead"},`, MaxReportIterations) + `{"outcome": "dead"}]}`
	for _, tt := range []struct{ project, body, want string }{
		{"p", `{}`, "instance is required"},
		{"p", `{"instance": ""}`, "instance is required"},
		{"p", `{"instance": "i"}`, "state.kind is required"},
		{"p", `{"instance": "i", "state": {}}`, "state.kind is required"},
		{"p", `{"instance": "i", "state": {"kind": "napping"}}`, "state.kind"},
		{"p", `{"instance": "i", "state": {"kind": "idle"}, "iterations": [{"outcome": "meh"}]}`, "iterations[0].outcome"},
		{"p", `{"instance": "` + strings.Repeat("i", maxInstanceLen+1) + `", "state": {"kind": "idle"}}`, "instance is"},
		{"p", many, "iterations, limit"},
		{"p", `{"instance": "i", "state": {"kind": "idle"}, "iterations": [{"outcome": "checkpoint", "task_id": "` + strings.Repeat("t", maxFieldLen+1) + `"}]}`, "iterations[0]: a field is"},
		{"p", `{"instance": "i", "state": {"kind": "idle"}, "iterations": [{"outcome": "checkpoint", "sessions": [{"model": "` + strings.Repeat("m", maxFieldLen+1) + `"}]}]}`, "iterations[0]: a field is"},
		{"p", `[1]`, "not a report"},
		{"a/b", `{"instance": "i", "state": {"kind": "idle"}}`, "project"},
	} {
		err := p.Report(context.Background(), tt.project, []byte(tt.body))
		var be *BodyError
		if !errors.As(err, &be) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Report(%s, %.60s) = %v, want a BodyError naming %q", tt.project, tt.body, err, tt.want)
		}
	}
	if rows, _ := p.Instances(context.Background(), 10); len(rows) != 0 {
		t.Errorf("refused reports stored rows: %+v", rows)
	}
}

// An instance is stale once its last report is older than StaleAfter, and live again
// at its next report.
func TestInstancesMarkStale(t *testing.T) {
	now := t0
	p := newPlane(t, &now)
	body := []byte(`{"instance": "a/w/0", "host": "h", "version": "v", "config_identity": "", "state": {"kind": "idle", "n": 0, "task_ref": "", "phase": ""}, "iterations": []}`)
	stale := func() bool {
		t.Helper()
		rows, err := p.Instances(context.Background(), 0)
		if err != nil || len(rows) != 1 {
			t.Fatalf("Instances = %+v, %v; want one row", rows, err)
		}
		return rows[0].Stale
	}
	if err := p.Report(context.Background(), "p", body); err != nil {
		t.Fatal(err)
	}
	if now = t0.Add(time.Minute); stale() {
		t.Error("stale at exactly StaleAfter, want live")
	}
	if now = t0.Add(time.Minute + time.Millisecond); !stale() {
		t.Error("live past StaleAfter, want stale")
	}
	if err := p.Report(context.Background(), "p", body); err != nil || stale() {
		t.Errorf("after a new report: err %v, stale %v; want live", err, stale())
	}
}

// TestConfigCheck: New refuses each bad field naming it as a Go caller wrote it, and
// Check names it as its name says (a command line's flag).
func TestConfigCheck(t *testing.T) {
	for _, tt := range []struct {
		c     Config
		field string
	}{
		{Config{}, "Key"}, {Config{Key: "k", Retention: -1}, "Retention"}, {Config{Key: "k", MaxInstances: -1}, "MaxInstances"},
		{Config{Key: "k", MaxIterations: -1}, "MaxIterations"}, {Config{Key: "k", StaleAfter: -1}, "StaleAfter"},
	} {
		if _, err := New(NewMemory(), tt.c); err == nil || !strings.Contains(err.Error(), "Config."+tt.field+" is") {
			t.Errorf("New(%+v) = %v, want an error naming Config.%s", tt.c, err, tt.field)
		}
		if err := tt.c.Check(func(f string) string { return "<" + f + ">" }); err == nil || !strings.Contains(err.Error(), "<"+tt.field+"> is") {
			t.Errorf("Check(%+v) = %v, want an error naming <%s>", tt.c, err, tt.field)
		}
	}
}

// TestReportAcceptsTheHostsWords: every state and outcome a host says to the plane
// (slotstate's Plane words, the reporter's constants) is one the plane accepts, so that
// the receiving half and the sending half speak one vocabulary.
func TestReportAcceptsTheHostsWords(t *testing.T) {
	now := t0
	p := newPlane(t, &now)
	for _, s := range append(slotstate.States, slotstate.Finished) {
		for _, o := range slotstate.Outcomes {
			for _, parked := range []bool{false, true} {
				body, _ := json.Marshal(wire.Report{
					Instance:   "d/w/0",
					State:      wire.State{Kind: s.Plane(), Phase: s.PlanePhase()},
					Iterations: []wire.Iteration{{TaskID: "t", Outcome: o.Plane(parked)}},
				})
				if err := p.Report(context.Background(), "p", body); err != nil {
					t.Errorf("Report(state %s, outcome %s, parked %v) = %v, want it stored", s, o, parked, err)
				}
			}
		}
	}
}
