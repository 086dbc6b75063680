package validate

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/primitives"
)

// Queue is a registered queue contract: the versions of its payload schema this host's
// plugins declare, and the fleet's other live versions. A value is admitted when it is
// valid under any of them (host/RATIONALE.md, "When may a contract change?").
type Queue struct {
	Name string

	local atomic.Pointer[[]*Schema] // this host's versions, newest first; never empty while registered
	fleet atomic.Pointer[[]*Schema] // the fleet's other live versions; nil for none
}

// Versions are the canonical schemas of q's versions on this host, newest first.
func (q *Queue) Versions() [][]byte { return canonicals(*q.local.Load()) }

// SetFleet sets the other versions of q's contract live in the fleet.
func (q *Queue) SetFleet(versions []*Schema) { q.fleet.Store(&versions) }

// Admit checks a payload for q: it is valid under one of this host's versions, or under
// one of the fleet's other live versions, so that a payload written under either side's
// schema of a rolling upgrade is accepted. A refusal is the newest local version's; with
// details non-nil, it also lists every violation of that version there.
func (q *Queue) Admit(what string, raw []byte, details *[]Violation) *abi.Error {
	local := *q.local.Load()
	var e *abi.Error
	if details != nil {
		e, *details = local[0].Check(what, raw)
	} else {
		e = local[0].Validate(what, raw)
	}
	if e == nil {
		return nil
	}
	others := local[1:]
	if f := q.fleet.Load(); f != nil {
		others = append(slices.Clip(others), *f...)
	}
	for _, s := range others {
		if s.Validate(what, raw) == nil {
			if details != nil {
				*details = nil
			}
			return nil
		}
	}
	return e
}

// PoolVersion is one version of a pool's contract: its payload and tags schemas.
type PoolVersion struct {
	Payload, Tags *Schema
}

// canonical is v as the fleet records it: {"payload_schema", "tags_schema"}, canonical.
func (v PoolVersion) canonical() []byte { return PoolDoc(v.Payload.Canonical, v.Tags.Canonical) }

// PoolDoc is the canonical record of a pool version with schemas payload and tags.
func PoolDoc(payload, tags []byte) []byte {
	doc, _ := json.Marshal(map[string]json.RawMessage{"payload_schema": payload, "tags_schema": tags})
	c, _ := Canonical(doc) // two JSON values under two keys: canonical
	return c
}

// Pool is a registered pool contract: the versions this host's plugins declare, and the
// fleet's other live versions. A put or a where filter is admitted when it is valid
// under any of them, as a queue's payload is.
type Pool struct {
	Name string

	local atomic.Pointer[[]PoolVersion] // newest first; never empty while registered
	fleet atomic.Pointer[[]PoolVersion]
}

// Versions are the canonical records of p's versions on this host, newest first.
func (p *Pool) Versions() [][]byte {
	var out [][]byte
	for _, v := range *p.local.Load() {
		out = append(out, v.canonical())
	}
	return out
}

// SetFleet sets the other versions of p's contract live in the fleet.
func (p *Pool) SetFleet(versions []PoolVersion) { p.fleet.Store(&versions) }

// each calls try with every live version of p, this host's newest first, until one
// admits; the refusal is the newest local version's.
func (p *Pool) each(try func(PoolVersion) *abi.Error) *abi.Error {
	versions := *p.local.Load()
	if f := p.fleet.Load(); f != nil {
		versions = append(slices.Clip(versions), *f...)
	}
	var first *abi.Error
	for i, v := range versions {
		e := try(v)
		if e == nil {
			return nil
		}
		if i == 0 {
			first = e
		}
	}
	return first
}

// Put checks a put's payload and tags, both under one live version, and converts the
// tags (Tags).
func (p *Pool) Put(payload, tags json.RawMessage) (primitives.Tags, *abi.Error) {
	var out primitives.Tags
	e := p.each(func(v PoolVersion) *abi.Error {
		if e := v.Payload.Validate("payload", payload); e != nil {
			return e
		}
		t, e := Tags(v.Tags, tags)
		out = t
		return e
	})
	return out, e
}

