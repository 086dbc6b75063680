package slotstate

import (
	"testing"

	"github.com/fleethost/fleet/reporter"
)

// TestPlane: every state maps to one of the plane's four words; a paused slot and a
// draining one both say draining, the plane's word for alive but not taking work.
func TestPlane(t *testing.T) {
	want := map[State]string{
		Starting: reporter.StateIdle,
		Idle:     reporter.StateIdle,
		Working:  reporter.StateIteration,
		Paused:   reporter.StateDraining,
		Draining: reporter.StateDraining,
		Stopped:  reporter.StateStopping,
		Finished: reporter.StateIdle,
	}
	for _, s := range append(States, Finished) {
		if got := s.Plane(); got != want[s] {
			t.Errorf("%s.Plane() = %q, want %q", s, got, want[s])
		}
	}
}

// TestPlanePhase: a paused slot says draining with phase paused, so that the plane tells
// it from a shutdown's drain, which says no phase.
func TestPlanePhase(t *testing.T) {
	for _, s := range append(States, Finished) {
		want := ""
		if s == Paused {
			want = PlanePhasePaused
		}
		if got := s.PlanePhase(); got != want {
			t.Errorf("%s.PlanePhase() = %q, want %q", s, got, want)
		}
	}
	if Paused.Plane() != reporter.StateDraining || Draining.Plane() != reporter.StateDraining {
		t.Errorf("paused and draining say %q and %q on the plane, want %q", Paused.Plane(), Draining.Plane(), reporter.StateDraining)
	}
}

// TestOutcomes: a park replaces retried, failed and cut for the host and keeps a death
// died; for the plane a park wins, a death included, and every other outcome maps to
// one of its words.
func TestOutcomes(t *testing.T) {
	tests := []struct {
		o      Outcome
		parked bool
		host   Outcome
		plane  string
	}{
		{Done, false, Done, reporter.OutcomeCheckpoint},
		{Retried, false, Retried, reporter.OutcomeReleased},
		{Failed, false, Failed, reporter.OutcomeReleased},
		{Cut, false, Cut, reporter.OutcomeReleased},
		{Failed, true, Parked, reporter.OutcomeParked},
		{Retried, true, Parked, reporter.OutcomeParked},
		{Died, false, Died, reporter.OutcomeDead},
		{Died, true, Died, reporter.OutcomeParked},
		{Parked, true, Parked, reporter.OutcomeParked},
	}
	covered := map[Outcome]bool{}
	for _, tt := range tests {
		covered[tt.o] = true
		host := tt.o.Settle(tt.parked)
		if host != tt.host || host.Plane(tt.parked) != tt.plane {
			t.Errorf("%s parked %v: host %s, plane %s; want %s, %s", tt.o, tt.parked, host, host.Plane(tt.parked), tt.host, tt.plane)
		}
	}
	for _, o := range Outcomes {
		if !covered[o] {
			t.Errorf("outcome %s has no case above", o)
		}
	}
}

// TestPhaseGuest: a guest export runs in handle and tick, not in the ack or release after.
func TestPhaseGuest(t *testing.T) {
	for p, want := range map[Phase]bool{Handle: true, Tick: true, Ack: false, Release: false} {
		if p.Guest() != want {
			t.Errorf("%s.Guest() = %v, want %v", p, !want, want)
		}
	}
}
