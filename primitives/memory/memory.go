// Package memory is the embedded backend: fleet state kept in the process, for one machine.
//
// It is the default of `fleet-host run` when no backend URL is given. Everything lives in
// maps guarded by mutexes (one per primitive family, and one per named pool or queue), so
// state is lost when the process ends and is never shared with another process. It
// implements the same contract as the Redis backend, which the primitivestest suite proves.
package memory

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/fleethost/fleet/primitives"
)

// Options configures a Backend. The zero value is ready to use.
type Options struct {
	// Clock tells the time for every TTL, lease, retry delay and timestamp the backend
	// keeps. Tests inject a simulated clock and advance it instead of sleeping:
	//
	//	b := memory.New(memory.Options{Clock: fake})
	//
	// It is read, never slept on: a LockAcquire with wait > 0 still waits in real time
	// (primitives.RetryAcquire), while each of its tries reads Clock.
	// default: primitives.SystemClock{}
	Clock primitives.Clock
}

func (o *Options) init() {
	if o.Clock == nil {
		o.Clock = primitives.SystemClock{}
	}
}

// Backend is the in-process primitives.Backend. Create it with New; it is safe for
// concurrent use. Expired items, keys and leases are dropped lazily, when a later call
// touches the same pool, queue, namespace or lock, so the Backend runs no goroutine.
//
// # Notes
//
//   - Pools index their unleased items by tag, so that PoolClaim with where costs
//     O(smallest matching set), whatever the size of the pool.
//   - A lock keeps nothing past its hold but its root's fence sequence, one integer a
//     root, so that fencing tokens never go back. A counter name, once used, keeps its
//     value for the life of the Backend; a NameQuota bounds how many names each owner
//     creates and how many locks it holds. So do pool and queue names, once written.
//   - A gate's site keeps its state only while some of it is in the future (a budget
//     spent, a closure, a hold), and is dropped by the next gate call after that.
type Backend struct {
	clock  primitives.Clock // immutable after construction
	closed atomic.Bool

	pools  registry[pool]  // a pool, once created, is never removed
	queues registry[queue] // a queue, once created, is never removed

	kvMu  sync.RWMutex
	kv    map[kvKey]*kvEntry  // guarded by kvMu
	kvTTL deadlines[*kvEntry] // guarded by kvMu; the entries of kv that have a TTL
	// kvUsage counts the entries of kv that have an owner, by root and owner; guarded
	// by kvMu. An owner with nothing left has no entry.
	kvUsage   map[kvLedger]kvCount
	kvReplays replays // guarded by kvMu

	locksMu     sync.Mutex
	locks       map[string]*lockState // guarded by locksMu; the locks held (or past their hold, until pruned)
	lockTTL     deadlines[*lockState] // guarded by locksMu; the entries of locks, by the end of their hold
	lockFences  map[string]int64      // guarded by locksMu; by root: the fence of its last lease
	locksHeld   map[kvLedger]int      // guarded by locksMu; the locks of locks that count against an owner, by root and owner
	lockReplays replays               // guarded by locksMu

	countersMu     sync.RWMutex
	counters       map[string]int64 // guarded by countersMu
	counterNames   names            // guarded by countersMu
	counterReplays replays          // guarded by countersMu

	gateMu  sync.Mutex
	gates   map[string]*gateSite // guarded by gateMu; the sites with state in the future (or past it, until pruned)
	gateTTL deadlines[*gateSite] // guarded by gateMu; the entries of gates, by their end

	fleet fleetState // the roster and the tally (fleet.go)
}

// registry is one family's objects by name (the pools, the queues), each made on its
// first use and never removed, safe for concurrent use. The zero value is empty and
// ready.
type registry[T any] struct {
	mu sync.RWMutex
	m  map[string]*T // guarded by mu
}

// get returns the object named name, made by mk when create is set and there is none
// yet; nil otherwise. A name already made costs a read lock only.
func (r *registry[T]) get(name string, create bool, mk func() *T) *T {
	r.mu.RLock()
	v := r.m[name]
	r.mu.RUnlock()
	if v != nil || !create {
		return v
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if v = r.m[name]; v == nil {
		if r.m == nil {
			r.m = map[string]*T{}
		}
		v = mk()
		r.m[name] = v
	}
	return v
}

// names counts the counter names each owner created, by root and owner
// (primitives.NameQuota). Names are never freed, so counts only grow.
type names map[kvLedger]int

// charge counts a name about to be created against q, or refuses it with ErrLimit
// past the quota. Called with the family's mutex held, in the step that creates it.
func (n names) charge(kind, name string, q primitives.NameQuota) error {
	if q.Owner == "" {
		return nil
	}
	l := kvLedger{primitives.KVRoot(name), q.Owner}
	if q.Max > 0 && n[l] >= q.Max {
		return primitives.NamesExceeded(kind, q, l.root)
	}
	n[l]++
	return nil
}

var _ primitives.Backend = (*Backend)(nil)

// New returns an empty Backend. o may be the zero Options.
//
//	b := memory.New(memory.Options{})
//	defer b.Close()
func New(o Options) *Backend {
	o.init()
	return &Backend{
		clock:        o.Clock,
		kv:           make(map[kvKey]*kvEntry),
		kvTTL:        deadlines[*kvEntry]{node: func(e *kvEntry) *node { return &e.node }},
		kvUsage:      make(map[kvLedger]kvCount),
		locks:        make(map[string]*lockState),
		lockTTL:      deadlines[*lockState]{node: func(l *lockState) *node { return &l.node }},
		lockFences:   make(map[string]int64),
		locksHeld:    make(map[kvLedger]int),
		counters:     make(map[string]int64),
		counterNames: make(names),
		gates:        make(map[string]*gateSite),
		gateTTL:      deadlines[*gateSite]{node: func(s *gateSite) *node { return &s.node }},
	}
}

// errClosed is returned by every call after Close.
var errClosed = fmt.Errorf("%w: memory backend is closed", primitives.ErrUnavailable)

func (b *Backend) check() error {
	if b.closed.Load() {
		return errClosed
	}
	return nil
}

// Ping returns nil, or ErrUnavailable after Close.
func (b *Backend) Ping(ctx context.Context) error { return b.check() }

// Close makes every later call fail with ErrUnavailable. The state is kept until the
// Backend is garbage collected. Close is idempotent and always returns nil.
func (b *Backend) Close() error {
	b.closed.Store(true)
	return nil
}

// newID returns 96 random bits in hex: an item or task id, unique without coordination.
func newID() string {
	var buf [12]byte
	_, _ = rand.Read(buf[:])
	return hex.EncodeToString(buf[:])
}

// clone copies b, keeping nil as nil, so that no caller aliases stored bytes.
func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}