// Where checks a where filter against a live version's tags schema and converts it
// (Where).
func (p *Pool) Where(w abi.Where) (primitives.Tags, *abi.Error) {
	var out primitives.Tags
	e := p.each(func(v PoolVersion) *abi.Error {
		t, e := Where(v.Tags, w)
		out = t
		return e
	})
	return out, e
}

// Registry holds the named contracts of one host, each with the versions its loaded
// plugins declare: during a reload, the running version's and the new build's. The zero
// value is not ready; use NewRegistry. It is safe for concurrent use.
type Registry struct {
	// compatible reports whether schema new may be live beside schema old; nil allows
	// only equal schemas.
	compatible func(old, new []byte) error

	mu     sync.RWMutex
	pools  map[string]*poolEntry  // guarded by mu
	queues map[string]*queueEntry // guarded by mu
}

// queueEntry is a registered queue with the holds on each of its local versions.
type queueEntry struct {
	q        *Queue
	versions []*held[*Schema] // oldest first
}

type poolEntry struct {
	p        *Pool
	versions []*held[PoolVersion] // oldest first
}

// held is a local version and the registrations that hold it.
type held[T any] struct {
	v       T
	canon   []byte
	first   string // the plugin that registered it first, for an error
	holders map[*Registration]struct{}
}

// Registration is what one plugin registered: Release drops its holds.
type Registration struct {
	r      *Registry
	owner  string // the plugin's type
	queues []string
	pools  []string
	// schemas are the queue schemas it declared, by queue name: immutable after Register.
	schemas map[string]*Schema
}

// QueueSchema is the compiled payload schema the plugin declared for queue name (the
// queue it consumes, or one it submits to), or nil when it declared none.
func (reg *Registration) QueueSchema(name string) *Schema {
	if reg == nil {
		return nil
	}
	return reg.schemas[name]
}

// NewRegistry returns an empty registry. compatible (compat.Check under the fleet's
// mode) decides whether a version may be registered beside another one: nil allows only
// equal schemas.
func NewRegistry(compatible func(old, new []byte) error) *Registry {
	return &Registry{compatible: compatible, pools: map[string]*poolEntry{}, queues: map[string]*queueEntry{}}
}

// Pool returns the registered pool contract, or nil.
func (r *Registry) Pool(name string) *Pool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if e := r.pools[name]; e != nil {
		return e.p
	}
	return nil
}

// Queue returns the registered queue contract, or nil.
func (r *Registry) Queue(name string) *Queue {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if e := r.queues[name]; e != nil {
		return e.q
	}
	return nil
}

// Queues lists the registered queue contracts, by name.
func (r *Registry) Queues() []*Queue {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return byName(r.queues, func(e *queueEntry) *Queue { return e.q })
}

// Pools lists the registered pool contracts, by name.
func (r *Registry) Pools() []*Pool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return byName(r.pools, func(e *poolEntry) *Pool { return e.p })
}

// byName lists what get takes of each entry of m, in name order.
func byName[E, T any](m map[string]E, get func(E) T) []T {
	names := slices.Sorted(maps.Keys(m))
	out := make([]T, len(names))
	for i, n := range names {
		out[i] = get(m[n])
	}
	return out
}

