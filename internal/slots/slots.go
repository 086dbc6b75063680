// Package slots is the daemon's slot table: every slot's state and its recent
// iterations, as an operator sees them (GET /api/v1/automations/{type}/slots, the
// automations' slot_states, fleet-host inspect, the console, the fleet_slots gauge), fed
// by the host's slot events (slotstate.Event) through Table.Observe.
//
//	t := slots.NewTable()
//	t.Register(map[string]int{"scraper": 4})
//	cfg.Observe = t.Observe
//	rows := t.Snapshot()
package slots

import (
	"maps"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/internal/safetext"
)

// Row is one slot as an operator sees it.
type Row struct {
	Plugin string          `json:"automation"`
	Slot   string          `json:"slot"`
	State  slotstate.State `json:"state"`
	N      int             `json:"iteration,omitempty"` // its iterations so far
	TaskID string          `json:"task_id,omitempty"`   // the task it works, when working
	Phase  slotstate.Phase `json:"phase,omitempty"`     // when working
	Since  time.Time       `json:"since"`               // when it entered State
	// LastOutcome is how its last iteration ended, and Last that iteration's record (its
	// reason, death and backoff said inline; immutable once set, replaced by the next):
	// nil before its first.
	LastOutcome slotstate.Outcome `json:"last_outcome,omitempty"`
	Last        *Record           `json:"last,omitempty"`

	// owner is the config identity of the version whose slot holds the name: during a
	// reload's roll-over two slots share it, and the one that came up last tells its state.
	owner string
}

// RecentIterations is how many finished iterations a Table keeps per slot, the newest: what
// GET /api/v1/automations/{type}/slots and the console show. An older one is dropped as a
// new one ends, so a slot holds at most this many records (each with its reason clipped
// to MaxReason bytes) whatever it runs.
const RecentIterations = 20

// MaxReason bounds the reason an iteration record keeps, in bytes: a guest's fail reason
// is its own text, of any length up to the payload limit.
const MaxReason = 200

// Record is one finished iteration of a slot as the table keeps it and the API serves
// it: the slot's Iteration (slotstate) with its number and its end, its durations in
// milliseconds and its reason clipped.
type Record struct {
	N       int               `json:"iteration"`
	TaskID  string            `json:"task_id,omitempty"`
	Outcome slotstate.Outcome `json:"outcome"`
	// Reason is why the task went back or the instance died (clipped to MaxReason).
	Reason string `json:"reason,omitempty"`
	// Death is why the instance died (died), or "drain" for a call the drain cut (cut).
	Death slotstate.Death `json:"death,omitempty"`
	// BackoffMs is how long the task waits before its next attempt (failed, retried),
	// or a loop plugin before its next tick; 0, left out, when it does not.
	BackoffMs  float64   `json:"backoff_ms,omitempty"`
	DurationMs float64   `json:"duration_ms"`
	EndedAt    time.Time `json:"ended_at"`
}

// ended is the record of the iteration it, the slot's n-th, which ended at end.
func ended(n int, it *slotstate.Iteration, end time.Time) Record {
	return Record{
		N: n, TaskID: it.TaskID, Outcome: it.Outcome, Reason: safetext.Clip(it.Reason, MaxReason), Death: it.Death,
		BackoffMs: millis(it.Backoff), DurationMs: millis(it.Duration), EndedAt: end,
	}
}

// millis is d in milliseconds, to the microsecond.
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Detail is a slot's state and its recent iterations, newest first.
type Detail struct {
	Row
	Recent []Record `json:"recent"`
}

// Table tracks every slot's state, and its last RecentIterations iterations, from the
// host's slot events (slotstate.Event). Its methods are safe for concurrent use; the
// zero value is not ready, use NewTable.
type Table struct {
	mu    sync.Mutex
	slots map[string]*slotEntry // guarded by mu; by slot name
}

// slotEntry is one slot's state and its recent iterations, at most RecentIterations of
// them: a ring, so that each finished task writes one record rather than shifting the
// others (every task of every slot passes here, under the table's lock).
type slotEntry struct {
	Row
	recent []Record // oldest first until full; then oldest at oldest
	oldest int      // where the next record goes once recent is full
}

// NewTable returns an empty table.
func NewTable() *Table { return &Table{slots: map[string]*slotEntry{}} }

