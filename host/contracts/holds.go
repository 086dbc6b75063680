package contracts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/validate"
	"github.com/fleethost/fleet/primitives"
)

// Holds are the contract versions a host holds fleet-wide, which it keeps alive while a
// loaded plugin holds them, and the fleet's versions of its registered contracts, which
// it follows. Make it with NewHolds; its methods are safe for concurrent use.
type Holds struct {
	holder string
	ttl    time.Duration
	// keysMu serialises Refresh and Release, which write and delete holder keys, so that
	// a refresh never writes again (or rejoins) a version a release has let go.
	keysMu sync.Mutex
	mu     sync.Mutex
	holds  map[string]*holding // guarded by mu: by holding.id
	// syncMu serialises Sync (Run's loop, a load's, a claim's), which alone uses
	// compiled: the fleet's versions compiled, by canonical schema; and synced: when the
	// last sync that read every record began.
	syncMu   sync.Mutex
	compiled map[string]any // *validate.Schema, or validate.PoolVersion
	synced   time.Time
}

// NewHolds makes the holds of the host process named instance, which the record calls
// "<instance>@<random hex>" (newHolder).
func NewHolds(instance string) *Holds {
	return &Holds{holder: newHolder(instance), ttl: TTL}
}

// Held is what one loaded plugin holds (Record's result), for Release and VersionOf.
// The zero Held holds nothing.
type Held struct {
	label    string     // the plugin, "<type> <version>" (pluginLabel)
	versions []*holding // one per version, the host's holding of it
}

// holding is one version this host holds: an owned contract's record as its loaded
// plugins declare it.
type holding struct {
	rec     contractRecord
	desc    *abi.Describe // a plugin that declares it, for a log line and an error
	version int           // guarded by Holds.mu: its version number
	key     string        // guarded by Holds.mu: its holder key
	refs    int           // guarded by Holds.mu: the loaded plugins that hold it
	// plugins counts the loaded plugins that hold it by their label ("<type>
	// <version>"); guarded by Holds.mu.
	plugins map[string]int
}

// pluginLabel names the plugin d describes in a holder key: "<type> <version>".
func pluginLabel(d *abi.Describe) string { return d.Type + " " + d.Version }

// labels lists h's plugins, sorted. Call it holding Holds.mu.
func (h *holding) labels() []string {
	out := make([]string, 0, len(h.plugins))
	for l, n := range h.plugins {
		if n > 0 {
			out = append(out, l)
		}
	}
	slices.Sort(out)
	return out
}

// id tells holdings apart: one per contract and schema.
func (h *holding) id() string { return h.rec.key + "\x00" + string(h.rec.doc) }

// Record compares the contracts d declares with the versions live fleet-wide in b, and
// records, for the ones the plugin owns (owns: the host says a queue's consumer and a
// pool's putters own it, by their grant), that this host holds its version, adding the
// version when it is new. A schema that is new must be compatible (Compatible) with
// every live version, the host's own running ones included; otherwise the error is an
// *IncompatibleError naming the contract, the version, the rule and the JSON pointer. A
// plugin that owns none of a contract (it only submits to a queue, or only claims, lists
// or marks a pool's items) is checked the same way and records nothing, so that a plugin
// cannot fix, fleet-wide, the schema of a queue or pool it does not own (see
// host/RATIONALE.md, "Who records a contract?"). It runs under the fleet lock
// Namespace, so that two hosts starting together cannot both add versions that are not
// compatible with each other. It returns what the plugin holds, which Run refreshes
// until Release lets go of it.
//
// The record is KV namespace Namespace, key "queue:<name>" or "pool:<name>", holding a
// contractDoc; a holder key "held:<contract key>:<version>:<holder>" with TTL says the
// holder holds that version (primitives/redis/KEYS.md).
//
// With checkOnly (host.Config.CheckOnly: doctor), it checks as above and records
// nothing.
func (c *Holds) Record(ctx context.Context, b primitives.Backend, d *abi.Describe, owns func(kind, name string) bool, checkOnly bool) (Held, error) {
	records, err := contractRecords(d, owns)
	if err != nil {
		return Held{}, err
	}
	label := pluginLabel(d)
	var held []*holding
	err = underContractsLock(ctx, b, func() error {
		// Every contract is checked before any is held: a plugin refused for one holds
		// none of the others either.
		type checked struct {
			doc  contractDoc
			mine *contractVersion
		}
		checks := make([]checked, len(records))
		for i, r := range records {
			doc, mine, err := r.check(ctx, b, d)
			if err != nil {
				return err
			}
			checks[i] = checked{doc, mine}
		}
		if checkOnly {
			return nil
		}
		for i, r := range records {
			if !r.owner {
				continue
			}
			v, key, err := r.hold(ctx, b, checks[i].doc, checks[i].mine, c.holder, []string{label}, c.ttl, 0)
			if err != nil {
				return err
			}
			held = append(held, &holding{rec: r, desc: d, version: v, key: key, plugins: map[string]int{label: 0}})
		}
		return nil
	})
	if err != nil {
		return Held{}, err
	}
	return Held{label: label, versions: c.add(held, label)}, nil
}

