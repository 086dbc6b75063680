package metrics

import (
	"maps"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/host/slotstate"
)

// SlotState is one slot as an operator sees it.
type SlotState struct {
	Plugin string          `json:"automation"`
	Slot   string          `json:"slot"`
	State  slotstate.State `json:"state"`
	N      int             `json:"iteration,omitempty"` // its iterations so far
	TaskID string          `json:"task_id,omitempty"`   // the task it works, when working
	Phase  slotstate.Phase `json:"phase,omitempty"`     // when working
	Since  time.Time       `json:"since"`               // when it entered State
	// LastOutcome is how its last iteration ended.
	LastOutcome slotstate.Outcome `json:"last_outcome,omitempty"`

	// owner is the config identity of the version whose slot holds the name: during a
	// reload's roll-over two slots share it, and the one that came up last tells its state.
	owner string
}

// Slots tracks every slot's state from the host's SlotEvents. Its methods are safe for
// concurrent use; the zero value is not ready, use NewSlots.
type Slots struct {
	mu    sync.Mutex
	slots map[string]*SlotState // guarded by mu; by slot name
}

// NewSlots returns an empty tracker.
func NewSlots() *Slots { return &Slots{slots: map[string]*SlotState{}} }

// Register makes the tracked slots those of plugins, the loaded set (at start, and after
// each reload): a slot the tracker has not heard of yet is added, starting; a slot no
// plugin has any more (its type was removed, or runs fewer slots) is dropped, so that
// fleet_slots and the slot table stop reporting it. A reload has stopped those slots
// before it returns, so no event of theirs comes after.
func (s *Slots) Register(plugins []host.Plugin) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	keep := map[string]bool{}
	for _, p := range plugins {
		for i := range p.Slots {
			name := slotName(p.Type, i)
			keep[name] = true
			if s.slots[name] == nil {
				s.slots[name] = &SlotState{Plugin: p.Type, Slot: name, State: slotstate.Starting, Since: now}
			}
		}
	}
	maps.DeleteFunc(s.slots, func(name string, _ *SlotState) bool { return !keep[name] })
}

// Observe records one event. It is a host.Config.Observe: quick and never blocking.
func (s *Slots) Observe(e host.SlotEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.slots[e.Slot]
	if cur == nil {
		cur = &SlotState{Plugin: e.Plugin, Slot: e.Slot}
		s.slots[e.Slot] = cur
	}
	switch {
	case cur.owner == "" || e.ConfigIdentity == cur.owner:
		cur.owner = e.ConfigIdentity
	case e.Kind == slotstate.Idle || e.Kind == slotstate.Working || e.Kind == slotstate.Paused:
		// Another version's slot of this index came up: it takes the name over (a new
		// version in a roll-over, or the old one again after a rollback), its count anew.
		cur.owner, cur.N, cur.LastOutcome = e.ConfigIdentity, 0, ""
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
		cur.N, cur.TaskID, cur.Phase, cur.LastOutcome = e.N, "", "", e.Outcome
	case slotstate.Idle, slotstate.Paused, slotstate.Draining, slotstate.Stopped:
		state = e.Kind
		cur.TaskID, cur.Phase = "", ""
	}
	if state != cur.State {
		cur.State, cur.Since = state, time.Now()
	}
}

// Snapshot copies every slot's state, sorted by slot name.
func (s *Slots) Snapshot() []SlotState {
	s.mu.Lock()
	out := make([]SlotState, 0, len(s.slots))
	for _, v := range s.slots {
		out = append(out, *v)
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Plugin != out[j].Plugin {
			return out[i].Plugin < out[j].Plugin
		}
		if len(out[i].Slot) != len(out[j].Slot) {
			return len(out[i].Slot) < len(out[j].Slot) // "x/2" before "x/10"
		}
		return out[i].Slot < out[j].Slot
	})
	return out
}

// slotName is the host's name of a slot: "<type>/<index>".
func slotName(typ string, i int) string { return typ + "/" + strconv.Itoa(i) }
