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

// maxBatchBytes bounds the JSON body of a POST that coalesce makes of several
// reports: a quarter of what fleet-host's plane reads by default (the daemon's
// --max-payload, 256 KiB), so that a plane run with a lower bound still takes
// it. See RATIONALE.md, "Why does a POST carry every report queued behind the
// last?".
const maxBatchBytes = 64 << 10

// coalesce returns the report one POST carries for the oldest reports of q
// (not empty), and how many of them it carries: the longest run from q[0] of
// one Identity whose iterations together stay within wire.MaxIterations and
// maxBatchBytes, as q[k-1], the newest, with every iteration of the run, oldest
// first. q[0] alone is always taken, whatever it holds. The iterations are
// shared with q's, not copied: the pump owns both.
func coalesce(q []Report) (Report, int) {
	its, size := len(q[0].Iterations), iterationsSize(q[0].Iterations)
	k := 1
	for ; k < len(q) && q[k].Identity == q[0].Identity; k++ {
		n, b := len(q[k].Iterations), iterationsSize(q[k].Iterations)
		if its+n > wire.MaxIterations || size+b > maxBatchBytes {
			break
		}
		its, size = its+n, size+b
	}
	rep := q[k-1]
	if k == 1 || its == 0 {
		return rep, k
	}
	rep.Iterations = make([]Iteration, 0, its)
	for _, r := range q[:k] {
		rep.Iterations = append(rep.Iterations, r.Iterations...)
	}
	return rep, k
}

// iterationsSize is at least the bytes its take in a report's JSON body: every
// string at six bytes a byte (the longest escape, \u003c), every number at its
// longest and every key, quote and comma of the wire format. The identity and
// state a body carries once are left to maxBatchBytes' margin.
func iterationsSize(its []Iteration) int {
	const (
		iterationFixed = 160 // {"task_id":"","task_ref":"",...,"tokens":} with both numbers at their longest
		phaseFixed     = 3   // "",
		sessionFixed   = 40  // {"phase":"","harness":"","model":""},
	)
	n := 0
	for _, it := range its {
		n += iterationFixed + 6*(len(it.TaskID)+len(it.TaskRef)+len(it.Outcome))
		for _, p := range it.Phases {
			n += phaseFixed + 6*len(p)
		}
		for _, s := range it.Sessions {
			n += sessionFixed + 6*(len(s.Phase)+len(s.Harness)+len(s.Model))
		}
	}
	return n
}
