// Package desired is the fleet's desired state: the operator's acts that every daemon
// sharing a backend converges to, kept as one record in the backend that each daemon
// reads on every poll. Today it holds pauses, of automation types and of queues'
// consumers; another fleet-wide act (slot counts per type, say) is one more field of
// State, read by the same poll. See host/RATIONALE.md, "Where does the fleet's desired
// state live?".
//
//	st, err := desired.Update(ctx, b, func(s *desired.State) error {
//		return s.Set(desired.Types, "poller", &desired.Pause{By: "host-a", At: time.Now()})
//	})
package desired

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/fleethost/fleet/primitives"
)

// Namespace is the KV namespace of the record, and the name of the lock its writers
// hold. No grant reaches either (package hostfn reserves it): a plugin can neither read
// nor forge the operator's acts.
const Namespace = "fleet-desired"

// recordKey is the one key of Namespace: the whole State, JSON.
const recordKey = "state"

// MaxEntries bounds each map of State, so that the record, read on every poll by every
// daemon, stays small whatever an operator (or a script) names.
const MaxEntries = 1000

// Poll is how often Watch reads the record: one GET each, and every daemon obeys an act
// within about a poll.
const Poll = 500 * time.Millisecond

// Lock times of Update: how long it holds the lock at most, and waits for it.
const (
	lockHold = 5 * time.Second
	lockWait = 5 * time.Second
)

// Pause is one recorded pause: who recorded it and when.
type Pause struct {
	By string    `json:"by"` // the daemon (its instance name) the operator asked
	At time.Time `json:"at"`
}

// State is the fleet's desired state. The zero State desires nothing.
type State struct {
	// Version counts the writes; a reader applies a record whose Version differs from
	// the last it applied.
	Version int64 `json:"version"`
	// Types are the paused automation types, by type.
	Types map[string]Pause `json:"types,omitempty"`
	// Queues are the paused queues, by name: every type consuming one is paused.
	Queues map[string]Pause `json:"queues,omitempty"`
}

// Kind names one of State's maps for Set.
type Kind int

const (
	Types  Kind = iota // State.Types
	Queues             // State.Queues
)

// Has reports whether name has an entry in the map of kind k.
func (s State) Has(k Kind, name string) bool {
	_, ok := (*s.of(k))[name]
	return ok
}

// of is the map of kind k.
func (s *State) of(k Kind) *map[string]Pause {
	if k == Queues {
		return &s.Queues
	}
	return &s.Types
}

// Set records p for name in the map of kind k, or removes name's entry when p is nil. A
// new entry past MaxEntries is an error.
func (s *State) Set(k Kind, name string, p *Pause) error {
	m := s.of(k)
	if p == nil {
		delete(*m, name)
		return nil
	}
	if *m == nil {
		*m = map[string]Pause{}
	}
	if _, ok := (*m)[name]; !ok && len(*m) >= MaxEntries {
		return fmt.Errorf("desired: %d pauses already recorded, the most the fleet keeps: resume one first", MaxEntries)
	}
	(*m)[name] = *p
	return nil
}

// Paused returns the pause in force on automation type typ, which consumes queue ("":
// none): its type's own, else its queue's (queue true).
func (s State) Paused(typ, queue string) (p Pause, ofQueue, ok bool) {
	if p, ok := s.Types[typ]; ok {
		return p, false, true
	}
	if queue != "" {
		if p, ok := s.Queues[queue]; ok {
			return p, true, true
		}
	}
	return Pause{}, false, false
}

// Read returns the recorded State: the zero State when none is.
func Read(ctx context.Context, b primitives.KV) (State, error) {
	var s State
	raw, ok, err := b.KVGet(ctx, Namespace, recordKey)
	if err != nil || !ok {
		return s, err
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return State{}, fmt.Errorf("desired: the record %s/%s is not a state: %w", Namespace, recordKey, err)
	}
	return s, nil
}

// Update changes the recorded State with fn, holding the lock Namespace so that two
// operators' acts at once both land, and returns the State written (Version one more).
// When fn fails nothing is written.
func Update(ctx context.Context, b primitives.Backend, fn func(*State) error) (s State, err error) {
	l, ok, err := b.LockAcquire(ctx, Namespace, lockHold, lockWait, primitives.NameQuota{})
	if err != nil {
		return State{}, fmt.Errorf("desired: lock: %w", err)
	}
	if !ok {
		return State{}, fmt.Errorf("desired: lock %q still held after %v", Namespace, lockWait)
	}
	defer func() {
		if _, rerr := b.LockRelease(context.WithoutCancel(ctx), Namespace, l.Token); rerr != nil && err == nil {
			err = fmt.Errorf("desired: unlock: %w", rerr)
		}
	}()
	if s, err = Read(ctx, b); err != nil {
		return State{}, err
	}
	if err := fn(&s); err != nil {
		return State{}, err
	}
	s.Version++
	raw, err := json.Marshal(s)
	if err != nil {
		return State{}, fmt.Errorf("desired: %w", err)
	}
	if err := b.KVSet(ctx, Namespace, recordKey, raw, 0, primitives.KVQuota{}); err != nil {
		return State{}, fmt.Errorf("desired: write: %w", err)
	}
	return s, nil
}

// Watch reads the record every poll until ctx is done, and calls apply with each State
// whose Version differs from the last one applied, which starts as applied (the Version
// the caller applied before Watch). A failed read keeps the last State in force and is
// logged once per failing spell.
func Watch(ctx context.Context, b primitives.KV, poll time.Duration, applied int64, apply func(State), log *slog.Logger) {
	last, failing := applied, false
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s, err := Read(ctx, b)
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			if !failing {
				log.Warn("desired: cannot read the fleet's desired state; the last one read stays in force", "err", err)
			}
			failing = true
			continue
		case failing:
			log.Info("desired: reading the fleet's desired state again")
			failing = false
		}
		if s.Version != last {
			last = s.Version
			apply(s)
		}
	}
}
