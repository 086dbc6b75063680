package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/host/contracts"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
)

// The versions of queue "jobs" a consumer plugin "a" declares in TestContractEvolves.
const (
	jobsV1       = `{"type":"object","additionalProperties":false,"required":["site"],"properties":{"site":{"type":"string"}}}`
	jobsOptional = `{"type":"object","additionalProperties":false,"required":["site"],"properties":{"site":{"type":"string"},"fresh":{"type":"boolean"}}}`
	jobsRequired = `{"type":"object","additionalProperties":false,"required":["site","depth"],"properties":{"site":{"type":"string"},"depth":{"type":"integer"}}}`
)

// TestContractEvolves, on the memory backend and on Redis: two hosts on one backend load
// the consumer of queue "jobs". The second, whose payload has an added optional
// property, starts beside the first, and the fleet holds both versions, each by its
// host; a third, whose payload adds a required property, is refused naming the rule and
// the JSON pointer; the first keeps serving, and accepts the payloads of both versions.
func TestContractEvolves(t *testing.T) {
	onBothBackends(t, func(t *testing.T, r *rig) {
		r.grant("a", consumer("jobs"))
		r.wat("done", "a", batchDescribe("a", "jobs", jobsV1))
		ha, _ := r.start()

		r.hostOf(t, "second", batchDescribe("a", "jobs", jobsOptional)) // starts: an added optional property
		doc := contractRecord(t, r.backend, "queue:jobs")
		if len(doc.Versions) != 2 || len(doc.Versions[0].Holders) != 1 || len(doc.Versions[1].Holders) != 1 ||
			doc.Versions[0].Holders[0] == doc.Versions[1].Holders[0] {
			t.Fatalf("record = %+v, want versions 1 and 2, each held by its own host", doc)
		}

		cfg := r.cfg
		cfg.Instance = "third"
		cfg.PluginsDir = t.TempDir()
		watPlugin(t, cfg.PluginsDir, "done", "a", batchDescribe("a", "jobs", jobsRequired))
		_, err := newHost(cfg)
		var ie *contracts.IncompatibleError
		if !errors.As(err, &ie) {
			t.Fatalf("host.New with an added required property = %v, want an *contracts.IncompatibleError", err)
		}
		wantRefusal(t, err, `queue "jobs"`, "required-property-added", "/properties/depth", "version 1")

		// The first host's door accepts what the second's version admits once it has read
		// the fleet's versions (Run does every contracts.Sync), and still only that.
		ctx := context.Background()
		fresh := []byte(`{"site":"x","fresh":true}`)
		if _, err := ha.Submit(ctx, "jobs", fresh); err == nil {
			t.Fatal("the first host accepted the new field before reading the fleet's versions")
		}
		if err := host.SyncContracts(ctx, ha); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{`{"site":"x"}`, string(fresh)} {
			if _, err := ha.Submit(ctx, "jobs", []byte(p)); err != nil {
				t.Fatalf("first host: Submit(%s) = %v", p, err)
			}
		}
		for _, p := range []string{`{"site":"x","fresh":"yes"}`, `{"site":"x","depth":1}`} {
			if _, err := ha.Submit(ctx, "jobs", []byte(p)); err == nil {
				t.Errorf("first host: Submit(%s) accepted, which no live version admits", p)
			}
		}
		waitFor(t, "the first host acks both tasks", func() bool {
			return testutil.QueueStats(t, r.backend, "jobs") == (primitives.QueueStats{}) && len(r.events.Finished("")) == 2
		})
	})
}

// jobsHost makes (without running it) a host on r's backend whose plugin "a" consumes
// queue "jobs" with payload schema, closed at the test's end.
func (r *rig) jobsHost(t *testing.T, schema string) *host.Host {
	t.Helper()
	r.grant("a", consumer("jobs"))
	return r.hostOf(t, r.cfg.Instance, batchDescribe("a", "jobs", schema))
}

