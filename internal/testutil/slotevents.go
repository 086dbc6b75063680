package testutil

import (
	"sync"

	"github.com/fleethost/fleet/host/slotstate"
)

// SlotEvents records the events the slots of a host report (its Config.Observe), for a
// test to read. Safe for concurrent use.
type SlotEvents struct {
	mu  sync.Mutex
	all []slotstate.Event
}

// Observe records ev: pass it as a host's Config.Observe.
func (e *SlotEvents) Observe(ev slotstate.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, ev)
}

// All returns every event so far, in the order the slots reported them.
func (e *SlotEvents) All() []slotstate.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]slotstate.Event(nil), e.all...)
}

// Ended is one finished iteration, with the plugin and the slot that ran it.
type Ended struct {
	Plugin, Slot string
	slotstate.Iteration
}

// Finished returns the finished iterations so far, of plugin type typ ("" for all).
func (e *SlotEvents) Finished(typ string) []Ended {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []Ended
	for _, ev := range e.all {
		if ev.Kind == slotstate.Finished && (typ == "" || ev.Plugin == typ) {
			out = append(out, Ended{Plugin: ev.Plugin, Slot: ev.Slot, Iteration: *ev.Iteration})
		}
	}
	return out
}

// Outcomes counts the finished iterations of plugin type typ ("" for all) by outcome.
func (e *SlotEvents) Outcomes(typ string) map[slotstate.Outcome]int {
	out := map[slotstate.Outcome]int{}
	for _, ev := range e.Finished(typ) {
		out[ev.Outcome]++
	}
	return out
}

// Count counts the events of state kind so far.
func (e *SlotEvents) Count(kind slotstate.State) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ev := range e.all {
		if ev.Kind == kind {
			n++
		}
	}
	return n
}

// StoppedBy counts the stopped events by plugin type.
func (e *SlotEvents) StoppedBy() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string]int{}
	for _, ev := range e.all {
		if ev.Kind == slotstate.Stopped {
			out[ev.Plugin]++
		}
	}
	return out
}
