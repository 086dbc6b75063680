package fleetview

import (
	"sync"
	"sync/atomic"

	"github.com/fleethost/fleet/host/slotstate"
)

// Outcome is one of the five outcomes the health counts: what became of a finished
// iteration, in the operator's words.
type Outcome int

const (
	Done    Outcome = iota // the task was acked (or the tick succeeded)
	Retried                // handed back with its attempt refunded: fleet.Retry, or cut by the drain
	Failed                 // handed back spending an attempt: fleet.Fail
	Parked                 // parked for the operator, by the plugin or its attempts running out
	Died                   // the instance died (trap, deadline, memory...) and the task was not parked
	nOutcomes
)

// outcomeNames are the outcomes' words, in the series names and the JSON.
var outcomeNames = [nOutcomes]string{"done", "retried", "failed", "parked", "died"}

func (o Outcome) String() string { return outcomeNames[o] }

// OutcomeOf is what a finished iteration counts as: the host's outcome (slotstate),
// except that a park wins (it asks for the operator), a death that parked included, and
// a call the drain cut counts as retried (its attempt was refunded).
func OutcomeOf(it *slotstate.Iteration) Outcome {
	switch {
	case it.Parked:
		return Parked
	case it.Outcome == slotstate.Died:
		return Died
	case it.Outcome == slotstate.Done:
		return Done
	case it.Outcome == slotstate.Retried, it.Outcome == slotstate.Cut:
		return Retried
	default:
		return Failed
	}
}

// counts is one automation's outcomes since the last flush.
type counts [nOutcomes]atomic.Int64

// Counter counts this daemon's outcomes by automation type, in memory, until the
// Keeper flushes them to the fleet's tally: the hot path pays a map read under a read
// lock and an atomic add, never a backend write. Its methods are safe for concurrent
// use; the zero value is ready.
type Counter struct {
	mu     sync.RWMutex
	byType map[string]*counts // guarded by mu; an entry, once made, stays (one per type ever loaded)
}

// Observe counts e when it is a finished iteration; it ignores every other event.
// It is a host.Config.Observe.
func (c *Counter) Observe(e slotstate.Event) {
	if e.Kind != slotstate.Finished {
		return
	}
	c.of(e.Plugin)[OutcomeOf(e.Iteration)].Add(1)
}

// of returns typ's counts, making them on first use.
func (c *Counter) of(typ string) *counts {
	c.mu.RLock()
	n := c.byType[typ]
	c.mu.RUnlock()
	if n != nil {
		return n
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n = c.byType[typ]; n == nil {
		if c.byType == nil {
			c.byType = map[string]*counts{}
		}
		n = new(counts)
		c.byType[typ] = n
	}
	return n
}

// take returns the counts since the last take, by type, and zeroes them; types with
// nothing counted are left out.
func (c *Counter) take() map[string][nOutcomes]int64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := map[string][nOutcomes]int64{}
	for typ, n := range c.byType {
		var v [nOutcomes]int64
		var any bool
		for o := range n {
			v[o] = n[o].Swap(0)
			any = any || v[o] != 0
		}
		if any {
			out[typ] = v
		}
	}
	return out
}
