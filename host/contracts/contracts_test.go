package contracts_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/contracts"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/primitives/memory"
	fleetredis "github.com/fleethost/fleet/primitives/redis"
)

// The versions of queue "jobs" that consumer plugins declare in these tests.
const (
	jobsV1       = `{"type":"object","additionalProperties":false,"required":["site"],"properties":{"site":{"type":"string"}}}`
	jobsRequired = `{"type":"object","additionalProperties":false,"required":["site","depth"],"properties":{"site":{"type":"string"},"depth":{"type":"integer"}}}`
)

// onBothBackends runs test against the memory backend and against a Redis of its own.
func onBothBackends(t *testing.T, test func(*testing.T, primitives.Backend)) {
	t.Run("memory", func(t *testing.T) { test(t, memory.New(memory.Options{})) })
	t.Run("redis", func(t *testing.T) {
		srv := testutil.NewRedis(t)
		b, err := fleetredis.Open(srv.URL(), fleetredis.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		test(t, b)
	})
}

// consumer describes plugin "a" 0.1.0, which consumes queue "jobs" with schema.
func consumer(schema string) *abi.Describe {
	return &abi.Describe{Type: "a", Version: "0.1.0", Mode: abi.ModeBatch,
		Consumes: &abi.QueueContract{Name: "jobs", Payload: json.RawMessage(schema)}}
}

// ownsAll owns every contract: a queue's consumer, a pool's putter.
func ownsAll(kind, name string) bool { return true }

// record records d's contracts as a new host process of instance would, and returns
// its holds.
func record(t *testing.T, b primitives.Backend, instance string, d *abi.Describe) *contracts.Holds {
	t.Helper()
	holds := contracts.NewHolds(instance)
	if _, err := holds.Record(context.Background(), b, d, ownsAll, false); err != nil {
		t.Fatalf("Record(%s %s) = %v", d.Type, d.Version, err)
	}
	return holds
}

// TestForget, on both backends: List lists each contract's live versions with their
// holders; an incompatible schema is refused while the version lives, naming the rule
// and the pointer; forgetting a version that is not live is an error naming it, and
// forgetting the only live one lets the incompatible schema record a version of its own.
func TestForget(t *testing.T) {
	onBothBackends(t, func(t *testing.T, b primitives.Backend) {
		ctx := context.Background()
		record(t, b, "first", consumer(jobsV1))
		list, err := contracts.List(ctx, b)
		if err != nil || len(list) != 1 || list[0].Kind != "queue" || list[0].Name != "jobs" || len(list[0].Versions) != 1 ||
			len(list[0].Versions[0].Holders) != 1 || list[0].Versions[0].Holders[0].Refreshed.IsZero() {
			t.Fatalf("List = %+v, %v; want queue jobs version 1 held by one host", list, err)
		}
		_, err = contracts.NewHolds("second").Record(ctx, b, consumer(jobsRequired), ownsAll, false)
		var ie *contracts.IncompatibleError
		if !errors.As(err, &ie) || ie.Version != 1 || !strings.Contains(err.Error(), "required-property-added") || !strings.Contains(err.Error(), "/properties/depth") {
			t.Fatalf("Record of an added required property = %v, want an *IncompatibleError with version 1, the rule and the pointer", err)
		}
		if err := contracts.Forget(ctx, b, "queue", "jobs", 9); !errors.Is(err, primitives.ErrNotFound) || !strings.Contains(err.Error(), "no live version 9") {
			t.Fatalf("Forget version 9 = %v, want ErrNotFound naming it", err)
		}
		if err := contracts.Forget(ctx, b, "queue", "jobs", 1); err != nil {
			t.Fatal(err)
		}
		record(t, b, "second", consumer(jobsRequired)) // records: version 1 forgotten
		c, ok, err := contracts.Get(ctx, b, "queue", "jobs")
		if err != nil || !ok || len(c.Versions) != 1 || c.Versions[0].Version != 2 {
			t.Fatalf("Get = %+v, %v, %v; want only version 2", c, ok, err)
		}
		if _, ok, err := contracts.Get(ctx, b, "pool", "jobs"); ok || err != nil {
			t.Fatalf("Get(pool jobs) = %v, %v; want no record", ok, err)
		}
	})
}

// TestNotOwnedRecordsNothing, on both backends: a plugin that does not own a contract
// (a submitter) is checked against the live versions, and writes none.
func TestNotOwnedRecordsNothing(t *testing.T) {
	onBothBackends(t, func(t *testing.T, b primitives.Backend) {
		ctx := context.Background()
		owns := func(kind, name string) bool { return false }
		if _, err := contracts.NewHolds("submitter").Record(ctx, b, consumer(jobsV1), owns, false); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := contracts.Get(ctx, b, "queue", "jobs"); ok || err != nil {
			t.Fatalf("Get after a submitter's Record = %v, %v; want no record", ok, err)
		}
		record(t, b, "consumer", consumer(jobsV1))
		_, err := contracts.NewHolds("submitter").Record(ctx, b, consumer(jobsRequired), owns, false)
		if ie := (*contracts.IncompatibleError)(nil); !errors.As(err, &ie) {
			t.Fatalf("a submitter's incompatible Record = %v, want an *IncompatibleError", err)
		}
	})
}

// TestHolderStates, on both backends: a holder is live while its host refreshes it
// (with its plugin named), stale once its key says it has not refreshed for 3 Sync (a
// dead host; a key in the bare-time form of older hosts is read too), and stopped once
// its host has said so (Stopped); a forget's use names only the live one as blocking.
func TestHolderStates(t *testing.T) {
	onBothBackends(t, func(t *testing.T, b primitives.Backend) {
		ctx := context.Background()
		holds := record(t, b, "box", consumer(jobsV1))
		state := func() contracts.Holder {
			t.Helper()
			c, ok, err := contracts.Get(ctx, b, "queue", "jobs")
			if err != nil || !ok || len(c.Versions) != 1 || len(c.Versions[0].Holders) != 1 {
				t.Fatalf("Get = %+v, %v, %v; want one version with one holder", c, ok, err)
			}
			return c.Versions[0].Holders[0]
		}
		live := state()
		if live.State != contracts.HolderLive || !strings.HasPrefix(live.Holder, "box@") || len(live.Plugins) != 1 || live.Plugins[0] != "a 0.1.0" ||
			!strings.Contains(live.String(), "(plugin a 0.1.0, live, refreshed") {
			t.Fatalf("holder = %+v (%s), want box@..., live, held by plugin a 0.1.0", live, live)
		}
		use, err := contracts.Use(ctx, b, "queue", "jobs", 1)
		if err != nil || len(use.Live()) != 1 || !strings.Contains(use.Blocks(), live.Holder) {
			t.Fatalf("Use = %+v, %v; want it blocked by %s", use, err, live.Holder)
		}
		key := "held:queue:jobs:1:" + live.Holder
		old, _ := time.Now().Add(-3*contracts.Sync - time.Second).UTC().MarshalText()
		if err := b.KVSet(ctx, contracts.Namespace, key, old, time.Minute, primitives.KVQuota{}); err != nil {
			t.Fatal(err)
		}
		if s := state(); s.State != contracts.HolderStale || !strings.Contains(s.String(), "stale: not refreshed for") {
			t.Errorf("holder with an old bare-time key = %+v (%s), want stale", s, s)
		}
		if use, err := contracts.Use(ctx, b, "queue", "jobs", 1); err != nil || use.Blocks() != "" {
			t.Errorf("Use with a stale holder and no task = %q, %v; want nothing blocking", use.Blocks(), err)
		}
		if err := holds.Stopped(ctx, b); err != nil {
			t.Fatal(err)
		}
		if s := state(); s.State != contracts.HolderStopped || len(s.Plugins) != 1 || !strings.Contains(s.String(), "stopped") {
			t.Errorf("holder after Stopped = %+v (%s), want stopped, its plugin kept", s, s)
		}
	})
}

// TestRelease, on both backends: a version two plugins of one host hold keeps its
// holder key until the last of them lets go.
func TestRelease(t *testing.T) {
	onBothBackends(t, func(t *testing.T, b primitives.Backend) {
		ctx := context.Background()
		holds := contracts.NewHolds("box")
		a, err := holds.Record(ctx, b, consumer(jobsV1), ownsAll, false)
		if err != nil {
			t.Fatal(err)
		}
		other := consumer(jobsV1)
		other.Type = "b"
		bh, err := holds.Record(ctx, b, other, ownsAll, false)
		if err != nil {
			t.Fatal(err)
		}
		if v := holds.VersionOf(a, "queue", "jobs"); v != 1 {
			t.Fatalf("VersionOf(a) = %d, want 1", v)
		}
		holders := func() int {
			t.Helper()
			c, _, err := contracts.Get(ctx, b, "queue", "jobs")
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Versions) == 0 {
				return 0
			}
			return len(c.Versions[0].Holders)
		}
		if err := holds.Release(ctx, b, a); err != nil {
			t.Fatal(err)
		}
		if n := holders(); n != 1 {
			t.Fatalf("holders after the first release = %d, want 1: plugin b still holds the version", n)
		}
		if err := holds.Release(ctx, b, bh); err != nil {
			t.Fatal(err)
		}
		if n := holders(); n != 0 {
			t.Fatalf("holders after the last release = %d, want none", n)
		}
	})
}
