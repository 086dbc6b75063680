package validate_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/compat"
	"github.com/fleethost/fleet/host/internal/validate"
)

func full(old, new []byte) error { return compat.Check(compat.Full, old, new) }

// jobs is plugin "a" consuming queue "jobs" with payload schema, and putting to pool
// "cookies" with tags schema tags.
func jobs(schema, tags string) *abi.Describe {
	return &abi.Describe{ABIVersion: abi.Version, Type: "a", Mode: abi.ModeBatch,
		Consumes: &abi.QueueContract{Name: "jobs", Payload: json.RawMessage(schema)},
		Pools:    []abi.PoolContract{{Name: "cookies", Payload: json.RawMessage(`{"type":"object"}`), Tags: json.RawMessage(tags)}}}
}

const (
	siteV1  = `{"type":"object","additionalProperties":false,"required":["site"],"properties":{"site":{"type":"string"}}}`
	siteV2  = `{"type":"object","additionalProperties":false,"required":["site"],"properties":{"site":{"type":"string"},"fresh":{"type":"boolean"}}}`
	siteReq = `{"type":"object","additionalProperties":false,"required":["site","depth"],"properties":{"site":{"type":"string"},"depth":{"type":"integer"}}}`
)

// TestRegistryHoldsVersions: a reload's two builds of one plugin register side by side
// when FULL-compatible (a queue's payload, a pool's tags), and a value valid under
// either is admitted; an incompatible one is refused naming the rule and the pointer,
// and registers nothing; once the old build is released, only the new version is
// admitted, and once both are, the contracts are gone.
func TestRegistryHoldsVersions(t *testing.T) {
	r := validate.NewRegistry(full)
	old, err := r.Register(jobs(siteV1, siteV1))
	if err != nil {
		t.Fatal(err)
	}
	new, err := r.Register(jobs(siteV2, siteV2))
	if err != nil {
		t.Fatalf("Register(an added optional property) = %v", err)
	}
	q, p := r.Queue("jobs"), r.Pool("cookies")
	if n := len(q.Versions()); n != 2 {
		t.Fatalf("queue jobs has %d versions, want 2", n)
	}
	fresh := []byte(`{"site":"x","fresh":true}`)
	for _, v := range []string{`{"site":"x"}`, string(fresh)} {
		if e := q.Admit("payload", []byte(v), nil); e != nil {
			t.Errorf("Admit(%s) with both versions = %v", v, e)
		}
		if _, e := p.Put(json.RawMessage(`{}`), json.RawMessage(v)); e != nil {
			t.Errorf("Put(tags %s) with both versions = %v", v, e)
		}
	}
	if _, e := p.Where(abi.Where{"fresh": json.RawMessage(`true`)}); e != nil {
		t.Errorf("Where(fresh) with both versions = %v", e)
	}

	_, err = r.Register(jobs(siteReq, siteV1))
	var ce *validate.ConflictError
	var rule *compat.Error
	if !errors.As(err, &ce) || !errors.As(err, &rule) || rule.Rule != compat.RequiredAdded || rule.Path != "/properties/depth" {
		t.Fatalf("Register(an added required property) = %v, want a ConflictError with rule %s at /properties/depth", err, compat.RequiredAdded)
	}
	if !strings.Contains(err.Error(), compat.RequiredAdded) || !strings.Contains(err.Error(), "/properties/depth") {
		t.Errorf("error %q names neither the rule nor the pointer", err)
	}
	if n := len(q.Versions()); n != 2 {
		t.Errorf("queue jobs has %d versions after a refusal, want 2", n)
	}

	new.Release()
	if e := q.Admit("payload", fresh, nil); e == nil {
		t.Error("the released version's field is still admitted")
	}
	if _, e := p.Where(abi.Where{"fresh": json.RawMessage(`true`)}); e == nil {
		t.Error("the released version's tag is still a where filter")
	}
	old.Release()
	old.Release() // idempotent
	if r.Queue("jobs") != nil || r.Pool("cookies") != nil {
		t.Error("contracts still registered once every holder released them")
	}
}

// TestPoolAdmitsFleetVersions: a pool admits a put and a where filter under one of the
// fleet's other live versions, as a queue does; a refusal is this host's version's.
func TestPoolAdmitsFleetVersions(t *testing.T) {
	r := validate.NewRegistry(full)
	if _, err := r.Register(jobs(siteV1, siteV1)); err != nil {
		t.Fatal(err)
	}
	p := r.Pool("cookies")
	tags := json.RawMessage(`{"site":"x","fresh":true}`)
	if _, e := p.Put(json.RawMessage(`{}`), tags); e == nil {
		t.Fatal("admitted a tag only another version declares, with no fleet versions set")
	}
	payload, err := validate.Compile("payload", json.RawMessage(`{"type":"object"}`))
	if err != nil {
		t.Fatal(err)
	}
	v2, err := validate.Compile("tags", json.RawMessage(siteV2))
	if err != nil {
		t.Fatal(err)
	}
	p.SetFleet([]validate.PoolVersion{{Payload: payload, Tags: v2}})
	got, e := p.Put(json.RawMessage(`{}`), tags)
	if e != nil || got["fresh"] != "true" || got["site"] != `"x"` {
		t.Fatalf("Put under the fleet's version = %v, %v", got, e)
	}
	if _, e := p.Put(json.RawMessage(`{}`), json.RawMessage(`{"site":1}`)); e == nil || !strings.Contains(e.Message, "site") {
		t.Errorf("Put(site 1) = %v, want a refusal naming site", e)
	}
}
