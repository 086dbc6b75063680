package reporter

import (
	"math"

	"github.com/fleethost/fleet/reporter/wire"
)

// toWire converts r to its wire shape (package wire, which the plane decodes). It runs
// on the pump, never in Send.
func toWire(r Report) wire.Report {
	w := wire.Report{
		Instance:       r.Instance,
		Host:           r.Host,
		Version:        r.Version,
		ConfigIdentity: r.ConfigIdentity,
		State:          wire.State(r.State),
		Iterations:     make([]wire.Iteration, 0, len(r.Iterations)),
	}
	for _, it := range r.Iterations {
		wi := wire.Iteration{
			TaskID:          it.TaskID,
			TaskRef:         it.TaskRef,
			Phases:          make([]string, 0, len(it.Phases)),
			Sessions:        make([]wire.Session, 0, len(it.Sessions)),
			Outcome:         it.Outcome,
			DurationSeconds: finite(it.DurationSeconds),
			Tokens:          it.Tokens,
		}
		wi.Phases = append(wi.Phases, it.Phases...)
		for _, s := range it.Sessions {
			wi.Sessions = append(wi.Sessions, wire.Session(s))
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