// add keeps held alive, one more plugin holding each, and returns what the plugin
// holds: the host's holding of each version (one per version, whichever plugin
// recorded it first).
func (c *Holds) add(held []*holding, label string) []*holding {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holds == nil {
		c.holds = map[string]*holding{}
	}
	out := make([]*holding, 0, len(held))
	for _, h := range held {
		if have, ok := c.holds[h.id()]; ok {
			h = have
		} else {
			c.holds[h.id()] = h
		}
		h.refs++
		if h.plugins == nil {
			h.plugins = map[string]int{}
		}
		h.plugins[label]++
		out = append(out, h)
	}
	return out
}

// VersionOf is the fleet version of the contract of kind and name that held holds, or 0
// when it holds none.
func (c *Holds) VersionOf(held Held, kind, name string) int {
	key := kind + ":" + name
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, h := range held.versions {
		if h.rec.key == key {
			return h.version
		}
	}
	return 0
}

// Release lets go of held, what one plugin held: a version no other loaded plugin holds
// has its holder key deleted, so that the fleet sees at once that this host no longer
// holds it (a reload's old version, a removed plugin).
func (c *Holds) Release(ctx context.Context, b primitives.KV, held Held) error {
	c.keysMu.Lock()
	defer c.keysMu.Unlock()
	var keys []string
	c.mu.Lock()
	for _, h := range held.versions {
		if h.plugins[held.label]--; h.plugins[held.label] <= 0 {
			delete(h.plugins, held.label)
		}
		if h.refs--; h.refs == 0 {
			delete(c.holds, h.id())
			keys = append(keys, h.key)
		}
	}
	c.mu.Unlock()
	var errs []error
	for _, k := range keys {
		if _, err := b.KVDelete(ctx, Namespace, k); err != nil {
			errs = append(errs, fmt.Errorf("fleet contracts: let go of %s: %w", k, err))
		}
	}
	return errors.Join(errs...)
}

// Stopped marks every version c holds as held by a stopped host: its holder key says
// so, and lapses TTL from now, as the queue may still hold tasks of it
// (host/RATIONALE.md, "When may a contract change?"). Host.Close calls it.
func (c *Holds) Stopped(ctx context.Context, b primitives.KV) error {
	c.keysMu.Lock()
	defer c.keysMu.Unlock()
	c.mu.Lock()
	var vals []holderValue
	var keys []string
	for _, h := range c.holds {
		keys = append(keys, h.key)
		vals = append(vals, holderValue{At: time.Now().UTC(), Plugins: h.labels(), Stopped: true})
	}
	c.mu.Unlock()
	var errs []error
	for i, k := range keys {
		errs = append(errs, writeHolder(ctx, b, k, vals[i], c.ttl))
	}
	return errors.Join(errs...)
}

// Run refreshes and syncs every Sync until ctx ends. A failure is logged and
// tried again at the next tick: a version lapses only after TTL without one.
func (c *Holds) Run(ctx context.Context, b primitives.Backend, reg *validate.Registry, log *slog.Logger) {
	t := time.NewTicker(Sync)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := c.Refresh(ctx, b, log); err != nil && ctx.Err() == nil {
			log.Warn("host: contract holds not refreshed", "err", err)
		}
		if err := c.Sync(ctx, b, reg); err != nil && ctx.Err() == nil {
			log.Warn("host: fleet contract versions not read", "err", err)
		}
	}
}

// Refresh rewrites every holder key. A holder key found gone (the host could not reach
// the backend for TTL: a partition, a paused process) is not only written again:
// the record may have dropped the version since, so the host rejoins it (rejoin).
func (c *Holds) Refresh(ctx context.Context, b primitives.Backend, log *slog.Logger) error {
	c.keysMu.Lock()
	defer c.keysMu.Unlock()
	c.mu.Lock()
	held := make([]*holding, 0, len(c.holds))
	for _, h := range c.holds {
		held = append(held, h)
	}
	c.mu.Unlock()
	var errs []error
	for _, h := range held {
		c.mu.Lock()
		key, plugins := h.key, h.labels()
		c.mu.Unlock()
		_, found, err := b.KVGet(ctx, Namespace, key)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("fleet contracts: read %s: %w", key, err))
		case found:
			errs = append(errs, refreshHeld(ctx, b, key, plugins, c.ttl))
		default:
			errs = append(errs, c.rejoin(ctx, b, h, log))
		}
	}
	return errors.Join(errs...)
}

