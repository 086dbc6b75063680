package host

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/compat"
	"github.com/fleethost/fleet/host/internal/hostfn"
	"github.com/fleethost/fleet/host/internal/validate"
	"github.com/fleethost/fleet/primitives"
)

// How long a host may hold, and wait for, the fleet's contracts lock at load.
const (
	contractsLockHold = 10 * time.Second
	contractsLockWait = 10 * time.Second
)

// ContractTTL is how long a contract version a host holds stays live after the host's
// last refresh: a host refreshes what it holds every ContractSync while it runs, so a
// version outlives the last host that loaded it by at most ContractTTL. See
// RATIONALE.md, "When may a contract change?".
const ContractTTL = 10 * time.Minute

// ContractSync is how often a running host refreshes the versions it holds and reads
// the versions the fleet holds of the queues its plugins declare, which its door
// accepts too: a version a new host adds is accepted by the others within ContractSync.
const ContractSync = 5 * time.Second

// recordContracts compares the contracts d declares with the versions live fleet-wide
// in the backend, and records, for the ones the plugin owns by its grant (the queue it
// is granted consume on, the pools it is granted put on), that this host (holder) holds
// its version, adding the version when it is new. A schema that is new must be
// compatible (compat.Full) with every live version; otherwise the error names the
// contract, the version, the rule and the JSON pointer. A plugin that only submits to a
// queue, or only claims, lists or marks a pool's items, is checked the same way and
// records nothing, so that a plugin cannot fix, fleet-wide, the schema of a queue or pool
// it does not own (see RATIONALE.md, "Who records a contract?"). It runs under the fleet
// lock "fleet-contracts", so that two hosts starting together cannot both add versions
// that are not compatible with each other. It returns the holder keys written, which
// the host refreshes (heldContracts.run).
//
// The record is KV namespace "fleet-contracts", key "queue:<name>" or "pool:<name>",
// holding a contractDoc; a holder key "held:<contract key>:<version>:<holder>" with TTL
// ttl says the holder holds that version (primitives/redis/KEYS.md).
func recordContracts(ctx context.Context, b primitives.Backend, d *abi.Describe, grant hostfn.Access, holder string, ttl time.Duration) (held []string, err error) {
	records, err := contractRecords(d, grant)
	if err != nil {
		return nil, err
	}
	l, ok, err := b.LockAcquire(ctx, hostfn.ContractsNamespace, contractsLockHold, contractsLockWait)
	if err != nil {
		return nil, fmt.Errorf("fleet contracts: lock: %w", err)
	}
	if !ok {
		return nil, fmt.Errorf("fleet contracts: lock %q still held after %v", hostfn.ContractsNamespace, contractsLockWait)
	}
	defer func() {
		if _, rerr := b.LockRelease(context.WithoutCancel(ctx), hostfn.ContractsNamespace, l.Token); rerr != nil && err == nil {
			err = fmt.Errorf("fleet contracts: unlock: %w", rerr)
		}
	}()
	for _, r := range records {
		key, err := r.record(ctx, b, d.Type, holder, ttl)
		if err != nil {
			return nil, err
		}
		if key != "" {
			held = append(held, key)
		}
	}
	return held, nil
}

// contractRecord is one contract as a plugin declares it.
type contractRecord struct {
	contract, name, key string
	doc                 []byte // canonical: the payload schema, or a pool's {"payload_schema", "tags_schema"}
	owner               bool   // the plugin may add a version and hold it
}

