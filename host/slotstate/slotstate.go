// Package slotstate is the one vocabulary of a slot's life: the event a slot says each
// step of its life with (Event, and Iteration for one that ended), the states a slot is
// in, as its events say them and as the operator sees them (fleet-host inspect, the HTTP
// API, the fleet_slots metric), the phases of an iteration, the outcomes it ends with and
// why an instance died, and their mapping to the plane's words (package reporter's, the
// plane's own).
package slotstate

import "github.com/fleethost/fleet/reporter"

// State is what a slot is doing. A slot event says the state the slot enters
// (Event.Kind); Starting is said by no event, Finished by no lasting state.
type State string

const (
	Starting State = "starting" // no event yet: making its first instance
	Idle     State = "idle"     // polling its queue (or waiting between ticks), holding nothing
	Working  State = "working"  // in an iteration: a guest call, an ack or a release
	Paused   State = "paused"   // its plugin is paused: not claiming until resumed
	Draining State = "draining" // the host is shutting down: not claiming
	Stopped  State = "stopped"  // its loop has returned; the last event of a slot
	// Finished is the event of an iteration that ended (its Iteration is set); the slot
	// then goes on to claim, idle until it says otherwise.
	Finished State = "finished"
)

// States lists the states a slot stays in, in a stable order: the fleet_slots series.
var States = []State{Starting, Idle, Working, Paused, Draining, Stopped}

// Plane is the plane's word for s, one of its four presence states: a slot that holds
// nothing is idle, a working one is in an iteration, a paused or draining one is
// draining (the plane's word for alive but not taking work; PlanePhase tells a paused
// one), and a stopped one says stopping, its last beacon.
func (s State) Plane() string {
	switch s {
	case Working:
		return reporter.StateIteration
	case Paused, Draining:
		return reporter.StateDraining
	case Stopped:
		return reporter.StateStopping
	default: // Starting, Idle, Finished
		return reporter.StateIdle
	}
}

// PlanePhasePaused is the phase a paused slot reports with the plane's word draining.
const PlanePhasePaused = "paused"

// PlanePhase is the phase the plane hears with Plane's word for s, where the word alone
// would mislead: the plane's four words are fixed (reporter.State*), and draining is
// both a paused slot (alive, not taking work until resumed) and one whose host shuts
// down; the wire's state.phase, free text that no plane checks against the kind, tells
// them apart. So:
//
//	slot state   state.kind   state.phase
//	paused       draining     paused
//	draining     draining     ""
//	working      iteration    the guest export (fleet_handle, fleet_tick; telemetry sets it)
//	otherwise    Plane(s)     ""
//
// Whether the pause is the fleet's or this daemon's alone is the API's to say (host
// Plugin.Pauses), not the plane's: the slot is paused either way.
func (s State) PlanePhase() string {
	if s == Paused {
		return PlanePhasePaused
	}
	return ""
}

// Phase is the step of an iteration that a working slot is in.
type Phase string

const (
	Handle  Phase = "handle"  // fleet_handle runs on the task
	Tick    Phase = "tick"    // fleet_tick runs
	Ack     Phase = "ack"     // the task is acked: the guest said done
	Release Phase = "release" // the task goes back to its queue
)

// Guest reports whether a guest export runs in p: its call's latency, and what the plane
// hears as the iteration's phase.
func (p Phase) Guest() bool { return p == Handle || p == Tick }

// Outcome is how an iteration ended: the host's words for what the plugin or the host
// chose, which the slot's iterations, inspect, the API, the console and the
// fleet_iterations_total series say. The plane hears them in its own four words (Plane),
// translated there and nowhere else.
type Outcome string

const (
	Done    Outcome = "done"    // the task was acked (or the tick succeeded)
	Retried Outcome = "retried" // the plugin said retry: the task went back, its attempt refunded
	Failed  Outcome = "failed"  // the plugin said fail: the attempt is spent, the task waits out its backoff
	Parked  Outcome = "parked"  // the task's attempts are spent, or the plugin or its contract parked it
	Died    Outcome = "died"    // the instance died (trap, deadline, memory, lease, broken result): Death says why
	Cut     Outcome = "cut"     // the drain cut the call at its deadline: the task went back, its attempt refunded
)

// Outcomes lists every outcome, in a stable order: the fleet_iterations_total series.
var Outcomes = []Outcome{Done, Retried, Failed, Parked, Died, Cut}

// Settle is the host's outcome of an iteration that ended as o once its task's release
// parked it (parked): a park replaces retried, failed or cut, and a death stays died,
// since deaths drive the slot's backoff. The plane's is Plane's. See host/RATIONALE.md,
// "What is an iteration record?".
func (o Outcome) Settle(parked bool) Outcome {
	if parked && o != Died {
		return Parked
	}
	return o
}

// Plane is the plane's word for an iteration that ended as o, whose task's release parked
// it when parked: done is checkpoint; retried, failed and cut are released (the task went
// back to its queue); died is dead; and a park wins, a death included, because parked is
// the one outcome that asks for the operator.
func (o Outcome) Plane(parked bool) string {
	switch {
	case parked || o == Parked:
		return reporter.OutcomeParked
	case o == Done:
		return reporter.OutcomeCheckpoint
	case o == Died:
		return reporter.OutcomeDead
	default: // Retried, Failed, Cut
		return reporter.OutcomeReleased
	}
}
