package host

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
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
// the versions the fleet holds of the queues and pools its plugins declare, which it
// admits values under too: a version a new host adds is accepted by the others within ContractSync.
const ContractSync = 5 * time.Second

// recordContracts compares the contracts d declares with the versions live fleet-wide
// in the backend, and records, for the ones the plugin owns by its grant (the queue it
// is granted consume on, the pools it is granted put on), that this host (holder) holds
// its version, adding the version when it is new. A schema that is new must be
// compatible (compat.Full) with every live version, the host's own running ones
// included; otherwise the error names the contract, the version, the rule and the JSON
// pointer. A plugin that only submits to a queue, or only claims, lists or marks a
// pool's items, is checked the same way and records nothing, so that a plugin cannot
// fix, fleet-wide, the schema of a queue or pool it does not own (see RATIONALE.md,
// "Who records a contract?"). It runs under the fleet lock "fleet-contracts", so that
// two hosts starting together cannot both add versions that are not compatible with
// each other. It returns what the plugin holds, which the host refreshes
// (heldContracts.run) until it releases it.
//
// The record is KV namespace "fleet-contracts", key "queue:<name>" or "pool:<name>",
// holding a contractDoc; a holder key "held:<contract key>:<version>:<holder>" with TTL
// ttl says the holder holds that version (primitives/redis/KEYS.md).
//
// With checkOnly (Config.CheckOnly: doctor), it checks as above and records nothing.
func recordContracts(ctx context.Context, b primitives.Backend, d *abi.Describe, grant hostfn.Access, holder string, ttl time.Duration, checkOnly bool) (held []*holding, err error) {
	records, err := contractRecords(d, grant)
	if err != nil {
		return nil, err
	}
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
			label := pluginLabel(d)
			v, key, err := r.hold(ctx, b, checks[i].doc, checks[i].mine, holder, []string{label}, ttl, 0)
			if err != nil {
				return err
			}
			held = append(held, &holding{rec: r, desc: d, version: v, key: key, plugins: map[string]int{label: 0}})
		}
		return nil
	})
	return held, err
}

// underContractsLock runs fn holding the fleet lock "fleet-contracts".
func underContractsLock(ctx context.Context, b primitives.Backend, fn func() error) (err error) {
	l, ok, err := b.LockAcquire(ctx, hostfn.ContractsNamespace, contractsLockHold, contractsLockWait, primitives.NameQuota{})
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
	return fn()
}

// contractRecord is one contract as a plugin declares it.
type contractRecord struct {
	contract, name, key string
	doc                 []byte // canonical: the payload schema, or a pool's {"payload_schema", "tags_schema"}
	owner               bool   // the plugin may add a version and hold it
}