// contractRecords lists the contracts d declares, as the fleet records them, each owned
// or not by the plugin's grant.
func contractRecords(d *abi.Describe, grant hostfn.Access) ([]contractRecord, error) {
	var records []contractRecord
	queue := func(q abi.QueueContract) error {
		c, err := validate.Canonical(q.Payload)
		if err != nil {
			return fmt.Errorf("queue %q payload schema: %w", q.Name, err)
		}
		records = append(records, contractRecord{"queue", q.Name, "queue:" + q.Name, c, grant.Queues[q.Name]&hostfn.RoleConsume != 0})
		return nil
	}
	if d.Consumes != nil {
		if err := queue(*d.Consumes); err != nil {
			return nil, err
		}
	}
	for _, q := range d.Submits {
		if err := queue(q); err != nil {
			return nil, err
		}
	}
	for _, p := range d.Pools {
		doc, _ := json.Marshal(map[string]json.RawMessage{"payload_schema": p.Payload, "tags_schema": p.Tags})
		c, err := validate.Canonical(doc)
		if err != nil {
			return nil, fmt.Errorf("pool %q schemas: %w", p.Name, err)
		}
		records = append(records, contractRecord{"pool", p.Name, "pool:" + p.Name, c, grant.Pools[p.Name]&hostfn.RolePut != 0})
	}
	return records, nil
}

// contractDoc is the fleet's record of one contract: its versions still live when it
// was last written, and the number the next version gets.
type contractDoc struct {
	Next     int               `json:"next"`
	Versions []contractVersion `json:"versions"`
}

// contractVersion is one version of a contract and the hosts that loaded it. A holder
// counts while its holder key lives.
type contractVersion struct {
	Version int             `json:"version"`
	Schema  json.RawMessage `json:"schema"` // canonical
	Added   time.Time       `json:"added"`
	Holders []string        `json:"holders"`
}

// heldKey is the holder key saying that holder holds version v of the contract at key.
func heldKey(key string, v int, holder string) string {
	return "held:" + key + ":" + strconv.Itoa(v) + ":" + holder
}

// readContract reads the record at key and drops the holders whose key has expired,
// and the versions left with none. A record that is not a contractDoc (a bare schema,
// as hosts before versions wrote) counts as having no live version.
func readContract(ctx context.Context, b primitives.KV, key string) (contractDoc, error) {
	var doc contractDoc
	raw, found, err := b.KVGet(ctx, hostfn.ContractsNamespace, key)
	if err != nil {
		return doc, fmt.Errorf("fleet contracts: read %s: %w", key, err)
	}
	if !found || json.Unmarshal(raw, &doc) != nil || doc.Next == 0 {
		return contractDoc{Next: 1}, nil
	}
	live := doc.Versions[:0]
	for _, v := range doc.Versions {
		holders := v.Holders[:0]
		for _, h := range v.Holders {
			_, ok, err := b.KVGet(ctx, hostfn.ContractsNamespace, heldKey(key, v.Version, h))
			if err != nil {
				return doc, fmt.Errorf("fleet contracts: read %s: %w", key, err)
			}
			if ok {
				holders = append(holders, h)
			}
		}
		if v.Holders = holders; len(holders) > 0 {
			live = append(live, v)
		}
	}
	doc.Versions = live
	return doc, nil
}

// record checks r against the live versions in b and, when the plugin (of type typ)
// owns r, records that holder holds r's version, returning the holder key.
func (r contractRecord) record(ctx context.Context, b primitives.Backend, typ, holder string, ttl time.Duration) (string, error) {
	doc, err := readContract(ctx, b, r.key)
	if err != nil {
		return "", err
	}
	var mine *contractVersion
	for i := range doc.Versions {
		v := &doc.Versions[i]
		if _, _, _, same := validate.FirstDiff(r.doc, v.Schema); same {
			mine = v
			continue
		}
		if err := r.compatible(v.Schema); err != nil {
			return "", &IncompatibleError{Plugin: typ, Contract: r.contract, Name: r.name, Version: v.Version, Holders: v.Holders, Err: err}
		}
	}
	if !r.owner {
		return "", nil
	}
	if mine == nil {
		doc.Versions = append(doc.Versions, contractVersion{Version: doc.Next, Schema: r.doc, Added: time.Now().UTC()})
		doc.Next++
		mine = &doc.Versions[len(doc.Versions)-1]
	}
	if !slices.Contains(mine.Holders, holder) {
		mine.Holders = append(mine.Holders, holder)
	}
	hk := heldKey(r.key, mine.Version, holder)
	if err := refreshHeld(ctx, b, hk, ttl); err != nil {
		return "", err
	}
	if err := writeContract(ctx, b, r.key, doc); err != nil {
		return "", err
	}
	return hk, indexContract(ctx, b, r.key)
}