// Register adds every contract that d declares, all or nothing, held by the returned
// Registration until its Release. A schema equal to one already registered (by
// canonical form) holds that version; a different one must be compatible with every
// version registered, checked per schema (a pool's payload and tags apart), or the
// error names the contract, the schema, the plugins, the version's first differing JSON
// pointer and the compatibility rule it breaks:
//
//	validate: plugin "b" declares queue "jobs" with a payload schema that is not compatible
//	with the one registered by plugin "a": compat: type-changed at /properties/site/type (FULL): ...
//
// Within one plugin, a contract declared twice (consumed and submitted to) must be
// declared alike. Compiling each distinct schema happens once: a version already
// registered keeps its compiled schemas.
func (r *Registry) Register(d *abi.Describe) (*Registration, error) {
	owner := d.Type
	queues := map[string]*Schema{}
	pools := map[string]PoolVersion{}

	r.mu.Lock()
	defer r.mu.Unlock()

	addQueue := func(q abi.QueueContract) error {
		canon, err := Canonical(q.Payload)
		if err != nil {
			return fmt.Errorf("validate: plugin %q: queue %q payload schema: %v", owner, q.Name, err)
		}
		if seen, ok := queues[q.Name]; ok {
			return differs(owner, "queue", q.Name, "payload", canon, seen.Canonical, owner, nil)
		}
		s, err := r.version(owner, "queue", q.Name, "payload", canon, r.queueVersions(q.Name))
		if err != nil {
			return err
		}
		queues[q.Name] = s
		return nil
	}
	if d.Consumes != nil {
		if err := addQueue(*d.Consumes); err != nil {
			return nil, err
		}
	}
	for _, q := range d.Submits {
		if err := addQueue(q); err != nil {
			return nil, err
		}
	}
	for _, p := range d.Pools {
		var v PoolVersion
		for _, part := range []struct {
			which  string
			schema json.RawMessage
			out    **Schema
			of     func(PoolVersion) *Schema
		}{
			{"payload", p.Payload, &v.Payload, func(v PoolVersion) *Schema { return v.Payload }},
			{"tags", p.Tags, &v.Tags, func(v PoolVersion) *Schema { return v.Tags }},
		} {
			canon, err := Canonical(part.schema)
			if err != nil {
				return nil, fmt.Errorf("validate: plugin %q: pool %q %s schema: %v", owner, p.Name, part.which, err)
			}
			var live []registered
			if e := r.pools[p.Name]; e != nil {
				for _, h := range e.versions {
					live = append(live, registered{part.of(h.v), h.first})
				}
			}
			if *part.out, err = r.version(owner, "pool", p.Name, part.which, canon, live); err != nil {
				return nil, err
			}
		}
		pools[p.Name] = v
	}

	reg := &Registration{r: r, owner: owner, schemas: queues}
	for name, s := range queues {
		e := r.queues[name]
		if e == nil {
			e = &queueEntry{q: &Queue{Name: name}}
			r.queues[name] = e
		}
		e.versions = hold(e.versions, s, s.Canonical, reg)
		e.publish()
		reg.queues = append(reg.queues, name)
	}
	for name, v := range pools {
		e := r.pools[name]
		if e == nil {
			e = &poolEntry{p: &Pool{Name: name}}
			r.pools[name] = e
		}
		e.versions = hold(e.versions, v, v.canonical(), reg)
		e.publish()
		reg.pools = append(reg.pools, name)
	}
	return reg, nil
}

// registered is one schema registered, and a plugin that holds it, for an error.
type registered struct {
	s     *Schema
	owner string
}

func (r *Registry) queueVersions(name string) []registered {
	var live []registered
	if e := r.queues[name]; e != nil {
		for _, h := range e.versions {
			live = append(live, registered{h.v, h.first})
		}
	}
	return live
}

// version is the compiled schema canon of a contract's part (which), given its
// versions registered (live): the registered one when canon is among them, else a new
// compile, which must be compatible with each of them.
func (r *Registry) version(owner, contract, name, which string, canon []byte, live []registered) (*Schema, error) {
	for _, l := range live {
		if _, _, _, same := FirstDiff(canon, l.s.Canonical); same {
			return l.s, nil
		}
	}
	for _, l := range live {
		var err error
		if r.compatible != nil {
			err = r.compatible(l.s.Canonical, canon)
		}
		if r.compatible == nil || err != nil {
			return nil, differs(owner, contract, name, which, canon, l.s.Canonical, l.owner, err)
		}
	}
	s, err := Compile(contract+" "+name+" "+which, canon)
	if err != nil {
		return nil, fmt.Errorf("validate: plugin %q: %w", owner, err)
	}
	return s, nil
}