// Register makes the tracked slots those of the loaded set (at start, and after each
// reload), by automation type and its slot count: a slot the table has not heard of
// yet is added, starting; a slot no type has any more (its type was removed, or runs
// fewer slots) is dropped, so that fleet_slots and the slot table stop reporting it. A
// reload has stopped those slots before it returns, so no event of theirs comes after.
func (s *Table) Register(slotsByType map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	keep := map[string]bool{}
	for typ, n := range slotsByType {
		for i := range n {
			name := slotName(typ, i)
			keep[name] = true
			if s.slots[name] == nil {
				s.slots[name] = &slotEntry{Row: Row{Plugin: typ, Slot: name, State: slotstate.Starting, Since: now}}
			}
		}
	}
	maps.DeleteFunc(s.slots, func(name string, _ *slotEntry) bool { return !keep[name] })
}

// Observe records one event. It is a host.Config.Observe: quick and never blocking.
func (s *Table) Observe(e slotstate.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.slots[e.Slot]
	if cur == nil {
		cur = &slotEntry{Row: Row{Plugin: e.Plugin, Slot: e.Slot}}
		s.slots[e.Slot] = cur
	}
	switch {
	case cur.owner == "" || e.ConfigIdentity == cur.owner:
		cur.owner = e.ConfigIdentity
	case e.Kind == slotstate.Idle || e.Kind == slotstate.Working || e.Kind == slotstate.Paused:
		// Another version's slot of this index came up: it takes the name over (a new
		// version in a roll-over, or the old one again after a rollback), its count anew.
		cur.owner, cur.N, cur.LastOutcome, cur.Last = e.ConfigIdentity, 0, "", nil
	default:
		// The version it took over from, finishing and stopping: not this slot's state.
		return
	}
	state := cur.State
	switch e.Kind {
	case slotstate.Working:
		state = e.Kind
		cur.N, cur.TaskID, cur.Phase = e.N, e.TaskID, e.Phase
	case slotstate.Finished:
		// The slot goes on to claim again: idle until it says otherwise.
		state = slotstate.Idle
		cur.N, cur.TaskID, cur.Phase, cur.LastOutcome = e.N, "", "", e.Iteration.Outcome
		it := ended(e.N, e.Iteration, time.Now())
		cur.Last = &it
		cur.record(it)
	case slotstate.Idle, slotstate.Paused, slotstate.Draining, slotstate.Stopped:
		state = e.Kind
		cur.TaskID, cur.Phase = "", ""
	}
	if state != cur.State {
		cur.State, cur.Since = state, time.Now()
	}
}

// record keeps it, dropping the oldest record when RecentIterations are kept already.
func (e *slotEntry) record(it Record) {
	if len(e.recent) < RecentIterations {
		e.recent = append(e.recent, it)
		return
	}
	e.recent[e.oldest] = it
	e.oldest = (e.oldest + 1) % len(e.recent)
}

// newestFirst copies the recent records, the newest first.
func (e *slotEntry) newestFirst() []Record {
	n := len(e.recent)
	out := make([]Record, n)
	for i := range out {
		out[i] = e.recent[(e.oldest+n-1-i)%n]
	}
	return out
}

// Snapshot copies every slot's state, sorted by slot name.
func (s *Table) Snapshot() []Row {
	s.mu.Lock()
	out := make([]Row, 0, len(s.slots))
	for _, v := range s.slots {
		out = append(out, v.Row)
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return slotLess(out[i], out[j]) })
	return out
}

// Details copies the state and recent iterations of every slot of automation type typ,
// sorted by slot name.
func (s *Table) Details(typ string) []Detail {
	s.mu.Lock()
	out := []Detail{}
	for _, v := range s.slots {
		if v.Plugin != typ {
			continue
		}
		out = append(out, Detail{Row: v.Row, Recent: v.newestFirst()})
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return slotLess(out[i].Row, out[j].Row) })
	return out
}

// slotLess orders slots by type, then index.
func slotLess(a, b Row) bool {
	if a.Plugin != b.Plugin {
		return a.Plugin < b.Plugin
	}
	if len(a.Slot) != len(b.Slot) {
		return len(a.Slot) < len(b.Slot) // "x/2" before "x/10"
	}
	return a.Slot < b.Slot
}

// slotName is the host's name of a slot: "<type>/<index>".
func slotName(typ string, i int) string { return typ + "/" + strconv.Itoa(i) }