// writeContract writes the record at key.
func writeContract(ctx context.Context, b primitives.KV, key string, doc contractDoc) error {
	raw, _ := json.Marshal(doc) // strings, numbers, times and canonical JSON: always marshals
	if err := b.KVSet(ctx, hostfn.ContractsNamespace, key, raw, 0); err != nil {
		return fmt.Errorf("fleet contracts: record %s: %w", key, err)
	}
	return nil
}

// contractsIndex is the key of the sorted JSON list of every record's key, for listing.
const contractsIndex = "index"

// readIndex reads the list of record keys.
func readIndex(ctx context.Context, b primitives.KV) ([]string, error) {
	raw, found, err := b.KVGet(ctx, hostfn.ContractsNamespace, contractsIndex)
	if err != nil {
		return nil, fmt.Errorf("fleet contracts: read %s: %w", contractsIndex, err)
	}
	var keys []string
	if found && json.Unmarshal(raw, &keys) != nil {
		keys = nil // not a list: rebuilt by the records' next writes
	}
	return keys, nil
}

// indexContract adds key to the index, under the contracts lock.
func indexContract(ctx context.Context, b primitives.KV, key string) error {
	keys, err := readIndex(ctx, b)
	if err != nil {
		return err
	}
	i, found := slices.BinarySearch(keys, key)
	if found {
		return nil
	}
	raw, _ := json.Marshal(slices.Insert(keys, i, key))
	if err := b.KVSet(ctx, hostfn.ContractsNamespace, contractsIndex, raw, 0); err != nil {
		return fmt.Errorf("fleet contracts: record %s: %w", contractsIndex, err)
	}
	return nil
}

// Contract is one of the fleet's contracts as an operator inspects it: its live
// versions, oldest first.
type Contract struct {
	Kind     string            `json:"kind"` // "queue" or "pool"
	Name     string            `json:"name"`
	Versions []ContractVersion `json:"versions"`
}

// ContractVersion is one live version of a contract and the hosts that hold it.
type ContractVersion struct {
	Version int              `json:"version"`
	Schema  json.RawMessage  `json:"schema"` // canonical; a pool's {"payload_schema", "tags_schema"}
	Added   time.Time        `json:"added"`
	Holders []ContractHolder `json:"holders"`
}

// ContractHolder is a host process that holds a version, and its last refresh.
type ContractHolder struct {
	Holder    string    `json:"holder"` // "<instance>@<hex>"
	Refreshed time.Time `json:"refreshed"`
}

