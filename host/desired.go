package host

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/fleethost/fleet/host/internal/desired"
)

// Pause scopes: where a pause was recorded, and so where it acts.
const (
	// ScopeFleet is a pause recorded in the backend's desired state: every host sharing
	// the backend obeys it within about half a second (its next read of the desired
	// state), and at its start before its slots claim.
	ScopeFleet = "fleet"
	// ScopeLocal is a pause of this host only (Pause), which ends with the process.
	ScopeLocal = "local"
)

// Pause is one pause in force on a type, as Plugin.Pauses lists it.
type Pause struct {
	Scope string    `json:"scope"` // ScopeFleet or ScopeLocal
	By    string    `json:"by"`    // the instance (Config.Instance) of the host the operator asked
	At    time.Time `json:"at"`    // when it was recorded
	// Queue is set when the pause is of the queue the type consumes (PauseQueue), not of
	// the type itself.
	Queue string `json:"queue,omitempty"`
}

// pauses is a plugin's two pause layers; paused is true while either is in force.
type pauses struct {
	local atomic.Pointer[Pause] // nil: not paused here
	fleet atomic.Pointer[Pause] // nil: the fleet's desired state does not pause it
}

// paused is the slots' check, on every poll: two atomic loads.
func (ps *pauses) paused() bool { return ps.local.Load() != nil || ps.fleet.Load() != nil }

// list is the pauses in force, the fleet's first.
func (ps *pauses) list() []Pause {
	var out []Pause
	for _, p := range []*Pause{ps.fleet.Load(), ps.local.Load()} {
		if p != nil {
			out = append(out, *p)
		}
	}
	return out
}

// ErrNotHere is the error of a pause of a type (or a queue) that no plugin loaded on this
// host is (or consumes), and of its resume when no pause of it is recorded either:
// errors.Is finds it. A fleet-wide pause is asked of a host that runs the type, so that
// a typo cannot record a pause, kept with no expiry, of a type that no host runs.
var ErrNotHere = errors.New("host: not loaded on this host")

// Pause stops the slots of a plugin type on this host from claiming new tasks (or
// ticking); calls in flight finish. Observers see the slots paused (the plane: draining,
// phase paused; see slotstate). Unknown types are an error. PauseFleet pauses a type on
// every host sharing the backend.
func (h *Host) Pause(typ string) error {
	p := h.pluginOf(typ)
	if p == nil {
		return fmt.Errorf("host: pause: no plugin of type %q", typ)
	}
	p.pause.local.Store(h.localPause(true, ""))
	return nil
}

// Resume undoes Pause; a fleet-wide pause (PauseFleet) stays in force.
func (h *Host) Resume(typ string) error {
	p := h.pluginOf(typ)
	if p == nil {
		return fmt.Errorf("host: resume: no plugin of type %q", typ)
	}
	p.pause.local.Store(nil)
	return nil
}

// PauseFleet records in the backend that automation type typ is paused (paused false:
// resumed) fleet-wide, and returns once this host obeys it; every other host sharing the
// backend obeys within about half a second (its next read of the desired state), and a host that starts later before its slots
// claim. A pause needs typ loaded here; a resume, typ loaded here or its pause recorded
// (ErrNotHere otherwise). A local pause (Pause) is a layer of its own: a fleet-wide
// resume leaves it in force. Its other errors are the backend's, or the record's bound
// (desired.MaxEntries pauses).
func (h *Host) PauseFleet(ctx context.Context, typ string, paused bool) error {
	return h.updateDesired(ctx, desired.Types, typ, h.pluginOf(typ) != nil, paused)
}

// PauseQueue pauses (paused false: resumes) every type consuming queue: fleet-wide,
// recorded in the backend as PauseFleet does (a type that consumes queue pauses on every
// host, whichever types each runs), or, when local, on this host only (each consuming
// type loaded here, as Pause). It returns the types loaded here that consume queue. A
// pause needs one here, as does a local resume; a fleet-wide resume, one here or the
// queue's pause recorded (ErrNotHere otherwise).
func (h *Host) PauseQueue(ctx context.Context, queue string, local, paused bool) ([]string, error) {
	var types []string
	for _, p := range h.loaded() {
		if p.desc.Consumes != nil && p.desc.Consumes.Name == queue {
			types = append(types, p.info.Type)
			if local {
				p.pause.local.Store(h.localPause(paused, queue))
			}
		}
	}
	switch {
	case local && types == nil:
		return nil, fmt.Errorf("%w: no plugin consumes queue %q", ErrNotHere, queue)
	case local:
		return types, nil
	}
	return types, h.updateDesired(ctx, desired.Queues, queue, types != nil, paused)
}

// localPause is the local pause an act records: nil for a resume.
func (h *Host) localPause(paused bool, queue string) *Pause {
	if !paused {
		return nil
	}
	return &Pause{Scope: ScopeLocal, By: h.cfg.Instance, At: time.Now(), Queue: queue}
}

// updateDesired records (or, paused false, removes) the pause of name in the map of kind
// k of the fleet's desired state, and applies the state written to this host. here says
// name is loaded here (a type, or a queue's consumer): without it only the removal of a
// recorded pause is done.
func (h *Host) updateDesired(ctx context.Context, k desired.Kind, name string, here, paused bool) error {
	what := map[desired.Kind]string{desired.Types: "type", desired.Queues: "queue"}[k]
	var p *desired.Pause
	if paused {
		p = &desired.Pause{By: h.cfg.Instance, At: time.Now()}
	}
	s, err := desired.Update(ctx, h.cfg.Backend, func(s *desired.State) error {
		if !here && (paused || !s.Has(k, name)) {
			return fmt.Errorf("%w: no plugin of %s %q here, and no fleet-wide pause of it is recorded", ErrNotHere, what, name)
		}
		return s.Set(k, name, p)
	})
	if err != nil {
		if errors.Is(err, ErrNotHere) {
			return err
		}
		return fmt.Errorf("host: fleet-wide pause of %s %q: %w", what, name, err)
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

// inheritPauses gives p, which replaces old (nil: none), the pauses in force: old's local
// one (a new version of a paused type stays paused) and the fleet's desired state last
// applied. A reload calls it before p's slots start, so that none claims under a pause,
// and setPlugin again as p joins the loaded set, which the next applyDesired reaches.
// Call it holding pmu.
func (h *Host) inheritPauses(p, old *loadedPlugin) {
	if old != nil {
		p.pause.local.Store(old.pause.local.Load())
	}
	if h.desired != nil {
		p.pause.fleet.Store(fleetPause(*h.desired, p))
	}
}

// fleetPause is the pause of s in force on p, or nil.
func fleetPause(s desired.State, p *loadedPlugin) *Pause {
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

// watchDesired applies the fleet's desired state every desired.Poll until ctx is done.
func (h *Host) watchDesired(ctx context.Context, applied int64) {
	desired.Watch(ctx, h.cfg.Backend, desired.Poll, applied, h.applyDesired, h.cfg.Logger)
}
