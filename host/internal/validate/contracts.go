package validate

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/fleethost/fleet/abi"
)

// Pool is a registered pool contract. It is immutable once registered.
type Pool struct {
	Name    string
	Owner   string // the plugin type that registered it first
	Payload *Schema
	Tags    *Schema
}

// Queue is a registered queue contract. Its fields are immutable once registered.
type Queue struct {
	Name    string
	Owner   string
	Payload *Schema

	// fleet holds the other versions of the contract live in the fleet, each compatible
	// with Payload (host/RATIONALE.md, "When may a contract change?"); nil for none.
	fleet atomic.Pointer[[]*Schema]
}

// SetFleet sets the other versions of q's contract live in the fleet.
func (q *Queue) SetFleet(versions []*Schema) { q.fleet.Store(&versions) }

// Admit checks a payload for q: it is valid under Payload, or under one of the fleet's
// other live versions, so that a payload written under either side's schema of a rolling
// upgrade is accepted. A refusal is Payload's; with details non-nil, it also lists
// every violation of Payload there.
func (q *Queue) Admit(what string, raw []byte, details *[]Violation) *abi.Error {
	var e *abi.Error
	if details != nil {
		e, *details = q.Payload.Check(what, raw)
	} else {
		e = q.Payload.Validate(what, raw)
	}
	if e == nil {
		return nil
	}
	if others := q.fleet.Load(); others != nil {
		for _, s := range *others {
			if s.Validate(what, raw) == nil {
				if details != nil {
					*details = nil
				}
				return nil
			}
		}
	}
	return e
}

// Registry holds the named contracts of one host. The zero value is not ready; use
// NewRegistry. It is safe for concurrent use.
type Registry struct {
	mu     sync.RWMutex
	pools  map[string]*Pool  // guarded by mu
	queues map[string]*Queue // guarded by mu
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{pools: map[string]*Pool{}, queues: map[string]*Queue{}}
}

// Pool returns the registered pool contract, or nil.
func (r *Registry) Pool(name string) *Pool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.pools[name]
}

// Queue returns the registered queue contract, or nil.
func (r *Registry) Queue(name string) *Queue {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.queues[name]
}

// Register adds every contract that d declares, all or nothing. A pool or queue already
// registered must have the same canonical schemas; otherwise the error names the
// contract, the schema, both plugins, and the first JSON pointer where they differ:
//
//	validate: plugin "b" declares queue "jobs" with a payload schema that differs from the
//	one registered by plugin "a", at /properties/site/type: "integer" here, "string" there
//
// Compiling each distinct schema happens once: a contract already registered keeps its
// compiled schemas.
func (r *Registry) Register(d *abi.Describe) error {
	owner := d.Type
	pools := map[string]*Pool{}
	queues := map[string]*Queue{}

	r.mu.Lock()
	defer r.mu.Unlock()

	addQueue := func(q abi.QueueContract) error {
		if seen, ok := queues[q.Name]; ok {
			return sameSchema(owner, "queue", q.Name, "payload", q.Payload, seen.Payload, owner)
		}
		if reg, ok := r.queues[q.Name]; ok {
			if err := sameSchema(owner, "queue", q.Name, "payload", q.Payload, reg.Payload, reg.Owner); err != nil {
				return err
			}
			queues[q.Name] = reg
			return nil
		}
		s, err := Compile("queue "+q.Name+" payload", q.Payload)
		if err != nil {
			return fmt.Errorf("validate: plugin %q: %w", owner, err)
		}
		queues[q.Name] = &Queue{Name: q.Name, Owner: owner, Payload: s}
		return nil
	}
	if d.Consumes != nil {
		if err := addQueue(*d.Consumes); err != nil {
			return err
		}
	}
	for _, q := range d.Submits {
		if err := addQueue(q); err != nil {
			return err
		}
	}
	for _, p := range d.Pools {
		if reg, ok := r.pools[p.Name]; ok {
			if err := sameSchema(owner, "pool", p.Name, "payload", p.Payload, reg.Payload, reg.Owner); err != nil {
				return err
			}
			if err := sameSchema(owner, "pool", p.Name, "tags", p.Tags, reg.Tags, reg.Owner); err != nil {
				return err
			}
			pools[p.Name] = reg
			continue
		}
		payload, err := Compile("pool "+p.Name+" payload", p.Payload)
		if err != nil {
			return fmt.Errorf("validate: plugin %q: %w", owner, err)
		}
		tags, err := Compile("pool "+p.Name+" tags", p.Tags)
		if err != nil {
			return fmt.Errorf("validate: plugin %q: %w", owner, err)
		}
		pools[p.Name] = &Pool{Name: p.Name, Owner: owner, Payload: payload, Tags: tags}
	}
	for n, p := range pools {
		r.pools[n] = p
	}
	for n, q := range queues {
		r.queues[n] = q
	}
	return nil
}

// sameSchema compares a declared schema with a registered one.
func sameSchema(owner, contract, name, which string, declared []byte, reg *Schema, regOwner string) error {
	canon, err := Canonical(declared)
	if err != nil {
		return fmt.Errorf("validate: plugin %q: %s %q %s schema: %v", owner, contract, name, which, err)
	}
	path, here, there, same := FirstDiff(canon, reg.Canonical)
	if same {
		return nil
	}
	return &ConflictError{Plugin: owner, Contract: contract, Name: name, Schema: which,
		Other: fmt.Sprintf("plugin %q", regOwner), Path: path, Here: here, There: there}
}

// ConflictError says that a plugin declares a contract with a schema that differs from
// the one already registered.
type ConflictError struct {
	Plugin   string // the plugin being loaded
	Contract string // "pool" or "queue"
	Name     string // the pool or queue name
	Schema   string // "payload" or "tags"
	Other    string // who registered it: `plugin "a"`, or "the fleet"
	Path     string // JSON pointer of the first difference
	Here     string // the declared value there
	There    string // the registered value there
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("validate: plugin %q declares %s %q with a %s schema that differs from the one registered by %s, at %s: %s here, %s there",
		e.Plugin, e.Contract, e.Name, e.Schema, e.Other, e.Path, e.Here, e.There)
}