// FleetContracts lists the contracts recorded in b with their live versions, sorted by
// kind and name. A contract none of whose versions is live is listed with none.
func FleetContracts(ctx context.Context, b primitives.KV) ([]Contract, error) {
	keys, err := readIndex(ctx, b)
	if err != nil {
		return nil, err
	}
	out := make([]Contract, 0, len(keys))
	for _, key := range keys {
		c, err := fleetContract(ctx, b, key)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// FleetContract is the contract of kind ("queue" or "pool") and name recorded in b; ok
// is false when there is no record.
func FleetContract(ctx context.Context, b primitives.KV, kind, name string) (c Contract, ok bool, err error) {
	key := kind + ":" + name
	keys, err := readIndex(ctx, b)
	if err != nil || !slices.Contains(keys, key) {
		return Contract{}, false, err
	}
	c, err = fleetContract(ctx, b, key)
	return c, err == nil, err
}

func fleetContract(ctx context.Context, b primitives.KV, key string) (Contract, error) {
	kind, name, _ := strings.Cut(key, ":")
	c := Contract{Kind: kind, Name: name, Versions: []ContractVersion{}}
	doc, err := readContract(ctx, b, key)
	if err != nil {
		return c, err
	}
	for _, v := range doc.Versions {
		cv := ContractVersion{Version: v.Version, Schema: v.Schema, Added: v.Added}
		for _, h := range v.Holders {
			raw, _, err := b.KVGet(ctx, hostfn.ContractsNamespace, heldKey(key, v.Version, h))
			if err != nil {
				return c, fmt.Errorf("fleet contracts: read %s: %w", key, err)
			}
			var at time.Time
			_ = at.UnmarshalText(raw) // a holder key always holds a time; zero if not
			cv.Holders = append(cv.Holders, ContractHolder{Holder: h, Refreshed: at})
		}
		c.Versions = append(c.Versions, cv)
	}
	return c, nil
}

// ForgetContractVersion retires version of the contract of kind and name in b, whoever
// holds it: the record drops it and its holder keys, so that a schema compatible with
// the other live versions only loads. It runs under the contracts lock. A host still
// running the version keeps its own door; it is the operator's word that the version's
// writers and readers are gone. It is an error when the version is not live.
func ForgetContractVersion(ctx context.Context, b primitives.Backend, kind, name string, version int) (err error) {
	key := kind + ":" + name
	l, ok, err := b.LockAcquire(ctx, hostfn.ContractsNamespace, contractsLockHold, contractsLockWait)
	if err != nil {
		return fmt.Errorf("fleet contracts: lock: %w", err)
	}
	if !ok {
		return fmt.Errorf("fleet contracts: lock %q still held after %v", hostfn.ContractsNamespace, contractsLockWait)
	}
	defer func() {
		if _, rerr := b.LockRelease(context.WithoutCancel(ctx), hostfn.ContractsNamespace, l.Token); rerr != nil && err == nil {
			err = fmt.Errorf("fleet contracts: unlock: %w", rerr)
		}
	}()
	doc, err := readContract(ctx, b, key)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(doc.Versions, func(v contractVersion) bool { return v.Version == version })
	if i < 0 {
		return fmt.Errorf("fleet contracts: %s %q has no live version %d", kind, name, version)
	}
	for _, h := range doc.Versions[i].Holders {
		if _, err := b.KVDelete(ctx, hostfn.ContractsNamespace, heldKey(key, version, h)); err != nil {
			return fmt.Errorf("fleet contracts: forget %s version %d: %w", key, version, err)
		}
	}
	doc.Versions = slices.Delete(doc.Versions, i, i+1)
	return writeContract(ctx, b, key, doc)
}

// compatible checks r's schemas against a live version's, schema by schema.
func (r contractRecord) compatible(live []byte) error {
	if r.contract == "queue" {
		return compat.Check(compat.Full, live, r.doc)
	}
	var old, new map[string]json.RawMessage
	if json.Unmarshal(live, &old) != nil || json.Unmarshal(r.doc, &new) != nil {
		return errors.New("the record is not a pool's schemas")
	}
	for _, part := range []string{"payload_schema", "tags_schema"} {
		if err := compat.Check(compat.Full, old[part], new[part]); err != nil {
			return fmt.Errorf("%s: %w", part, err)
		}
	}
	return nil
}

// IncompatibleError says that a plugin declares a contract whose schema is not
// compatible with a version the fleet still holds. Err is the compat.Error with the
// rule and the pointer.
type IncompatibleError struct {
	Plugin, Contract, Name string
	Version                int      // the live version it conflicts with
	Holders                []string // the hosts that hold it
	Err                    error
}

func (e *IncompatibleError) Error() string {
	return fmt.Sprintf("fleet contracts: plugin %q declares %s %q with a schema incompatible with version %d that the fleet holds (recorded in the backend, held by %v): %v",
		e.Plugin, e.Contract, e.Name, e.Version, e.Holders, e.Err)
}

func (e *IncompatibleError) Unwrap() error { return e.Err }

// refreshHeld writes the holder key hk, valued the time of the refresh, for ttl.
func refreshHeld(ctx context.Context, b primitives.KV, hk string, ttl time.Duration) error {
	now, _ := time.Now().UTC().MarshalText()
	if err := b.KVSet(ctx, hostfn.ContractsNamespace, hk, now, ttl); err != nil {
		return fmt.Errorf("fleet contracts: hold %s: %w", hk, err)
	}
	return nil
}

// newHolder names this host process as a holder, "<instance>@<random hex>": its
// instance (its first 64 bytes, each a backend name does not allow as '_'), and a random part that
// tells two processes of one instance apart (a restart, two hosts of one test).
func newHolder(instance string) string {
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail
	name := []byte(instance)[:min(len(instance), 64)]
	for i, c := range name {
		if primitives.CheckName("instance", string(c)) != nil {
			name[i] = '_'
		}
	}
	return string(name) + "@" + hex.EncodeToString(b[:])
}

// queues are the registered queue contracts that d declares.
func (h *Host) queues(d *abi.Describe) []*validate.Queue {
	var out []*validate.Queue
	if d.Consumes != nil {
		out = append(out, h.contracts.Queue(d.Consumes.Name))
	}
	for _, q := range d.Submits {
		out = append(out, h.contracts.Queue(q.Name))
	}
	return out
}

// heldContracts are the holder keys a host keeps alive, and the queues whose fleet
// versions it follows.
type heldContracts struct {
	holder string
	ttl    time.Duration
	mu     sync.Mutex
	keys   []string                   // guarded by mu
	queues map[string]*validate.Queue // guarded by mu
	// compiled caches the fleet's versions by canonical schema; only sync uses it, from
	// New and then from Run's one loop.
	compiled map[string]*validate.Schema
}

// add keeps keys alive and follows the fleet's versions of queues.
func (c *heldContracts) add(keys []string, queues ...*validate.Queue) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.keys = append(c.keys, keys...)
	if c.queues == nil {
		c.queues = map[string]*validate.Queue{}
	}
	for _, q := range queues {
		c.queues[q.Name] = q
	}
}

// run refreshes and syncs every ContractSync until ctx ends. A failure is logged and
// tried again at the next tick: a version lapses only after ContractTTL without one.
func (c *heldContracts) run(ctx context.Context, b primitives.KV, log func(msg string, args ...any)) {
	t := time.NewTicker(ContractSync)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := c.refresh(ctx, b); err != nil && ctx.Err() == nil {
			log("host: contract holds not refreshed", "err", err)
		}
		if err := c.sync(ctx, b); err != nil && ctx.Err() == nil {
			log("host: fleet contract versions not read", "err", err)
		}
	}
}

