package host_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/host/contracts"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
)

// The tags of pool "cookies" that plugin "a" puts to in the reload tests, and the same
// with a new optional tag.
const (
	tagsV1       = `{"type":"object","additionalProperties":false,"properties":{"site":{"type":"string"}}}`
	tagsOptional = `{"type":"object","additionalProperties":false,"properties":{"site":{"type":"string"},"fresh":{"type":"boolean"}}}`
)

// jobsAndCookies is plugin "a" consuming queue "jobs" with payload schema and putting
// to pool "cookies" with tags schema tags.
func jobsAndCookies(schema, tags string) abi.Describe {
	d := batchDescribe("a", "jobs", schema)
	d.Pools = []abi.PoolContract{{Name: "cookies", Payload: json.RawMessage(`{"type":"object"}`), Tags: json.RawMessage(tags)}}
	return d
}

// versionsOf lists, by version number, how many holders each live version of the
// contract at key has.
func versionsOf(t *testing.T, b primitives.Backend, kind, name string) map[int]int {
	t.Helper()
	c, ok, err := contracts.Get(context.Background(), b, kind, name)
	if err != nil || !ok {
		t.Fatalf("FleetContract(%s %s) = %v, %v", kind, name, ok, err)
	}
	out := map[int]int{}
	for _, v := range c.Versions {
		out[v.Version] = len(v.Holders)
	}
	return out
}

// TestReloadContractOverlap, on both backends: a reload whose build adds an optional
// property to its queue's payload and an optional tag to its pool's tags loads beside
// the running version (the registry holds both for the roll-over); once the old version
// has unloaded, the host lets go of it: with no other host holding it, the record keeps
// only the new version, which the door admits; with another host holding it (a second
// host on the same backend), the old version stays live, held by that host alone. A
// further build that adds a required property is refused at reload naming the rule and
// the pointer (in Reload's error, the type's ReloadError and the log), and the running
// version keeps serving.
func TestReloadContractOverlap(t *testing.T) {
	for _, other := range []bool{false, true} {
		name := "alone"
		if other {
			name = "beside-another-host"
		}
		t.Run(name, func(t *testing.T) {
			onBothBackends(t, func(t *testing.T, r *rig) {
				ctx := context.Background()
				r.grant("a", host.Grant{Queues: map[string][]string{"jobs": {"consume"}}, Pools: map[string][]string{"cookies": {"put"}}})
				watPlugin(t, r.dir, "done", "a", jobsAndCookies(jobsV1, tagsV1))
				h, stop := r.start()
				if other {
					r.hostOf(t, "other", jobsAndCookies(jobsV1, tagsV1))
				}

				watPlugin(t, r.dir, "done", "a", jobsAndCookies(jobsOptional, tagsOptional))
				if err := h.Reload(ctx); err != nil {
					t.Fatalf("Reload with an added optional property and tag = %v, want it loaded", err)
				}
				want := map[int]int{2: 1}
				if other {
					want = map[int]int{1: 1, 2: 1}
				}
				for _, kind := range []string{"queue", "pool"} {
					n := map[string]string{"queue": "jobs", "pool": "cookies"}[kind]
					if got := versionsOf(t, r.backend, kind, n); !equalCounts(got, want) {
						t.Errorf("%s %s versions (holders) = %v, want %v", kind, n, got, want)
					}
				}
				for _, p := range []string{`{"site":"x"}`, `{"site":"x","fresh":true}`} {
					if _, err := h.Submit(ctx, "jobs", []byte(p)); err != nil {
						t.Fatalf("Submit(%s) after the reload = %v", p, err)
					}
				}
				waitFor(t, "both tasks acked", func() bool {
					return testutil.QueueStats(t, r.backend, "jobs") == (primitives.QueueStats{}) && len(r.events.Finished("")) == 2
				})

				watPlugin(t, r.dir, "done", "a", jobsAndCookies(jobsRequired, tagsOptional))
				err := h.Reload(ctx)
				if err == nil {
					t.Fatal("Reload with an added required property = nil, want it refused")
				}
				wantRefusal(t, err, `queue "jobs"`, "required-property-added", "/properties/depth")
				if p, _ := pluginOf(t, h, "a"); !strings.Contains(p.ReloadError, "required-property-added") || !strings.Contains(p.ReloadError, "/properties/depth") {
					t.Errorf("ReloadError = %q, want the rule and the pointer", p.ReloadError)
				}
				if log := r.logs.String(); !strings.Contains(log, "required-property-added at /properties/depth") {
					t.Errorf("the log does not name the refusal's rule and pointer:\n%s", log)
				}
				if got := versionsOf(t, r.backend, "queue", "jobs"); !equalCounts(got, want) {
					t.Errorf("queue jobs versions (holders) after the refusal = %v, want %v", got, want)
				}
				if _, err := h.Submit(ctx, "jobs", []byte(`{"site":"y","fresh":false}`)); err != nil {
					t.Fatalf("Submit after the refused reload = %v", err)
				}
				waitFor(t, "the running version acks a third task", func() bool { return len(r.events.Finished("")) == 3 })
				stop()
			})
		})
	}
}

func equalCounts(a, b map[int]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestContractRejoinsAfterPartition, on both backends: a host cut off from the backend
// for longer than contracts.TTL (its holder key lapsed, and another host's load then wrote
// the record without its version) rejoins as a holder of what it still runs at its first
// refresh once it reaches the backend again: the version is back under its number,
// beside the version added meanwhile; since that one is incompatible with it (it was
// free to load while the first host's version had lapsed), the rejoin is logged as an
// error naming the rule and the pointer, for an operator to retire one.
func TestContractRejoinsAfterPartition(t *testing.T) {
	onBothBackends(t, func(t *testing.T, r *rig) {
		ctx := context.Background()
		ha := r.jobsHost(t, jobsV1)
		doc := contractRecord(t, r.backend, "queue:jobs")
		held := "held:queue:jobs:1:" + doc.Versions[0].Holders[0]
		if _, err := r.backend.KVDelete(ctx, "fleet-contracts", held); err != nil { // the TTL's end
			t.Fatal(err)
		}
		r.hostOf(t, "other", batchDescribe("a", "jobs", jobsRequired)) // loads: version 1 lapsed
		if got := versionsOf(t, r.backend, "queue", "jobs"); !equalCounts(got, map[int]int{2: 1}) {
			t.Fatalf("versions (holders) = %v, want only version 2 while the first host is cut off", got)
		}

		if err := host.RefreshContracts(ctx, ha); err != nil {
			t.Fatal(err)
		}
		if got := versionsOf(t, r.backend, "queue", "jobs"); !equalCounts(got, map[int]int{1: 1, 2: 1}) {
			t.Errorf("versions (holders) after the first host's refresh = %v, want version 1 back beside version 2", got)
		}
		if _, found, err := r.backend.KVGet(ctx, "fleet-contracts", held); err != nil || !found {
			t.Errorf("holder key %s after the rejoin: found %v, %v", held, found, err)
		}
		if log := r.logs.String(); !strings.Contains(log, "level=ERROR") || !strings.Contains(log, "required-property-removed") || !strings.Contains(log, "/properties/depth") {
			t.Errorf("the rejoin beside an incompatible version is not logged as an error naming the rule and the pointer:\n%s", log)
		}
		// Held again, it is refreshed as before.
		if err := host.RefreshContracts(ctx, ha); err != nil {
			t.Fatal(err)
		}
		if got := versionsOf(t, r.backend, "queue", "jobs"); !equalCounts(got, map[int]int{1: 1, 2: 1}) {
			t.Errorf("versions (holders) after a second refresh = %v", got)
		}
	})
}
