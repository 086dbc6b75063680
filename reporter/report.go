package reporter

// The presence states a daemon can report. They are the plane's vocabulary
// (@clankerbar/shared INSTANCE_STATES) verbatim — the plane is a pipe, not a
// judge, so the caller owns the mapping from what its loop is doing to these
// four:
//
//   - idle: alive and polling, holding nothing, spawning normally
//   - iteration: mid-drain: N is the 1-based iteration number, TaskRef the
//     task being worked (empty until a claim has been observed), Phase the
//     label of the phase session about to spawn or running
//   - draining: alive but not spawning new sessions (console pause, fleet pause)
//   - stopping: shutting down on purpose (STOP/HALT, a marker restart, budget
//     or max-iterations reached, signal); sent as the final beacon
const (
	StateIdle      = "idle"
	StateIteration = "iteration"
	StateDraining  = "draining"
	StateStopping  = "stopping"
)

// How one iteration ended — the driver's own words for how its loop step
// finished, mapped from what the loop already knows at the drain boundary
// (@clankerbar/shared ITERATION_OUTCOMES):
//
//   - checkpoint: the drain ended with pushed work recorded and the lease left
//     for a successor session to take over
//   - released: the claim came back to the queue (handed back by the driver,
//     or consumed by the session settling the task itself)
//   - parked: the dead-phase retry budget parked the task for the operator
//   - dead: the drain died: a dead phase ended it, or it failed outright
const (
	OutcomeCheckpoint = "checkpoint"
	OutcomeReleased   = "released"
	OutcomeParked     = "parked"
	OutcomeDead       = "dead"
)

// Report is one POST body: identity + current state + any iterations that
// finished since the last report.
//
// Send copies the slices it holds, so the caller may reuse them after Send
// returns.
type Report struct {
	Identity
	State      State
	Iterations []Iteration
}

// Identity is what every beacon carries about THIS daemon: who and where it
// is, what build it runs, and which config is in force. Identity is composed
// per report by the caller (the loop), not baked into the reporter, because
// one of its fields — the config identity — changes when a RELOAD swaps the
// config.
type Identity struct {
	Instance       string // the daemon's name; required
	Host           string // hostname
	Version        string // binary version
	ConfigIdentity string // fingerprint of the effective config in force
}

// State is the presence half of a report: what the daemon is doing right now.
type State struct {
	Kind    string // one of the State* constants
	N       int    // iteration number, when Kind is iteration
	TaskRef string // task being worked ("CLA-466"), when known
	Phase   string // phase label, when Kind is iteration
}

// Iteration is one finished loop step: what ran, how it ended, what it cost.
type Iteration struct {
	TaskID          string    // task UUID, when a claim was observed
	TaskRef         string    // qualified ref ("CLA-466"), when known
	Phases          []string  // distinct phase labels attempted, in order
	Sessions        []Session // one per session the drain spawned, in spawn order
	Outcome         string    // one of the Outcome* constants
	DurationSeconds float64   // wall clock for the whole drain
	Tokens          int       // the drain's total reported token spend
}

// Session is one harness session an iteration spawned: which phase it ran,
// which harness ran it, and the model it was spawned with. The values are
// exactly what the loop's spawn line prints. Model is the EMPTY string when no
// model was resolved (the harness default applied); the plane stores that as
// "not resolved", never a guessed name, so an empty value rides as "" on the
// wire rather than being omitted or filled in.
type Session struct {
	Phase   string // phase label the session ran under
	Harness string // the harness that ran it
	Model   string // resolved model id; "" when the harness default applied
}

// clone returns r with its own copies of every slice, so that the pump never
// reads memory the caller may be rewriting. Strings are immutable and shared.
// A report without iterations (a plain presence beacon) costs no allocation.
func (r Report) clone() Report {
	if r.Iterations == nil {
		return r
	}
	its := make([]Iteration, len(r.Iterations))
	for i, it := range r.Iterations {
		if it.Phases != nil {
			it.Phases = append([]string(nil), it.Phases...)
		}
		if it.Sessions != nil {
			it.Sessions = append([]Session(nil), it.Sessions...)
		}
		its[i] = it
	}
	r.Iterations = its
	return r
}