// contractRecords lists the contracts d declares, as the fleet records them, each owned
// or not by the plugin's grant; a queue it both consumes and submits to once (the
// registry has made sure both say the same).
func contractRecords(d *abi.Describe, grant hostfn.Access) ([]contractRecord, error) {
	var records []contractRecord
	queue := func(q abi.QueueContract) error {
		c, err := validate.Canonical(q.Payload)
		if err != nil {
			return fmt.Errorf("queue %q payload schema: %w", q.Name, err)
		}
		if slices.ContainsFunc(records, func(r contractRecord) bool { return r.key == "queue:"+q.Name }) {
			return nil
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
		payload, err := validate.Canonical(p.Payload)
		if err != nil {
			return nil, fmt.Errorf("pool %q payload schema: %w", p.Name, err)
		}
		tags, err := validate.Canonical(p.Tags)
		if err != nil {
			return nil, fmt.Errorf("pool %q tags schema: %w", p.Name, err)
		}
		records = append(records, contractRecord{"pool", p.Name, "pool:" + p.Name, validate.PoolDoc(payload, tags), grant.Pools[p.Name]&hostfn.RolePut != 0})
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

// check reads r's record in b and checks r against its live versions: doc is the
// record, mine the version with r's schema (nil when it is new), and err an
// *IncompatibleError for the first live version r is not compatible with. The plugin
// declaring r is of type typ.
func (r contractRecord) check(ctx context.Context, b primitives.KV, plugin *abi.Describe) (doc contractDoc, mine *contractVersion, err error) {
	if doc, err = readContract(ctx, b, r.key); err != nil {
		return doc, nil, err
	}
	for i := range doc.Versions {
		v := &doc.Versions[i]
		if _, _, _, same := validate.FirstDiff(r.doc, v.Schema); same {
			mine = v
			continue
		}
		if cerr := r.compatible(v.Schema); cerr != nil && err == nil {
			hs, herr := holders(ctx, b, r.key, *v)
			if herr != nil {
				return doc, nil, herr
			}
			err = &IncompatibleError{Plugin: plugin.Type, PluginVersion: plugin.Version, Contract: r.contract, Name: r.name,
				Version: v.Version, Live: liveVersions(doc), Holders: hs, Err: cerr}
		}
	}
	return doc, mine, err
}

// liveVersions lists the numbers of doc's versions.
func liveVersions(doc contractDoc) []int {
	out := make([]int, len(doc.Versions))
	for i, v := range doc.Versions {
		out[i] = v.Version
	}
	return out
}

// explainConflict turns the registry's refusal of d (a *validate.ConflictError: d's
// schema is not compatible with one a running plugin of this host registered, a
// reload's old build) into an *IncompatibleError that names the fleet's version of the
// registered schema and its holders, and the ways out. Any other error is returned as
// it is.
func (h *Host) explainConflict(ctx context.Context, d *abi.Describe, err error) error {
	var ce *validate.ConflictError
	if !errors.As(err, &ce) || ce.Rule == nil {
		return err
	}
	// Err is the registry's refusal, which names the part (payload or tags schema) and
	// the first difference as well as the rule.
	ie := &IncompatibleError{Plugin: d.Type, PluginVersion: d.Version, Contract: ce.Contract, Name: ce.Name, Err: ce}
	ie.OnHost = strconv.Quote(ce.OtherType)
	if p := h.pluginOf(ce.OtherType); p != nil {
		ie.OnHost += " " + p.desc.Version
	}
	key := ce.Contract + ":" + ce.Name
	doc, rerr := readContract(ctx, h.cfg.Backend, key)
	if rerr != nil {
		return errors.Join(ie, rerr)
	}
	ie.Live = liveVersions(doc)
	for _, v := range doc.Versions {
		schema := []byte(v.Schema)
		if ce.Contract == "pool" {
			var parts map[string]json.RawMessage
			if json.Unmarshal(v.Schema, &parts) != nil {
				continue
			}
			schema = parts[ce.Schema+"_schema"]
		}
		if _, _, _, same := validate.FirstDiff(ce.Registered, schema); same {
			hs, herr := holders(ctx, h.cfg.Backend, key, v)
			if herr != nil {
				return errors.Join(ie, herr)
			}
			ie.Version, ie.Holders = v.Version, hs
			break
		}
	}
	return ie
}

// hold records in doc, r's record read by check, that holder holds version mine (nil:
// a new version of r's schema), and returns the version and the holder key it wrote. A
// new version is numbered doc.Next, or was, when was (a lapsed version's number, which
// no other version has had) is not 0. Call it under the contracts lock.
func (r contractRecord) hold(ctx context.Context, b primitives.KV, doc contractDoc, mine *contractVersion, holder string, plugins []string, ttl time.Duration, was int) (int, string, error) {
	if mine == nil {
		n := was
		if n <= 0 || n >= doc.Next {
			n = doc.Next
			doc.Next++
		}
		doc.Versions = append(doc.Versions, contractVersion{Version: n, Schema: r.doc, Added: time.Now().UTC()})
		slices.SortFunc(doc.Versions, func(a, b contractVersion) int { return a.Version - b.Version })
		mine = &doc.Versions[slices.IndexFunc(doc.Versions, func(v contractVersion) bool { return v.Version == n })]
	}
	if !slices.Contains(mine.Holders, holder) {
		mine.Holders = append(mine.Holders, holder)
	}
	hk := heldKey(r.key, mine.Version, holder)
	if err := refreshHeld(ctx, b, hk, plugins, ttl); err != nil {
		return 0, "", err
	}
	if err := writeContract(ctx, b, r.key, doc); err != nil {
		return 0, "", err
	}
	return mine.Version, hk, indexContract(ctx, b, r.key)
}

// writeContract writes the record at key.
func writeContract(ctx context.Context, b primitives.KV, key string, doc contractDoc) error {
	raw, _ := json.Marshal(doc) // strings, numbers, times and canonical JSON: always marshals
	if err := b.KVSet(ctx, hostfn.ContractsNamespace, key, raw, 0, primitives.KVQuota{}); err != nil {
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
	if err := b.KVSet(ctx, hostfn.ContractsNamespace, contractsIndex, raw, 0, primitives.KVQuota{}); err != nil {
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

// ContractHolder is a host process that holds a version, its last refresh, the
// plugins of it that hold the version, and its state (HolderLive, HolderStopped,
// HolderStale).
type ContractHolder struct {
	Holder    string    `json:"holder"` // "<instance>@<hex>"
	Refreshed time.Time `json:"refreshed"`
	Plugins   []string  `json:"plugins,omitempty"` // "<type> <version>"; none from hosts before they were recorded
	State     string    `json:"state"`
}

// String is the holder as a message names it: `box@1a2b3c4d (plugin a 0.1.0, live,
// refreshed 2s ago)`.
func (c ContractHolder) String() string {
	var parts []string
	if len(c.Plugins) > 0 {
		parts = append(parts, "plugin "+strings.Join(c.Plugins, ", "))
	}
	ago := time.Since(c.Refreshed).Round(time.Second)
	switch c.State {
	case HolderStopped:
		parts = append(parts, fmt.Sprintf("stopped %v ago, lapses within %v", ago, max(ContractTTL-ago, 0)))
	case HolderStale:
		parts = append(parts, fmt.Sprintf("stale: not refreshed for %v, lapses within %v", ago, max(ContractTTL-ago, 0)))
	default:
		parts = append(parts, fmt.Sprintf("live, refreshed %v ago", ago))
	}
	return c.Holder + " (" + strings.Join(parts, ", ") + ")"
}

// holders reads the holders of version v of the contract at key, as they are now.
func holders(ctx context.Context, b primitives.KV, key string, v contractVersion) ([]ContractHolder, error) {
	now := time.Now()
	var out []ContractHolder
	for _, h := range v.Holders {
		raw, _, err := b.KVGet(ctx, hostfn.ContractsNamespace, heldKey(key, v.Version, h))
		if err != nil {
			return out, fmt.Errorf("fleet contracts: read %s: %w", key, err)
		}
		hv := readHolder(raw)
		out = append(out, ContractHolder{Holder: h, Refreshed: hv.At, Plugins: hv.Plugins, State: holderState(hv, now)})
	}
	return out, nil
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
		hs, err := holders(ctx, b, key, v)
		if err != nil {
			return c, err
		}
		c.Versions = append(c.Versions, ContractVersion{Version: v.Version, Schema: v.Schema, Added: v.Added, Holders: hs})
	}
	return c, nil
}

// ForgetContractVersion retires version of the contract of kind and name in b, whoever
// holds it: the record drops it and its holder keys, so that a schema compatible with
// the other live versions only loads. It runs under the contracts lock. It is the
// operator's word that the version's writers and readers are gone: a host still running
// the version rejoins as its holder at its next refresh (heldContracts.rejoin). A
// version that is not live is an error that errors.Is primitives.ErrNotFound.
func ForgetContractVersion(ctx context.Context, b primitives.Backend, kind, name string, version int) error {
	key := kind + ":" + name
	return underContractsLock(ctx, b, func() error {
		doc, err := readContract(ctx, b, key)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(doc.Versions, func(v contractVersion) bool { return v.Version == version })
		if i < 0 {
			return fmt.Errorf("fleet contracts: %s %q has no live version %d (%w)", kind, name, version, primitives.ErrNotFound)
		}
		for _, h := range doc.Versions[i].Holders {
			if _, err := b.KVDelete(ctx, hostfn.ContractsNamespace, heldKey(key, version, h)); err != nil {
				return fmt.Errorf("fleet contracts: forget %s version %d: %w", key, version, err)
			}
		}
		doc.Versions = slices.Delete(doc.Versions, i, i+1)
		return writeContract(ctx, b, key, doc)
	})
}

// VersionUse is what still uses a live version of a contract, as a forget checks it:
// its holders, and for a queue the tasks it holds. A task does not record the version
// it was written under, so every task counts: one of any version may be of this one.
type VersionUse struct {
	Kind, Name string
	Version    int
	Holders    []ContractHolder       // every holder, whatever its state
	Tasks      *primitives.QueueStats // a queue's tasks; nil for a pool
}

// Live lists the holders whose host runs (HolderLive).
func (u VersionUse) Live() []ContractHolder {
	var out []ContractHolder
	for _, h := range u.Holders {
		if h.State == HolderLive {
			out = append(out, h)
		}
	}
	return out
}

// Blocks says why the version should not be forgotten now, "" when nothing uses it: a
// live host holds it (it would take it back at its next refresh, within ContractSync),
// or tasks still wait in its queue (ready, delayed or parked), which a consumer of an
// incompatible version would then claim and park.
func (u VersionUse) Blocks() string {
	var why []string
	if live := u.Live(); len(live) > 0 {
		names := make([]string, len(live))
		for i, h := range live {
			names[i] = h.String()
		}
		why = append(why, fmt.Sprintf("live hosts hold it and would take it back within %v: %s; stop or upgrade them first", ContractSync, strings.Join(names, ", ")))
	}
	if t := u.Tasks; t != nil && t.Depth+t.InFlight+t.Parked > 0 {
		why = append(why, fmt.Sprintf("queue %q still holds %d tasks waiting (%d of them delayed), %d in flight and %d parked, any of which may be of version %d (a task does not record its version); let them finish, and requeue or delete the parked ones (fleet-host tasks parked %s)",
			u.Name, t.Depth, t.Delayed, t.InFlight, t.Parked, u.Version, u.Name))
	}
	return strings.Join(why, "; ")
}

// ContractVersionUse reads what still uses version of the contract of kind and name in
// b (VersionUse). A version that is not live is an error that errors.Is
// primitives.ErrNotFound.
func ContractVersionUse(ctx context.Context, b primitives.Backend, kind, name string, version int) (VersionUse, error) {
	u := VersionUse{Kind: kind, Name: name, Version: version}
	c, _, err := FleetContract(ctx, b, kind, name)
	if err != nil {
		return u, err
	}
	i := slices.IndexFunc(c.Versions, func(v ContractVersion) bool { return v.Version == version })
	if i < 0 {
		return u, fmt.Errorf("fleet contracts: %s %q has no live version %d (%w)", kind, name, version, primitives.ErrNotFound)
	}
	u.Holders = c.Versions[i].Holders
	if kind == "queue" {
		st, err := b.QueueStats(ctx, name)
		if err != nil {
			return u, fmt.Errorf("fleet contracts: queue %q: %w", name, err)
		}
		u.Tasks = &st
	}
	return u, nil
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
// compatible with a version that is live: held fleet-wide in the backend, or (OnHost)
// registered on this host by a running plugin, a reload's old build. Its message names
// the rule and the pointer (Err, the compat.Error), the versions, their holders with
// their state, and both ways out: the compatible change, or the steps to retire the
// version.
type IncompatibleError struct {
	Plugin, PluginVersion, Contract, Name string
	Version                               int              // the live version it conflicts with; 0 when the fleet has no record of it
	Live                                  []int            // every live version of the contract
	Holders                               []ContractHolder // the hosts that hold Version
	OnHost                                string           // the running plugin of this host that holds it, `"a" 0.1.0`; "" when none
	Err                                   error
}

func (e *IncompatibleError) Error() string {
	var b strings.Builder
	what := "version " + strconv.Itoa(e.Version) + ", which the fleet holds"
	if e.Version == 0 {
		what = "the version " + e.OnHost + " runs on this host"
	}
	fmt.Fprintf(&b, "fleet contracts: plugin %q %s declares %s %q with a schema incompatible with %s", e.Plugin, e.PluginVersion, e.Contract, e.Name, what)
	if len(e.Live) > 0 {
		vs := make([]string, len(e.Live))
		for i, v := range e.Live {
			vs[i] = strconv.Itoa(v)
		}
		fmt.Fprintf(&b, " (live versions: %s)", strings.Join(vs, ", "))
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	var holders, live []string
	if e.OnHost != "" {
		holders = append(holders, "the running plugin "+e.OnHost+" of this host")
		live = append(live, "this host's running "+e.OnHost)
	}
	for _, h := range e.Holders {
		holders = append(holders, h.String())
		if h.State == HolderLive {
			live = append(live, h.Holder)
		}
	}
	if e.Version > 0 && len(holders) > 0 {
		fmt.Fprintf(&b, "; version %d is held by %s", e.Version, strings.Join(holders, ", "))
	}
	b.WriteString(". Ways out: make the change compatible: ")
	var ce *compat.Error
	if errors.As(e.Err, &ce) {
		b.WriteString(ce.Fix())
	} else {
		b.WriteString("declare the schema the live version has")
	}
	if e.Version == 0 {
		fmt.Fprintf(&b, "; or retire that version: stop this host, then start it with the new build")
		return b.String()
	}
	stop := "no host of it runs now (stopped and stale holders lapse within " + ContractTTL.String() + ")"
	if len(live) > 0 {
		stop = "stop or upgrade " + strings.Join(live, ", ")
	}
	wait := fmt.Sprintf("let the tasks of it still in queue %q finish or delete them (fleet-host tasks parked %s lists the parked ones)", e.Name, e.Name)
	if e.Contract == "pool" {
		wait = fmt.Sprintf("let the items put under it in pool %q be used or expire", e.Name)
	}
	fmt.Fprintf(&b, "; or retire version %d: %s, %s, then `fleet-host contracts forget %s:%s %d --yes`, and load this build again",
		e.Version, stop, wait, e.Contract, e.Name, e.Version)
	return b.String()
}

func (e *IncompatibleError) Unwrap() error { return e.Err }

// holderValue is what a holder key holds: when the holder last refreshed it, the
// plugins of the holder that hold the version ("<type> <version>"), and whether the
// holder has stopped (Host.Close; it holds the version until the key lapses, as the
// queue may still hold its tasks). Hosts before it wrote the bare time, which
// readHolder reads too.
type holderValue struct {
	At      time.Time `json:"at"`
	Plugins []string  `json:"plugins,omitempty"`
	Stopped bool      `json:"stopped,omitempty"`
}

// refreshHeld writes the holder key hk, valued the time of the refresh and plugins, for ttl.
func refreshHeld(ctx context.Context, b primitives.KV, hk string, plugins []string, ttl time.Duration) error {
	return writeHolder(ctx, b, hk, holderValue{At: time.Now().UTC(), Plugins: plugins}, ttl)
}

func writeHolder(ctx context.Context, b primitives.KV, hk string, v holderValue, ttl time.Duration) error {
	raw, _ := json.Marshal(v) // a time, strings and a bool: always marshals
	if err := b.KVSet(ctx, hostfn.ContractsNamespace, hk, raw, ttl, primitives.KVQuota{}); err != nil {
		return fmt.Errorf("fleet contracts: hold %s: %w", hk, err)
	}
	return nil
}

// readHolder reads a holder key's value: a holderValue, or a bare time (hosts before
// holderValue); the zero value when it is neither.
func readHolder(raw []byte) holderValue {
	var v holderValue
	if json.Unmarshal(raw, &v) == nil {
		return v
	}
	_ = v.At.UnmarshalText(raw)
	return v
}

// holderState is what a holder's key says of it now: "stopped" (its host closed),
// "stale" (not refreshed for 3 ContractSync: the host died, or cannot reach the
// backend), or "live".
func holderState(v holderValue, now time.Time) string {
	switch {
	case v.Stopped:
		return HolderStopped
	case now.Sub(v.At) > 3*ContractSync:
		return HolderStale
	}
	return HolderLive
}

// The states of a ContractHolder.
const (
	HolderLive    = "live"    // its host runs and refreshes it every ContractSync
	HolderStopped = "stopped" // its host closed; the hold lapses ContractTTL after
	HolderStale   = "stale"   // not refreshed for 3 ContractSync: its host died or is cut off
)

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

// heldContracts are the contract versions a host holds fleet-wide, which it keeps alive
// while a loaded plugin holds them, and the fleet's versions of its registered
// contracts, which it follows.
type heldContracts struct {
	holder string
	ttl    time.Duration
	// keysMu serialises refresh and release, which write and delete holder keys, so that
	// a refresh never writes again (or rejoins) a version a release has let go.
	keysMu sync.Mutex
	mu     sync.Mutex
	holds  map[string]*holding // guarded by mu: by holding.id
	// syncMu serialises sync (Run's loop, a load's, a claim's), which alone uses
	// compiled: the fleet's versions compiled, by canonical schema; and synced: when the
	// last sync that read every record began.
	syncMu   sync.Mutex
	compiled map[string]any // *validate.Schema, or validate.PoolVersion
	synced   time.Time
}

// holding is one version this host holds: an owned contract's record as its loaded
// plugins declare it.
type holding struct {
	rec     contractRecord
	desc    *abi.Describe // a plugin that declares it, for a log line and an error
	version int           // guarded by heldContracts.mu: its version number
	key     string        // guarded by heldContracts.mu: its holder key
	refs    int           // guarded by heldContracts.mu: the loaded plugins that hold it
	// plugins counts the loaded plugins that hold it by their label ("<type>
	// <version>"); guarded by heldContracts.mu.
	plugins map[string]int
}

// pluginLabel names the plugin d describes in a holder key: "<type> <version>".
func pluginLabel(d *abi.Describe) string { return d.Type + " " + d.Version }

// labels lists h's plugins, sorted. Call it holding heldContracts.mu.
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

// add keeps held alive, one more plugin holding each, and returns what the plugin
// holds: the host's holding of each version (one per version, whichever plugin
// recorded it first).
func (c *heldContracts) add(held []*holding, label string) []*holding {
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

// versionOf is the fleet version of the contract at key that held (one plugin's) holds,
// or 0 when it holds none.
func (c *heldContracts) versionOf(held []*holding, key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, h := range held {
		if h.rec.key == key {
			return h.version
		}
	}
	return 0
}

// release lets go of held, what one plugin held (add's result): a version no other
// loaded plugin holds has its holder key deleted, so that the fleet sees at once that
// this host no longer holds it (a reload's old version, a removed plugin).
func (c *heldContracts) release(ctx context.Context, b primitives.KV, held []*holding, label string) error {
	c.keysMu.Lock()
	defer c.keysMu.Unlock()
	var keys []string
	c.mu.Lock()
	for _, h := range held {
		if h.plugins[label]--; h.plugins[label] <= 0 {
			delete(h.plugins, label)
		}
		if h.refs--; h.refs == 0 {
			delete(c.holds, h.id())
			keys = append(keys, h.key)
		}
	}
	c.mu.Unlock()
	var errs []error
	for _, k := range keys {
		if _, err := b.KVDelete(ctx, hostfn.ContractsNamespace, k); err != nil {
			errs = append(errs, fmt.Errorf("fleet contracts: let go of %s: %w", k, err))
		}
	}
	return errors.Join(errs...)
}

// stopped marks every version c holds as held by a stopped host: its holder key says
// so, and lapses ContractTTL from now, as the queue may still hold tasks of it
// (RATIONALE.md, "When may a contract change?"). Host.Close calls it.
func (c *heldContracts) stopped(ctx context.Context, b primitives.KV) error {
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

// run refreshes and syncs every ContractSync until ctx ends. A failure is logged and
// tried again at the next tick: a version lapses only after ContractTTL without one.
func (c *heldContracts) run(ctx context.Context, b primitives.Backend, reg *validate.Registry, log *slog.Logger) {
	t := time.NewTicker(ContractSync)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := c.refresh(ctx, b, log); err != nil && ctx.Err() == nil {
			log.Warn("host: contract holds not refreshed", "err", err)
		}
		if err := c.sync(ctx, b, reg); err != nil && ctx.Err() == nil {
			log.Warn("host: fleet contract versions not read", "err", err)
		}
	}
}

// refresh rewrites every holder key. A holder key found gone (the host could not reach
// the backend for ContractTTL: a partition, a paused process) is not only written again:
// the record may have dropped the version since, so the host rejoins it (rejoin).
func (c *heldContracts) refresh(ctx context.Context, b primitives.Backend, log *slog.Logger) error {
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
		_, found, err := b.KVGet(ctx, hostfn.ContractsNamespace, key)
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
// the pointer, for an operator to retire one (ForgetContractVersion).
func (c *heldContracts) rejoin(ctx context.Context, b primitives.Backend, h *holding, log *slog.Logger) error {
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

// sync reads the live versions of every contract registered in reg and hands each the
// fleet's versions other than its own.
func (c *heldContracts) sync(ctx context.Context, b primitives.KV, reg *validate.Registry) error {
	c.syncMu.Lock()
	defer c.syncMu.Unlock()
	return c.syncLocked(ctx, b, reg)
}

// syncSince syncs unless a sync that began at or after since has read every record: a
// claimed task whose payload none of the versions this host has read admits may be of
// a version another host added since the last sync (a rolling upgrade's first host),
// so the claim reads the fleet's versions now rather than within ContractSync, and
// claims that miss together share one read.
func (c *heldContracts) syncSince(ctx context.Context, b primitives.KV, reg *validate.Registry, since time.Time) error {
	c.syncMu.Lock()
	defer c.syncMu.Unlock()
	if !c.synced.Before(since) {
		return nil
	}
	return c.syncLocked(ctx, b, reg)
}

// syncLocked is sync, under syncMu.
func (c *heldContracts) syncLocked(ctx context.Context, b primitives.KV, reg *validate.Registry) error {
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

// fullCompat is the registry's rule for two versions of a contract on one host, the
// fleet's: compat.Full.
func fullCompat(old, new []byte) error { return compat.Check(compat.Full, old, new) }

// releaseContracts lets go of what p registered and holds: the versions only it holds
// stop being admitted here, and its holder keys no other loaded plugin shares are
// deleted, so that the fleet sees at once that this host no longer runs them (on the
// memory backend, one host, an upgrade in place retires the old version). Reload calls
// it for a version it replaced or removed; Close does not, as a clean stop does not let
// go of what the queue may still hold (RATIONALE.md, "When may a contract change?").
func (h *Host) releaseContracts(ctx context.Context, p *plugin) {
	p.contracts.Release()
	if err := h.held.release(context.WithoutCancel(ctx), h.cfg.Backend, p.held, pluginLabel(p.desc)); err != nil {
		h.cfg.Logger.Warn("host: contract holds not let go; they lapse after ContractTTL", "type", p.desc.Type, "err", err)
	}
}
