package host

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/fleethost/fleet/host/internal/desired"
)

// Pause scopes: where a pause was recorded, and so where it acts.
const (
	// ScopeFleet is a pause recorded in the backend's desired state: every host sharing
	// the backend obeys it within about DesiredPoll, and at its start before its slots
	// claim.
	ScopeFleet = "fleet"
	// ScopeLocal is a pause of this host only (Pause), which ends with the process.
	ScopeLocal = "local"
)

// DesiredPoll is how often Run reads the fleet's desired state from the backend: one key
// read each. A fleet-wide act is obeyed by every host within about this.
const DesiredPoll = desired.Poll

// Pause is one pause that holds a type, as Plugin.Pauses lists it.
type Pause struct {
	Scope string    // ScopeFleet or ScopeLocal
	By    string    // the instance (Config.Instance) of the host the operator asked
	At    time.Time // when it was recorded
	// Queue is set when the pause is of the queue the type consumes (PauseQueue), not of
	// the type itself.
	Queue string
}

// pauses is a plugin's two pause layers; paused is true while either holds.
type pauses struct {
	local atomic.Pointer[Pause] // nil: not paused here
	fleet atomic.Pointer[Pause] // nil: the fleet's desired state does not pause it
}

// paused is the slots' check, on every poll: two atomic loads.
func (ps *pauses) paused() bool { return ps.local.Load() != nil || ps.fleet.Load() != nil }

// list is the pauses that hold, the fleet's first.
func (ps *pauses) list() []Pause {
	var out []Pause
	for _, p := range []*Pause{ps.fleet.Load(), ps.local.Load()} {
		if p != nil {
			out = append(out, *p)
		}
	}
	return out
}

// PauseFleet records in the backend that automation type typ is paused (paused false:
// resumed) fleet-wide, and returns once this host obeys it; every other host sharing
// the backend obeys within about DesiredPoll. The type need not be loaded here (a
// fleet's hosts may run different plugins), but its name must be a valid type. A local
// pause (Pause) is a layer of its own: a fleet-wide resume leaves it in force. Its errors
// are the backend's, or the record's bound (desired.MaxEntries pauses).
func (h *Host) PauseFleet(ctx context.Context, typ string, paused bool) error {
	if err := checkType(typ); err != nil {
		return fmt.Errorf("host: pause: %w", err)
	}
	return h.updateDesired(ctx, desired.Types, typ, paused)
}

// PauseQueue pauses (paused false: resumes) every type consuming queue: fleet-wide,
// recorded in the backend as PauseFleet does, or, when local, on this host only (each
// consuming type loaded here, as Pause). It returns the types loaded here that consume
// queue.
func (h *Host) PauseQueue(ctx context.Context, queue string, local, paused bool) ([]string, error) {
	if queue == "" {
		return nil, fmt.Errorf("host: pause: no queue named")
	}
	var types []string
	for _, p := range h.loaded() {
		if p.desc.Consumes != nil && p.desc.Consumes.Name == queue {
			types = append(types, p.info.Type)
			if local {
				p.pause.local.Store(h.localPause(paused, queue))
			}
		}
	}
	if local {
		return types, nil
	}
	return types, h.updateDesired(ctx, desired.Queues, queue, paused)
}

// localPause is the local pause an act records: nil for a resume.
func (h *Host) localPause(paused bool, queue string) *Pause {
	if !paused {
		return nil
	}
	return &Pause{Scope: ScopeLocal, By: h.cfg.Instance, At: time.Now(), Queue: queue}
}

// updateDesired records (or, paused false, removes) the pause of name in the map of kind
// k of the fleet's desired state, and applies the state written to this host.
func (h *Host) updateDesired(ctx context.Context, k desired.Kind, name string, paused bool) error {
	var p *desired.Pause
	if paused {
		p = &desired.Pause{By: h.cfg.Instance, At: time.Now()}
	}
	s, err := desired.Update(ctx, h.cfg.Backend, func(s *desired.State) error { return s.Set(k, name, p) })
	if err != nil {
		return fmt.Errorf("host: pause %s fleet-wide: %w", name, err)
	}
	h.applyDesired(s)
	return nil
}

// applyDesired makes the loaded plugins obey s, and keeps s for the plugins a reload
// loads later.
func (h *Host) applyDesired(s desired.State) {
	h.pmu.Lock()
	defer h.pmu.Unlock()
	// Two appliers (the watcher and an operator's act) may race: the newer State wins.
	if cur := h.desired; cur != nil && cur.Version > s.Version {
		return
	}
	h.desired = &s
	for _, p := range h.plugins {
		p.pause.fleet.Store(fleetPause(s, p))
	}
}

// fleetPause is the pause s holds p by, or nil.
func fleetPause(s desired.State, p *plugin) *Pause {
	queue := ""
	if p.desc.Consumes != nil {
		queue = p.desc.Consumes.Name
	}
	dp, ofQueue, ok := s.Paused(p.info.Type, queue)
	if !ok {
		return nil
	}
	out := &Pause{Scope: ScopeFleet, By: dp.By, At: dp.At}
	if ofQueue {
		out.Queue = queue
	}
	return out
}

// readDesired reads and applies the fleet's desired state once: Run's start, before
// any slot claims. A failure is logged and the host starts obeying nothing fleet-wide
// until the watcher reads it.
func (h *Host) readDesired(ctx context.Context) int64 {
	s, err := desired.Read(ctx, h.cfg.Backend)
	if err != nil {
		h.cfg.Logger.Warn("host: cannot read the fleet's desired state at start; its slots start unpaused until it is read", "err", err)
		return -1
	}
	h.applyDesired(s)
	return s.Version
}

// watchDesired applies the fleet's desired state every DesiredPoll until ctx is done.
func (h *Host) watchDesired(ctx context.Context, applied int64) {
	desired.Watch(ctx, h.cfg.Backend, desired.Poll, applied, h.applyDesired, h.cfg.Logger)
}
