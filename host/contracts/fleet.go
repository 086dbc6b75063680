package contracts

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fleethost/fleet/primitives"
)

// The states of a Holder.
const (
	HolderLive    = "live"    // its host runs and refreshes it every Sync
	HolderStopped = "stopped" // its host closed; the hold lapses TTL after
	HolderStale   = "stale"   // not refreshed for 3 Sync: its host died or is cut off
)

// Contract is one of the fleet's contracts as an operator inspects it: its live
// versions, oldest first.
type Contract struct {
	Kind     string    `json:"kind"` // "queue" or "pool"
	Name     string    `json:"name"`
	Versions []Version `json:"versions"`
}

// Version is one live version of a contract and the hosts that hold it.
type Version struct {
	Version int             `json:"version"`
	Schema  json.RawMessage `json:"schema"` // canonical; a pool's {"payload_schema", "tags_schema"}
	Added   time.Time       `json:"added"`
	Holders []Holder        `json:"holders"`
}

// Holder is a host process that holds a version, its last refresh, the
// plugins of it that hold the version, and its state (HolderLive, HolderStopped,
// HolderStale).
type Holder struct {
	Holder    string    `json:"holder"` // "<instance>@<hex>"
	Refreshed time.Time `json:"refreshed"`
	Plugins   []string  `json:"plugins,omitempty"` // "<type> <version>"; none from hosts before they were recorded
	State     string    `json:"state"`
}

// String is the holder as a message names it: `box@1a2b3c4d (plugin a 0.1.0, live,
// refreshed 2s ago)`.
func (c Holder) String() string {
	var parts []string
	if len(c.Plugins) > 0 {
		parts = append(parts, "plugin "+strings.Join(c.Plugins, ", "))
	}
	ago := time.Since(c.Refreshed).Round(time.Second)
	switch c.State {
	case HolderStopped:
		parts = append(parts, fmt.Sprintf("stopped %v ago, lapses within %v", ago, max(TTL-ago, 0)))
	case HolderStale:
		parts = append(parts, fmt.Sprintf("stale: not refreshed for %v, lapses within %v", ago, max(TTL-ago, 0)))
	default:
		parts = append(parts, fmt.Sprintf("live, refreshed %v ago", ago))
	}
	return c.Holder + " (" + strings.Join(parts, ", ") + ")"
}

// holders reads the holders of version v of the contract at key, as they are now.
func holders(ctx context.Context, b primitives.KV, key string, v contractVersion) ([]Holder, error) {
	now := time.Now()
	var out []Holder
	for _, h := range v.Holders {
		raw, _, err := b.KVGet(ctx, Namespace, heldKey(key, v.Version, h))
		if err != nil {
			return out, fmt.Errorf("fleet contracts: read %s: %w", key, err)
		}
		hv := readHolder(raw)
		out = append(out, Holder{Holder: h, Refreshed: hv.At, Plugins: hv.Plugins, State: holderState(hv, now)})
	}
	return out, nil
}

// List lists the contracts recorded in b with their live versions, sorted by
// kind and name. A contract none of whose versions is live is listed with none.
func List(ctx context.Context, b primitives.KV) ([]Contract, error) {
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

// Get is the contract of kind ("queue" or "pool") and name recorded in b; ok
// is false when there is no record.
func Get(ctx context.Context, b primitives.KV, kind, name string) (c Contract, ok bool, err error) {
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
	c := Contract{Kind: kind, Name: name, Versions: []Version{}}
	doc, err := readContract(ctx, b, key)
	if err != nil {
		return c, err
	}
	for _, v := range doc.Versions {
		hs, err := holders(ctx, b, key, v)
		if err != nil {
			return c, err
		}
		c.Versions = append(c.Versions, Version{Version: v.Version, Schema: v.Schema, Added: v.Added, Holders: hs})
	}
	return c, nil
}

// Forget retires version of the contract of kind and name in b, whoever
// holds it: the record drops it and its holder keys, so that a schema compatible with
// the other live versions only loads. It runs under the contracts lock. It is the
// operator's word that the version's writers and readers are gone: a host still running
// the version rejoins as its holder at its next refresh (Holds.rejoin). A
// version that is not live is an error that errors.Is primitives.ErrNotFound.
func Forget(ctx context.Context, b primitives.Backend, kind, name string, version int) error {
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
			if _, err := b.KVDelete(ctx, Namespace, heldKey(key, version, h)); err != nil {
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
	Holders    []Holder               // every holder, whatever its state
	Tasks      *primitives.QueueStats // a queue's tasks; nil for a pool
}

// Live lists the holders whose host runs (HolderLive).
func (u VersionUse) Live() []Holder {
	var out []Holder
	for _, h := range u.Holders {
		if h.State == HolderLive {
			out = append(out, h)
		}
	}
	return out
}

// Blocks says why the version should not be forgotten now, "" when nothing uses it: a
// live host holds it (it would take it back at its next refresh, within Sync),
// or tasks still wait in its queue (ready, delayed or parked), which a consumer of an
// incompatible version would then claim and park.
func (u VersionUse) Blocks() string {
	var why []string
	if live := u.Live(); len(live) > 0 {
		names := make([]string, len(live))
		for i, h := range live {
			names[i] = h.String()
		}
		why = append(why, fmt.Sprintf("live hosts hold it and would take it back within %v: %s; stop or upgrade them first", Sync, strings.Join(names, ", ")))
	}
	if t := u.Tasks; t != nil && t.Depth+t.InFlight+t.Parked > 0 {
		why = append(why, fmt.Sprintf("queue %q still holds %d tasks waiting (%d of them delayed), %d in flight and %d parked, any of which may be of version %d (a task does not record its version); let them finish, and requeue or delete the parked ones (fleet-host tasks parked %s)",
			u.Name, t.Depth, t.Delayed, t.InFlight, t.Parked, u.Version, u.Name))
	}
	return strings.Join(why, "; ")
}

// Use reads what still uses version of the contract of kind and name in
// b (VersionUse). A version that is not live is an error that errors.Is
// primitives.ErrNotFound.
func Use(ctx context.Context, b primitives.Backend, kind, name string, version int) (VersionUse, error) {
	u := VersionUse{Kind: kind, Name: name, Version: version}
	c, _, err := Get(ctx, b, kind, name)
	if err != nil {
		return u, err
	}
	i := slices.IndexFunc(c.Versions, func(v Version) bool { return v.Version == version })
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