// hold adds reg as a holder of v (canonical canon) in versions, adding the version when
// it is new.
func hold[T any](versions []*held[T], v T, canon []byte, reg *Registration) []*held[T] {
	for _, h := range versions {
		if string(h.canon) == string(canon) {
			h.holders[reg] = struct{}{}
			return versions
		}
	}
	return append(versions, &held[T]{v: v, canon: canon, first: reg.owner, holders: map[*Registration]struct{}{reg: {}}})
}

// release drops reg's hold on versions, and the versions left with none.
func release[T any](versions []*held[T], reg *Registration) []*held[T] {
	return slices.DeleteFunc(versions, func(h *held[T]) bool {
		delete(h.holders, reg)
		return len(h.holders) == 0
	})
}

// newestFirst lists the values of versions, newest first.
func newestFirst[T any](versions []*held[T]) []T {
	out := make([]T, 0, len(versions))
	for i := len(versions) - 1; i >= 0; i-- {
		out = append(out, versions[i].v)
	}
	return out
}

func (e *queueEntry) publish() {
	v := newestFirst(e.versions)
	e.q.local.Store(&v)
}

func (e *poolEntry) publish() {
	v := newestFirst(e.versions)
	e.p.local.Store(&v)
}

// Release drops what reg holds: a version no other registration holds is no longer
// admitted here, and a contract left with no version is no longer registered. It is
// idempotent.
func (reg *Registration) Release() {
	if reg == nil {
		return
	}
	r := reg.r
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, name := range reg.queues {
		if e := r.queues[name]; e != nil {
			if e.versions = release(e.versions, reg); len(e.versions) == 0 {
				delete(r.queues, name)
			} else {
				e.publish()
			}
		}
	}
	for _, name := range reg.pools {
		if e := r.pools[name]; e != nil {
			if e.versions = release(e.versions, reg); len(e.versions) == 0 {
				delete(r.pools, name)
			} else {
				e.publish()
			}
		}
	}
	reg.queues, reg.pools = nil, nil
}

// canonicals lists the canonical forms of schemas.
func canonicals(schemas []*Schema) [][]byte {
	out := make([][]byte, len(schemas))
	for i, s := range schemas {
		out[i] = s.Canonical
	}
	return out
}

// differs is the error for a declared schema (canonical) that is not the registered
// one and, with rule non-nil, breaks it.
func differs(owner, contract, name, which string, declared, reg []byte, other string, rule error) error {
	path, here, there, same := FirstDiff(declared, reg)
	if same {
		return nil
	}
	return &ConflictError{Plugin: owner, Contract: contract, Name: name, Schema: which,
		Other: fmt.Sprintf("plugin %q", other), OtherType: other, Registered: reg, Path: path, Here: here, There: there, Rule: rule}
}

// ConflictError says that a plugin declares a contract with a schema that differs from
// one already registered on this host and is not compatible with it.
type ConflictError struct {
	Plugin   string // the plugin being loaded
	Contract string // "pool" or "queue"
	Name     string // the pool or queue name
	Schema   string // "payload" or "tags"
	Other    string // who registered it: `plugin "a"`
	// OtherType is the type of the plugin that registered it, and Registered the
	// registered schema (canonical), for the host to name its fleet version.
	OtherType  string
	Registered []byte
	Path       string // JSON pointer of the first difference
	Here       string // the declared value there
	There      string // the registered value there
	// Rule is the compatibility rule the schema breaks (a *compat.Error, with its own
	// pointer); nil when the registry compares for equality (a contract one plugin
	// declares twice).
	Rule error
}

func (e *ConflictError) Error() string {
	if e.Rule != nil {
		return fmt.Sprintf("validate: plugin %q declares %s %q with a %s schema that is not compatible with the one registered by %s: %v (first difference at %s: %s here, %s there)",
			e.Plugin, e.Contract, e.Name, e.Schema, e.Other, e.Rule, e.Path, e.Here, e.There)
	}
	return fmt.Sprintf("validate: plugin %q declares %s %q with a %s schema that differs from the one registered by %s, at %s: %s here, %s there",
		e.Plugin, e.Contract, e.Name, e.Schema, e.Other, e.Path, e.Here, e.There)
}

func (e *ConflictError) Unwrap() error { return e.Rule }
