package fleetview

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/fleethost/fleet/primitives"
)

// Fleet is the fleet as every daemon sees it: GET /api/v1/fleet, `fleet-host inspect`'s
// FLEET sections and the console's fleet view, charts and banner.
type Fleet struct {
	Self    string   `json:"self"` // the daemon that answered
	Daemons []Daemon `json:"daemons"`
	// Diverging lists the automations that run more than one build (digest) across the
	// live daemons: a rollout in progress, or stuck.
	Diverging []Divergence `json:"diverging"`
	Health    Health       `json:"health"`
	// Alerts is what needs an operator, for the console's banner; the API adds the
	// parked tasks and the closed gates to the daemons' own.
	Alerts []Alert `json:"alerts"`
}

// Daemon is one daemon of the roster with what its age says of it.
type Daemon struct {
	Name string `json:"daemon"`
	Record
	LastSeen time.Time `json:"last_seen"`
	// State is "live", "stale" (unrefreshed for StaleAfter refreshes) or "stopped" (its
	// last record said so); its record ends RecordTTL refreshes after LastSeen.
	State string `json:"state"`
}

// Divergence is an automation that runs several builds at once.
type Divergence struct {
	Automation string  `json:"automation"`
	Builds     []Build `json:"builds"`
	Note       string  `json:"note"`
}

// Build is one build of a diverging automation and where it runs.
type Build struct {
	Version string   `json:"plugin_version"`
	Digest  string   `json:"digest"`
	Daemons []string `json:"daemons"`
	Slots   int      `json:"slots"`
}

// Alert is one thing that needs an operator.
type Alert struct {
	Kind    string `json:"kind"` // parked, reload_refused, stale_daemon, stopped_daemon, diverging, gate_closed
	Subject string `json:"subject"`
	Message string `json:"message"`
}

// Health is the fleet's outcomes by minute over HealthWindow, oldest minute first: the
// last minute is the current one, still counting.
type Health struct {
	From        time.Time `json:"from"` // the start of the first minute
	Minutes     int       `json:"minutes"`
	Automations []Series  `json:"automations"`
	Queues      []Series  `json:"queues"`
}

// Series is one automation's or queue's outcomes by minute, and its totals.
type Series struct {
	Name    string  `json:"name"`
	Done    []int64 `json:"done"`
	Retried []int64 `json:"retried"`
	Failed  []int64 `json:"failed"`
	Parked  []int64 `json:"parked"`
	Died    []int64 `json:"died"`
	// PerSecond is each minute's outcomes per second (the current minute's over the
	// seconds it has run).
	PerSecond []float64 `json:"tasks_per_second"`
	// Total is each outcome over the window, by name; Rate the tasks per second over
	// the last minute and the current one.
	Total map[string]int64 `json:"total"`
	Rate  float64          `json:"rate"`
}

// Read reads the fleet from b: the roster, judged at now, and the tally of the
// HealthWindow up to now's minute. self is the daemon asking.
func Read(ctx context.Context, b primitives.Backend, self string, now time.Time) (*Fleet, error) {
	entries, err := b.RosterList(ctx)
	if err != nil {
		return nil, fmt.Errorf("fleetview: roster: %w", err)
	}
	f := &Fleet{Self: self, Daemons: []Daemon{}, Diverging: []Divergence{}, Alerts: []Alert{}}
	for _, e := range entries {
		var d Daemon
		if err := json.Unmarshal(e.Record, &d.Record); err != nil {
			continue // not a record this version writes: skipped, never fatal
		}
		refresh := time.Duration(max(d.RefreshMs, 1)) * time.Millisecond
		d.Name, d.LastSeen = e.Daemon, e.Until.Add(-RecordTTL*refresh)
		switch {
		case d.Stopped:
			d.State = "stopped"
			f.Alerts = append(f.Alerts, Alert{"stopped_daemon", d.Name, fmt.Sprintf("daemon %s stopped %s ago", d.Name, ago(now, d.LastSeen))})
		case now.Sub(d.LastSeen) > StaleAfter*refresh:
			d.State = "stale"
			f.Alerts = append(f.Alerts, Alert{"stale_daemon", d.Name, fmt.Sprintf("daemon %s not seen for %s: dead, hung or cut off from the backend", d.Name, ago(now, d.LastSeen))})
		default:
			d.State = "live"
		}
		for _, r := range d.Refused {
			f.Alerts = append(f.Alerts, Alert{"reload_refused", r.Automation, fmt.Sprintf("a reload of %s was refused on %s: %s", r.Automation, d.Name, r.Reason)})
		}
		f.Daemons = append(f.Daemons, d)
	}
	f.Diverging = diverging(f.Daemons)
	for _, dv := range f.Diverging {
		f.Alerts = append(f.Alerts, Alert{"diverging", dv.Automation, fmt.Sprintf("%s runs %d builds: %s", dv.Automation, len(dv.Builds), dv.Note)})
	}
	if f.Health, err = readHealth(ctx, b, now); err != nil {
		return nil, err
	}
	return f, nil
}