// rejoin records again that this host holds h, whose holder key lapsed: under the
// contracts lock, it holds the live version of h's schema, or adds it back, under its
// number, when the record dropped it. The host runs that schema whatever the record says, so a
// rejoin is not refused: when another host has meanwhile added a version incompatible
// with it, both stay listed and the conflict is logged as an error naming the rule and
// the pointer, for an operator to retire one (Forget).
func (c *Holds) rejoin(ctx context.Context, b primitives.Backend, h *holding, log *slog.Logger) error {
	return underContractsLock(ctx, b, func() error {
		doc, mine, conflict := h.rec.check(ctx, b, h.desc)
		var ie *IncompatibleError
		if conflict != nil && !errors.As(conflict, &ie) {
			return conflict // the record could not be read
		}
		c.mu.Lock()
		was, plugins := h.version, h.labels()
		c.mu.Unlock()
		v, key, err := h.rec.hold(ctx, b, doc, mine, c.holder, plugins, c.ttl, was)
		if err != nil {
			return err
		}
		c.mu.Lock()
		h.version, h.key = v, key
		c.mu.Unlock()
		if conflict != nil {
			log.Error("host: this host rejoined the fleet's record of a contract it runs, beside a version incompatible with it; retire one (fleet-host contracts forget)",
				"holder", key, "err", conflict)
		} else {
			log.Info("host: this host rejoined the fleet's record of a contract it runs, after its hold lapsed", "holder", key)
		}
		return nil
	})
}

// Sync reads the live versions of every contract registered in reg and hands each the
// fleet's versions other than its own.
func (c *Holds) Sync(ctx context.Context, b primitives.KV, reg *validate.Registry) error {
	c.syncMu.Lock()
	defer c.syncMu.Unlock()
	return c.syncLocked(ctx, b, reg)
}

// SyncSince syncs unless a sync that began at or after since has read every record: a
// claimed task whose payload none of the versions this host has read admits may be of
// a version another host added since the last sync (a rolling upgrade's first host),
// so the claim reads the fleet's versions now rather than within Sync, and
// claims that miss together share one read.
func (c *Holds) SyncSince(ctx context.Context, b primitives.KV, reg *validate.Registry, since time.Time) error {
	c.syncMu.Lock()
	defer c.syncMu.Unlock()
	if !c.synced.Before(since) {
		return nil
	}
	return c.syncLocked(ctx, b, reg)
}

// syncLocked is Sync, under syncMu.
func (c *Holds) syncLocked(ctx context.Context, b primitives.KV, reg *validate.Registry) error {
	began := time.Now()
	used := map[string]any{} // what this sync compiled or reused: the next sync's cache
	defer func() { c.compiled = used }()
	compiled := func(name string, v contractVersion, compile func() (any, error)) (any, error) {
		if s, ok := c.compiled[string(v.Schema)]; ok {
			used[string(v.Schema)] = s
			return s, nil
		}
		s, err := compile()
		if err != nil {
			return nil, fmt.Errorf("fleet contracts: %s version %d: %w", name, v.Version, err)
		}
		used[string(v.Schema)] = s
		return s, nil
	}
	var errs []error
	for _, q := range reg.Queues() {
		doc, err := readContract(ctx, b, "queue:"+q.Name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var others []*validate.Schema
		for _, v := range fleetOnly(doc, q.Versions()) {
			s, err := compiled("queue "+q.Name, v, func() (any, error) {
				return validate.Compile(fmt.Sprintf("queue %s payload version %d", q.Name, v.Version), v.Schema)
			})
			if err != nil {
				errs = append(errs, err)
				continue
			}
			others = append(others, s.(*validate.Schema))
		}
		q.SetFleet(others)
	}
	for _, p := range reg.Pools() {
		doc, err := readContract(ctx, b, "pool:"+p.Name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var others []validate.PoolVersion
		for _, v := range fleetOnly(doc, p.Versions()) {
			pv, err := compiled("pool "+p.Name, v, func() (any, error) { return compilePoolVersion(p.Name, v) })
			if err != nil {
				errs = append(errs, err)
				continue
			}
			others = append(others, pv.(validate.PoolVersion))
		}
		p.SetFleet(others)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	c.synced = began
	return nil
}

// fleetOnly lists the versions of doc whose schema is none of local's.
func fleetOnly(doc contractDoc, local [][]byte) []contractVersion {
	var out []contractVersion
	for _, v := range doc.Versions {
		if !slices.ContainsFunc(local, func(l []byte) bool { return string(l) == string(v.Schema) }) {
			out = append(out, v)
		}
	}
	return out
}

// compilePoolVersion compiles version v of pool name, as the record keeps it.
func compilePoolVersion(name string, v contractVersion) (validate.PoolVersion, error) {
	var parts struct {
		Payload json.RawMessage `json:"payload_schema"`
		Tags    json.RawMessage `json:"tags_schema"`
	}
	if err := json.Unmarshal(v.Schema, &parts); err != nil {
		return validate.PoolVersion{}, fmt.Errorf("the record is not a pool's schemas: %w", err)
	}
	payload, err := validate.Compile(fmt.Sprintf("pool %s payload version %d", name, v.Version), parts.Payload)
	if err != nil {
		return validate.PoolVersion{}, err
	}
	tags, err := validate.Compile(fmt.Sprintf("pool %s tags version %d", name, v.Version), parts.Tags)
	if err != nil {
		return validate.PoolVersion{}, err
	}
	return validate.PoolVersion{Payload: payload, Tags: tags}, nil
}
