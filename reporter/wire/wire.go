// Package wire is the JSON body of one report: the types the reporter encodes and a
// plane decodes (internal/plane), so that the two sides cannot drift apart. The
// format, field by field, is the reporter's package doc ("Wire format").
//
// The types are kept apart from the reporter's own (reporter.Report and the rest) so
// that its Go API, which reference/reporter-api.md fixes exactly, and the wire can each
// change without dragging the other. Every field is always present: no omitempty
// anywhere; the reporter sends a nil slice as [] (never null) and an empty string as ""
// (Session.Model in particular).
package wire

// MaxIterations bounds the iterations one report may carry: a plane refuses a body with
// more (internal/plane answers 400), and the reporter coalesces queued reports into one
// POST only up to it.
const MaxIterations = 100

// Report is one POST body: who the instance is, what it is doing, and the iterations it
// finished since its last report, oldest first.
type Report struct {
	Instance       string      `json:"instance"`
	Host           string      `json:"host"`
	Version        string      `json:"version"`
	ConfigIdentity string      `json:"config_identity"`
	State          State       `json:"state"`
	Iterations     []Iteration `json:"iterations"`
}

// State is the presence half of a report: what the instance is doing now.
type State struct {
	Kind    string `json:"kind"`
	N       int    `json:"n"`
	TaskRef string `json:"task_ref"`
	Phase   string `json:"phase"`
}

// Iteration is one finished iteration: what ran, how it ended, what it cost.
type Iteration struct {
	TaskID          string    `json:"task_id"`
	TaskRef         string    `json:"task_ref"`
	Phases          []string  `json:"phases"`
	Sessions        []Session `json:"sessions"`
	Outcome         string    `json:"outcome"`
	DurationSeconds float64   `json:"duration_seconds"`
	Tokens          int       `json:"tokens"`
}

// Session is one session an iteration ran; Model "" is "not resolved" and stays "".
type Session struct {
	Phase   string `json:"phase"`
	Harness string `json:"harness"`
	Model   string `json:"model"`
}
