package reporter

import "math"

// The wire structs are the JSON contract the plane implements (see the package
// doc). They are kept apart from the exported types so that the Go API and the
// wire can each change without dragging the other, and so that every field is
// always present: no omitempty anywhere, a nil slice rides as [] (never null),
// and an empty string rides as "" (Session.Model in particular).

type wireReport struct {
	Instance       string          `json:"instance"`
	Host           string          `json:"host"`
	Version        string          `json:"version"`
	ConfigIdentity string          `json:"config_identity"`
	State          wireState       `json:"state"`
	Iterations     []wireIteration `json:"iterations"`
}

type wireState struct {
	Kind    string `json:"kind"`
	N       int    `json:"n"`
	TaskRef string `json:"task_ref"`
	Phase   string `json:"phase"`
}

type wireIteration struct {
	TaskID          string        `json:"task_id"`
	TaskRef         string        `json:"task_ref"`
	Phases          []string      `json:"phases"`
	Sessions        []wireSession `json:"sessions"`
	Outcome         string        `json:"outcome"`
	DurationSeconds float64       `json:"duration_seconds"`
	Tokens          int           `json:"tokens"`
}

type wireSession struct {
	Phase   string `json:"phase"`
	Harness string `json:"harness"`
	Model   string `json:"model"`
}

// toWire converts r to its wire shape. It runs on the pump, never in Send.
func toWire(r Report) wireReport {
	w := wireReport{
		Instance:       r.Instance,
		Host:           r.Host,
		Version:        r.Version,
		ConfigIdentity: r.ConfigIdentity,
		State: wireState{
			Kind:    r.State.Kind,
			N:       r.State.N,
			TaskRef: r.State.TaskRef,
			Phase:   r.State.Phase,
		},
		Iterations: make([]wireIteration, 0, len(r.Iterations)),
	}
	for _, it := range r.Iterations {
		wi := wireIteration{
			TaskID:          it.TaskID,
			TaskRef:         it.TaskRef,
			Phases:          make([]string, 0, len(it.Phases)),
			Sessions:        make([]wireSession, 0, len(it.Sessions)),
			Outcome:         it.Outcome,
			DurationSeconds: finite(it.DurationSeconds),
			Tokens:          it.Tokens,
		}
		wi.Phases = append(wi.Phases, it.Phases...)
		for _, s := range it.Sessions {
			wi.Sessions = append(wi.Sessions, wireSession(s))
		}
		w.Iterations = append(w.Iterations, wi)
	}
	return w
}

// finite maps NaN and ±Inf, which JSON cannot carry, to 0, so that encoding a
// report never fails and one bad duration cannot cost the whole report.
func finite(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return f
}
