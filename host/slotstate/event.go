package slotstate

import "time"

// Event is one step of a slot's life, the one shape every view of a slot reads: the
// slot emits it (host/internal/slot), and the host hands it as it is to the plane's
// reporter and to Config.Observe, through which the daemon's metrics, slot table and
// fleet tally hear it. The plane's report is the one other shape, made from it once
// (host/telemetry.go). An observer must not block; it may keep the event's Iteration,
// which is made fresh for each iteration, but never change it: every observer reads
// the same one.
type Event struct {
	Plugin string // the automation type
	Slot   string // the slot's name, "<type>/<index>"
	// ConfigIdentity is the config identity of the slot's version, the one its reports
	// to the plane carry: while a reload rolls a type over, the old and the new slot of
	// one index share Slot and differ by it.
	ConfigIdentity string
	// Kind is the state the slot enters (Idle, Working on iteration N and TaskID in
	// Phase, Paused, Draining, or Stopped, its last event) or Finished: an iteration
	// ended, and Iteration says how.
	Kind   State
	N      int    // the slot's 1-based iteration number (Working, Finished)
	TaskID string // the task being worked, when one was claimed
	Phase  Phase  // Working
	// Iteration is the iteration that ended, for Finished; nil for every other Kind.
	Iteration *Iteration
}

// Iteration is one finished iteration of a slot: a task handled, or a tick.
type Iteration struct {
	TaskID  string  // the task, "" for a tick
	Phases  []Phase // the phases run, in order
	Outcome Outcome // the host's outcome (Outcome.Settle)
	Reason  string  // why the task went back or the instance died, if it did
	// Death is why the instance died, or the drain cut it (DeathDrain), when it did; ""
	// otherwise.
	Death    Death
	Duration time.Duration // the iteration's wall time
	// Backoff is how long the task waits before its next attempt once this iteration
	// handed it back with a delay: a fail's backoff, a retry's retry_after (or the
	// plugin's retry delay); for a tick, the wait before the next tick after a retry or a
	// fail. 0 otherwise.
	Backoff time.Duration
	// Parked is true when the release parked the task (its attempts are spent, or the
	// plugin said park), whatever Outcome says: a death that spends the budget is Died
	// with Parked set (Outcome.Settle). ParkedByPlugin is true when the plugin parked it
	// (fleet.Park) and the release did, rather than its attempts running out.
	Parked, ParkedByPlugin bool
	// Unfit is true when the task's payload did not satisfy its consumer's contract: it
	// was parked (or, when the release failed, left to its lease) without a guest call.
	Unfit bool
	// HandBacks is the task's count of hand-backs once this iteration handed it back
	// with its attempt refunded (a retry, a drain's cut), 0 when it did not; OverAlert
	// says the count is past the plugin's hand_back_alert.
	HandBacks int
	OverAlert bool
}

// Death says why an instance died: the reason label of fleet_slot_deaths_total. The slot
// decides it from the error's type and from its own contexts, never from the error's
// text, which holds the guest's function names (a trap in a function named
// $call_ran_past_its_deadline is a trap). See host/RATIONALE.md, "Why does a slot event
// carry its death's reason?".
type Death string

const (
	DeathDeadline  Death = "deadline"   // the call ran past its call timeout
	DeathDrain     Death = "drain"      // the host cut the call at the drain deadline
	DeathMemory    Death = "memory"     // the guest died with its memory at the limit
	DeathStack     Death = "stack"      // the guest's nested calls passed the stack limit
	DeathTrap      Death = "trap"       // a wasm trap: unreachable, out of bounds, ...
	DeathExit      Death = "exit"       // the guest called proc_exit
	DeathBadResult Death = "bad_result" // the guest broke the ABI: a malformed result, a range outside its memory
	DeathHostPanic Death = "host_panic" // the host's own bug, recovered
	DeathLease     Death = "lease"      // the host cut the call: its task's lease was lost, or could not be renewed
	DeathWorker    Death = "worker"     // the worker process running the instance died, or was killed (--isolate process)
)
