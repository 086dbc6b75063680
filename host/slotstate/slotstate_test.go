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

// TestOutcomes: a park replaces released for the host and keeps a death dead; for the
// plane a park wins, a death included.
func TestOutcomes(t *testing.T) {
	tests := []struct {
		o      Outcome
		parked bool
		host   Outcome
		plane  string
	}{
		{Checkpoint, false, Checkpoint, reporter.OutcomeCheckpoint},
		{Released, false, Released, reporter.OutcomeReleased},
		{Released, true, Parked, reporter.OutcomeParked},
		{Dead, false, Dead, reporter.OutcomeDead},
		{Dead, true, Dead, reporter.OutcomeParked},
	}
	for _, tt := range tests {
		host := tt.o.Settle(tt.parked)
		if host != tt.host || host.Plane(tt.parked) != tt.plane {
			t.Errorf("%s parked %v: host %s, plane %s; want %s, %s", tt.o, tt.parked, host, host.Plane(tt.parked), tt.host, tt.plane)
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
