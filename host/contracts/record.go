package contracts

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/compat"
	"github.com/fleethost/fleet/host/internal/validate"
	"github.com/fleethost/fleet/primitives"
)

// Namespace is the KV namespace of the fleet's record of its contracts, and the name of
// the lock its writers take. No grant reaches it: plugins never read or write it.
const Namespace = "fleet-contracts"

// How long a host may hold, and wait for, the fleet's contracts lock at load.
const (
	contractsLockHold = 10 * time.Second
	contractsLockWait = 10 * time.Second
)

// TTL is how long a contract version a host holds stays live after the host's last
// refresh: a host refreshes what it holds every Sync while it runs, so a version
// outlives the last host that loaded it by at most TTL. See host/RATIONALE.md, "When
// may a contract change?".
const TTL = 10 * time.Minute

// Sync is how often a running host refreshes the versions it holds and reads the
// versions the fleet holds of the queues and pools its plugins declare, which it admits
// values under too: a version a new host adds is accepted by the others within Sync.
const Sync = 5 * time.Second

// Compatible is the rule between two versions of a contract, old and new, on one host
// and across the fleet: compat.Full (a value of either version satisfies the other).
func Compatible(old, new []byte) error { return compat.Check(compat.Full, old, new) }

// underContractsLock runs fn holding the fleet lock "fleet-contracts".
func underContractsLock(ctx context.Context, b primitives.Backend, fn func() error) (err error) {
	l, ok, err := b.LockAcquire(ctx, Namespace, contractsLockHold, contractsLockWait, primitives.NameQuota{})
	if err != nil {
		return fmt.Errorf("fleet contracts: lock: %w", err)
	}
	if !ok {
		return fmt.Errorf("fleet contracts: lock %q still held after %v", Namespace, contractsLockWait)
	}
	defer func() {
		if _, rerr := b.LockRelease(context.WithoutCancel(ctx), Namespace, l.Token); rerr != nil && err == nil {
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
// or not by the plugin (owns); a queue it both consumes and submits to once (the
// registry has made sure both say the same).
func contractRecords(d *abi.Describe, owns func(kind, name string) bool) ([]contractRecord, error) {
	var records []contractRecord
	queue := func(q abi.QueueContract) error {
		c, err := validate.Canonical(q.Payload)
		if err != nil {
			return fmt.Errorf("queue %q payload schema: %w", q.Name, err)
		}
		if slices.ContainsFunc(records, func(r contractRecord) bool { return r.key == "queue:"+q.Name }) {
			return nil
		}
		records = append(records, contractRecord{"queue", q.Name, "queue:" + q.Name, c, owns("queue", q.Name)})
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
		records = append(records, contractRecord{"pool", p.Name, "pool:" + p.Name, validate.PoolDoc(payload, tags), owns("pool", p.Name)})
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
	raw, found, err := b.KVGet(ctx, Namespace, key)
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
			_, ok, err := b.KVGet(ctx, Namespace, heldKey(key, v.Version, h))
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
	if err := b.KVSet(ctx, Namespace, key, raw, 0, primitives.KVQuota{}); err != nil {
		return fmt.Errorf("fleet contracts: record %s: %w", key, err)
	}
	return nil
}

// contractsIndex is the key of the sorted JSON list of every record's key, for listing.
const contractsIndex = "index"

// readIndex reads the list of record keys.
func readIndex(ctx context.Context, b primitives.KV) ([]string, error) {
	raw, found, err := b.KVGet(ctx, Namespace, contractsIndex)
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
	if err := b.KVSet(ctx, Namespace, contractsIndex, raw, 0, primitives.KVQuota{}); err != nil {
		return fmt.Errorf("fleet contracts: record %s: %w", contractsIndex, err)
	}
	return nil
}

// compatible checks r's schemas against a live version's, schema by schema.
func (r contractRecord) compatible(live []byte) error {
	if r.contract == "queue" {
		return Compatible(live, r.doc)
	}
	var old, new map[string]json.RawMessage
	if json.Unmarshal(live, &old) != nil || json.Unmarshal(r.doc, &new) != nil {
		return errors.New("the record is not a pool's schemas")
	}
	for _, part := range []string{"payload_schema", "tags_schema"} {
		if err := Compatible(old[part], new[part]); err != nil {
			return fmt.Errorf("%s: %w", part, err)
		}
	}
	return nil
}

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
	if err := b.KVSet(ctx, Namespace, hk, raw, ttl, primitives.KVQuota{}); err != nil {
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
// "stale" (not refreshed for 3 Sync: the host died, or cannot reach the
// backend), or "live".
func holderState(v holderValue, now time.Time) string {
	switch {
	case v.Stopped:
		return HolderStopped
	case now.Sub(v.At) > 3*Sync:
		return HolderStale
	}
	return HolderLive
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