// refresh rewrites every holder key.
func (c *heldContracts) refresh(ctx context.Context, b primitives.KV) error {
	c.mu.Lock()
	keys := slices.Clone(c.keys)
	c.mu.Unlock()
	var errs []error
	for _, k := range keys {
		errs = append(errs, refreshHeld(ctx, b, k, c.ttl))
	}
	return errors.Join(errs...)
}

// sync reads the live versions of every followed queue and hands each queue those
// other than its own.
func (c *heldContracts) sync(ctx context.Context, b primitives.KV) error {
	c.mu.Lock()
	queues := make([]*validate.Queue, 0, len(c.queues))
	for _, q := range c.queues {
		queues = append(queues, q)
	}
	c.mu.Unlock()
	if c.compiled == nil {
		c.compiled = map[string]*validate.Schema{}
	}
	var errs []error
	for _, q := range queues {
		doc, err := readContract(ctx, b, "queue:"+q.Name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var others []*validate.Schema
		for _, v := range doc.Versions {
			if string(v.Schema) == string(q.Payload.Canonical) {
				continue
			}
			s := c.compiled[string(v.Schema)]
			if s == nil {
				if s, err = validate.Compile(fmt.Sprintf("queue %s payload version %d", q.Name, v.Version), v.Schema); err != nil {
					errs = append(errs, err)
					continue
				}
				c.compiled[string(v.Schema)] = s
			}
			others = append(others, s)
		}
		q.SetFleet(others)
	}
	return errors.Join(errs...)
}