// hostOf makes (without running it) a host of instance on r's backend, with r's grants,
// loading plugin "a" described by d from a folder of its own; closed at the test's end.
func (r *rig) hostOf(t *testing.T, instance string, d abi.Describe) *host.Host {
	t.Helper()
	cfg := r.cfg
	cfg.Instance = instance
	cfg.PluginsDir = t.TempDir()
	watPlugin(t, cfg.PluginsDir, "done", "a", d)
	h, err := newHost(cfg)
	if err != nil {
		t.Fatalf("host.New of %s: %v", instance, err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// onBothBackends runs test on a rig on the memory backend and on one on Redis.
func onBothBackends(t *testing.T, test func(*testing.T, *rig)) {
	for _, tt := range []struct {
		name string
		rig  func(*testing.T) *rig
	}{{"memory", newRig}, {"redis", newRedisRig}} {
		t.Run(tt.name, func(t *testing.T) { test(t, tt.rig(t)) })
	}
}

// recordedContract is the fleet's record of a contract, as hosts write it.
type recordedContract struct {
	Next     int `json:"next"`
	Versions []struct {
		Version int             `json:"version"`
		Schema  json.RawMessage `json:"schema"`
		Holders []string        `json:"holders"`
	} `json:"versions"`
}

// contractRecord reads the record at key ("queue:<name>", "pool:<name>").
func contractRecord(t *testing.T, b primitives.Backend, key string) recordedContract {
	t.Helper()
	var doc recordedContract
	raw, found, err := b.KVGet(context.Background(), "fleet-contracts", key)
	if err != nil || !found {
		t.Fatalf("record %s: %v, found %v", key, err, found)
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("record %s = %s: %v", key, raw, err)
	}
	return doc
}

// latestSchema is the schema of the newest version in the record at key.
func latestSchema(t *testing.T, b primitives.Backend, key string) string {
	t.Helper()
	doc := contractRecord(t, b, key)
	if len(doc.Versions) == 0 {
		t.Fatalf("record %s has no live version", key)
	}
	return string(doc.Versions[len(doc.Versions)-1].Schema)
}

// TestContractVersionLapses, on the memory backend and on Redis: a version is live while
// a holder key of it lives. Once the first host's holder key is gone (what its TTL's end
// does to a host that died), a host with an incompatible schema starts, and the record
// keeps only its version, numbered on. On Redis, the holder key carries a TTL of at most
// contracts.TTL; a refresh writes it again.
func TestContractVersionLapses(t *testing.T) {
	onBothBackends(t, func(t *testing.T, r *rig) {
		ctx := context.Background()
		ha := r.jobsHost(t, jobsV1)
		doc := contractRecord(t, r.backend, "queue:jobs")
		if len(doc.Versions) != 1 || len(doc.Versions[0].Holders) != 1 {
			t.Fatalf("record = %+v, want version 1 held by the first host", doc)
		}
		held := "held:queue:jobs:1:" + doc.Versions[0].Holders[0]
		if r.redis != nil {
			ttl, err := r.redis.Client().PTTL(ctx, "fleet:kv:{fleet-contracts}[fleet-contracts]"+held).Result()
			if err != nil || ttl <= 0 || ttl > contracts.TTL {
				t.Fatalf("holder key TTL = %v, %v; want within (0, %v]", ttl, err, contracts.TTL)
			}
		}
		// A refresh rewrites the holder key (Run's every contracts.Sync).
		if existed, err := r.backend.KVDelete(ctx, "fleet-contracts", held); err != nil || !existed {
			t.Fatalf("delete holder key %s = %v, %v", held, existed, err)
		}
		if err := host.RefreshContracts(ctx, ha); err != nil {
			t.Fatal(err)
		}
		if _, found, err := r.backend.KVGet(ctx, "fleet-contracts", held); err != nil || !found {
			t.Fatalf("holder key %s after a refresh: found %v, %v", held, found, err)
		}
		if existed, err := r.backend.KVDelete(ctx, "fleet-contracts", held); err != nil || !existed {
			t.Fatalf("delete holder key %s = %v, %v", held, existed, err)
		}

		r.jobsHost(t, jobsRequired) // starts: version 1 lapsed
		doc = contractRecord(t, r.backend, "queue:jobs")
		if len(doc.Versions) != 1 || doc.Versions[0].Version != 2 || doc.Next != 3 || string(doc.Versions[0].Schema) != jobsRequiredCanonical {
			t.Fatalf("record = %+v, want only version 2, the new schema", doc)
		}
	})
}

// jobsRequiredCanonical is jobsRequired as the record keeps it.
const jobsRequiredCanonical = `{"additionalProperties":false,"properties":{"depth":{"type":"integer"},"site":{"type":"string"}},"required":["site","depth"],"type":"object"}`