// diverging finds the automations whose live daemons' slots run more than one digest.
func diverging(daemons []Daemon) []Divergence {
	builds := map[string]map[string]*Build{} // automation -> digest -> build
	for _, d := range daemons {
		if d.State != "live" {
			continue
		}
		for _, s := range d.Slots {
			byDigest := builds[s.Automation]
			if byDigest == nil {
				byDigest = map[string]*Build{}
				builds[s.Automation] = byDigest
			}
			b := byDigest[s.Digest]
			if b == nil {
				b = &Build{Version: s.Version, Digest: s.Digest}
				byDigest[s.Digest] = b
			}
			b.Slots++
			if !slices.Contains(b.Daemons, d.Name) {
				b.Daemons = append(b.Daemons, d.Name)
			}
		}
	}
	out := []Divergence{}
	for _, typ := range slices.Sorted(maps.Keys(builds)) {
		if len(builds[typ]) < 2 {
			continue
		}
		dv := Divergence{Automation: typ, Note: "rollout in progress or stuck"}
		for _, dg := range slices.Sorted(maps.Keys(builds[typ])) {
			dv.Builds = append(dv.Builds, *builds[typ][dg])
		}
		out = append(out, dv)
	}
	return out
}

// Series kinds, the first segment of a tally series name.
const (
	kindAutomation = "a"
	kindQueue      = "q"
)

// seriesName is "<kind>:<name>:<outcome>".
func seriesName(kind, name string, o Outcome) string { return kind + ":" + name + ":" + o.String() }

// readHealth reads the tally's window up to now's minute.
func readHealth(ctx context.Context, b primitives.Backend, now time.Time) (Health, error) {
	n := int(HealthWindow / time.Minute)
	from := primitives.TallyMinute(now).Add(-time.Duration(n-1) * time.Minute)
	buckets, err := b.TallyRange(ctx, from, n)
	if err != nil {
		return Health{}, fmt.Errorf("fleetview: tally: %w", err)
	}
	series := map[string]*Series{} // "<kind>:<name>"
	for i, bk := range buckets {
		for name, v := range bk {
			cut := strings.LastIndexByte(name, ':')
			if cut < 0 || !strings.HasPrefix(name, kindAutomation+":") && !strings.HasPrefix(name, kindQueue+":") {
				continue
			}
			o := slices.Index(outcomeNames[:], name[cut+1:])
			if o < 0 {
				continue
			}
			s := series[name[:cut]]
			if s == nil {
				s = newSeries(name[2:cut], n)
				series[name[:cut]] = s
			}
			s.column(Outcome(o))[i] += v
		}
	}
	elapsed := now.Sub(primitives.TallyMinute(now)).Seconds()
	h := Health{From: from, Minutes: n, Automations: []Series{}, Queues: []Series{}}
	for _, key := range slices.Sorted(maps.Keys(series)) {
		s := series[key]
		s.finish(elapsed)
		if key[0] == kindAutomation[0] {
			h.Automations = append(h.Automations, *s)
		} else {
			h.Queues = append(h.Queues, *s)
		}
	}
	return h, nil
}

func newSeries(name string, n int) *Series {
	return &Series{Name: name, Done: make([]int64, n), Retried: make([]int64, n), Failed: make([]int64, n),
		Parked: make([]int64, n), Died: make([]int64, n), PerSecond: make([]float64, n), Total: map[string]int64{}}
}

func (s *Series) column(o Outcome) []int64 {
	return [nOutcomes][]int64{s.Done, s.Retried, s.Failed, s.Parked, s.Died}[o]
}

// finish fills the totals and the rates; elapsed is the seconds the current minute
// has run.
func (s *Series) finish(elapsed float64) {
	n := len(s.Done)
	sum := func(i int) int64 {
		var t int64
		for o := range nOutcomes {
			t += s.column(o)[i]
		}
		return t
	}
	for o := range nOutcomes {
		for _, v := range s.column(o) {
			s.Total[o.String()] += v
		}
	}
	for i := range n {
		secs := 60.0
		if i == n-1 {
			secs = max(elapsed, 1)
		}
		s.PerSecond[i] = float64(sum(i)) / secs
	}
	s.Rate = float64(sum(n-1)+sum(n-2)) / (60 + max(elapsed, 1))
}

func ago(now, t time.Time) string { return now.Sub(t).Round(100 * time.Millisecond).String() }
