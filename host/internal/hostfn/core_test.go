package hostfn

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/validate"
	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/primitives/memory"
)

// spy wraps a backend: it counts the calls that reach it, and can fail or panic them.
type spy struct {
	primitives.Backend
	calls atomic.Int64
	fail  error // returned by every call when set
	panic bool  // every call panics when set
}

func (s *spy) hit() error {
	s.calls.Add(1)
	if s.panic {
		panic("spy: asked to panic")
	}
	return s.fail
}

func (s *spy) PoolPut(ctx context.Context, pool string, payload []byte, tags primitives.Tags, ttl time.Duration, o primitives.PoolPutOptions) (string, error) {
	if err := s.hit(); err != nil {
		return "", err
	}
	return s.Backend.PoolPut(ctx, pool, payload, tags, ttl, o)
}
func (s *spy) PoolList(ctx context.Context, pool string, where primitives.Tags, limit int) ([]primitives.Item, error) {
	if err := s.hit(); err != nil {
		return nil, err
	}
	return s.Backend.PoolList(ctx, pool, where, limit)
}
func (s *spy) PoolClaim(ctx context.Context, pool string, where primitives.Tags, hold time.Duration) (primitives.ItemLease, bool, error) {
	if err := s.hit(); err != nil {
		return primitives.ItemLease{}, false, err
	}
	return s.Backend.PoolClaim(ctx, pool, where, hold)
}
func (s *spy) PoolRelease(ctx context.Context, pool, id, token string) error {
	if err := s.hit(); err != nil {
		return err
	}
	return s.Backend.PoolRelease(ctx, pool, id, token)
}
func (s *spy) PoolExtend(ctx context.Context, pool, id, token string, hold time.Duration) (time.Time, error) {
	if err := s.hit(); err != nil {
		return time.Time{}, err
	}
	return s.Backend.PoolExtend(ctx, pool, id, token, hold)
}
func (s *spy) PoolMarkBad(ctx context.Context, pool, id, reason string, weight int) error {
	if err := s.hit(); err != nil {
		return err
	}
	return s.Backend.PoolMarkBad(ctx, pool, id, reason, weight)
}
func (s *spy) PoolMarkGood(ctx context.Context, pool, id string, weight int) error {
	if err := s.hit(); err != nil {
		return err
	}
	return s.Backend.PoolMarkGood(ctx, pool, id, weight)
}
func (s *spy) PoolSize(ctx context.Context, pool string) (int, error) {
	if err := s.hit(); err != nil {
		return 0, err
	}
	return s.Backend.PoolSize(ctx, pool)
}
func (s *spy) KVSet(ctx context.Context, ns, key string, v []byte, ttl time.Duration, q primitives.KVQuota) error {
	if err := s.hit(); err != nil {
		return err
	}
	return s.Backend.KVSet(ctx, ns, key, v, ttl, q)
}
func (s *spy) KVGet(ctx context.Context, ns, key string) ([]byte, bool, error) {
	if err := s.hit(); err != nil {
		return nil, false, err
	}
	return s.Backend.KVGet(ctx, ns, key)
}
func (s *spy) KVDelete(ctx context.Context, ns, key string) (bool, error) {
	if err := s.hit(); err != nil {
		return false, err
	}
	return s.Backend.KVDelete(ctx, ns, key)
}
func (s *spy) LockAcquire(ctx context.Context, name string, hold, wait time.Duration, q primitives.NameQuota) (primitives.LockLease, bool, error) {
	if err := s.hit(); err != nil {
		return primitives.LockLease{}, false, err
	}
	return s.Backend.LockAcquire(ctx, name, hold, wait, q)
}
func (s *spy) LockRelease(ctx context.Context, name, token string) (bool, error) {
	if err := s.hit(); err != nil {
		return false, err
	}
	return s.Backend.LockRelease(ctx, name, token)
}
func (s *spy) CounterIncr(ctx context.Context, name string, delta int64, q primitives.NameQuota) (int64, error) {
	if err := s.hit(); err != nil {
		return 0, err
	}
	return s.Backend.CounterIncr(ctx, name, delta, q)
}
func (s *spy) CounterGet(ctx context.Context, name string) (int64, error) {
	if err := s.hit(); err != nil {
		return 0, err
	}
	return s.Backend.CounterGet(ctx, name)
}
func (s *spy) QueuePush(ctx context.Context, queue string, payload []byte, o primitives.QueuePushOptions) (string, bool, error) {
	if err := s.hit(); err != nil {
		return "", false, err
	}
	return s.Backend.QueuePush(ctx, queue, payload, o)
}

const (
	cookiePayload = `{"type":"object","properties":{"cookie":{"type":"string"}},"required":["cookie"],"additionalProperties":false}`
	cookieTags    = `{"type":"object","properties":{"site":{"type":"string"},"fresh":{"type":"boolean"}},"additionalProperties":false}`
	jobPayload    = `{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false}`
)

type fixture struct {
	core   *Core
	spy    *spy
	caller *Caller
	ctx    context.Context
	logs   *bytes.Buffer
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	b := memory.New(memory.Options{})
	t.Cleanup(func() { b.Close() })
	reg := validate.NewRegistry(nil)
	// "scraper" declares the pool and the jobs queue; "other" declares a pool and a
	// queue that scraper did not declare.
	for _, d := range []*abi.Describe{
		{ABIVersion: abi.Version, Type: "scraper", Mode: abi.ModeBatch,
			Consumes: &abi.QueueContract{Name: "jobs", Payload: json.RawMessage(jobPayload)},
			Pools:    []abi.PoolContract{{Name: "cookies", Payload: json.RawMessage(cookiePayload), Tags: json.RawMessage(cookieTags)}}},
		{ABIVersion: abi.Version, Type: "other", Mode: abi.ModeBatch,
			Consumes: &abi.QueueContract{Name: "secret-jobs", Payload: json.RawMessage(`{}`)},
			Pools:    []abi.PoolContract{{Name: "secrets", Payload: json.RawMessage(`{}`), Tags: json.RawMessage(`{}`)}}},
	} {
		if _, err := reg.Register(d); err != nil {
			t.Fatal(err)
		}
	}
	s := &spy{Backend: b}
	logs := &bytes.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	core := NewCore(s, reg, nil, log)
	p := NewGrantee("scraper", Access{
		Pools:    map[string]Roles{"cookies": PoolRoles},
		Queues:   map[string]Roles{"jobs": QueueRoles},
		KV:       Patterns{"scraper:*"},
		Locks:    Patterns{"scraper:*"},
		Counters: Patterns{"scraper:*", "shared-exact"},
	}, json.RawMessage(`{"site":"x"}`), testLimits, nil)
	caller := &Caller{Plugin: p, Slot: "scraper/0"}
	return &fixture{core: core, spy: s, caller: caller, ctx: WithCaller(context.Background(), caller), logs: logs}
}

// call runs op and decodes the envelope; it fails the test if the reply is not one.
func (f *fixture) call(t *testing.T, op abi.Op, req string, result any) *abi.Error {
	t.Helper()
	reply := f.core.Call(f.ctx, op, []byte(req))
	err := abi.DecodeReply(reply, result)
	if err == nil {
		return nil
	}
	var e *abi.Error
	if !errors.As(err, &e) {
		t.Fatalf("Call(%s) reply %s: %v", op, reply, err)
	}
	return e
}

func TestCallKinds(t *testing.T) {
	big := `"` + strings.Repeat("x", 2000) + `"`
	tests := []struct {
		name string
		op   abi.Op
		req  string
		kind abi.Kind // "" for success
		// denied calls must not reach the backend
		noBackend bool
	}{
		// pool_put
		{"put ok", abi.OpPoolPut, `{"pool":"cookies","payload":{"cookie":"c"},"tags":{"site":"x","fresh":true},"ttl_ms":60000}`, "", false},
		{"put malformed json", abi.OpPoolPut, `{"pool":"cookies",`, abi.ValueError, true},
		{"put unknown request field", abi.OpPoolPut, `{"pool":"cookies","payload":{"cookie":"c"},"color":1}`, abi.TypeError, true},
		{"put wrong field type", abi.OpPoolPut, `{"pool":7,"payload":{"cookie":"c"}}`, abi.ValueError, true},
		{"put payload refused", abi.OpPoolPut, `{"pool":"cookies","payload":{"cookie":3}}`, abi.ValueError, true},
		{"put payload missing", abi.OpPoolPut, `{"pool":"cookies"}`, abi.ValueError, true},
		{"put payload unknown property", abi.OpPoolPut, `{"pool":"cookies","payload":{"cookie":"c","x":1}}`, abi.TypeError, true},
		{"put unknown tag", abi.OpPoolPut, `{"pool":"cookies","payload":{"cookie":"c"},"tags":{"color":"red"}}`, abi.TypeError, true},
		{"put wrongly typed tag", abi.OpPoolPut, `{"pool":"cookies","payload":{"cookie":"c"},"tags":{"fresh":"yes"}}`, abi.ValueError, true},
		{"put oversized payload", abi.OpPoolPut, `{"pool":"cookies","payload":{"cookie":` + big + `}}`, abi.LimitExceeded, true},
		{"put negative ttl", abi.OpPoolPut, `{"pool":"cookies","payload":{"cookie":"c"},"ttl_ms":-1}`, abi.ValueError, true},
		{"put ungranted pool", abi.OpPoolPut, `{"pool":"secrets","payload":{}}`, abi.PermissionDenied, true},
		{"put bad pool name", abi.OpPoolPut, `{"pool":"a b","payload":{}}`, abi.ValueError, true},
		// pool_claim / pool_list
		{"claim none", abi.OpPoolClaim, `{"pool":"cookies","where":{"site":"nowhere"},"hold_ms":1000}`, "", false},
		{"claim unknown tag", abi.OpPoolClaim, `{"pool":"cookies","where":{"color":"red"},"hold_ms":1000}`, abi.TypeError, true},
		{"claim wrongly typed tag", abi.OpPoolClaim, `{"pool":"cookies","where":{"fresh":1},"hold_ms":1000}`, abi.ValueError, true},
		{"claim no hold", abi.OpPoolClaim, `{"pool":"cookies"}`, abi.ValueError, true},
		{"claim ungranted", abi.OpPoolClaim, `{"pool":"secrets","hold_ms":1000}`, abi.PermissionDenied, true},
		{"list ok", abi.OpPoolList, `{"pool":"cookies","where":{"site":"x"}}`, "", false},
		{"list unknown tag", abi.OpPoolList, `{"pool":"cookies","where":{"nope":1}}`, abi.TypeError, true},
		{"list negative limit", abi.OpPoolList, `{"pool":"cookies","limit":-1}`, abi.ValueError, true},
		{"list ungranted", abi.OpPoolList, `{"pool":"secrets"}`, abi.PermissionDenied, true},
		{"release gone", abi.OpPoolRelease, `{"pool":"cookies","id":"nope","token":"t"}`, abi.NotFound, false},
		{"release ungranted", abi.OpPoolRelease, `{"pool":"secrets","id":"x","token":"t"}`, abi.PermissionDenied, true},
		{"extend gone", abi.OpPoolExtend, `{"pool":"cookies","id":"nope","token":"t","hold_ms":1000}`, abi.NotFound, false},
		{"extend no hold", abi.OpPoolExtend, `{"pool":"cookies","id":"x","token":"t"}`, abi.ValueError, true},
		{"extend hold past the bound", abi.OpPoolExtend, fmt.Sprintf(`{"pool":"cookies","id":"x","token":"t","hold_ms":%d}`, abi.MaxMillis+1), abi.ValueError, true},
		{"extend ungranted", abi.OpPoolExtend, `{"pool":"secrets","id":"x","token":"t","hold_ms":1000}`, abi.PermissionDenied, true},
		{"mark_bad gone", abi.OpPoolMarkBad, `{"pool":"cookies","id":"nope","reason":"r"}`, abi.NotFound, false},
		{"mark_bad long reason", abi.OpPoolMarkBad, `{"pool":"cookies","id":"x","reason":` + big + `}`, abi.LimitExceeded, true},
		{"mark_bad ungranted", abi.OpPoolMarkBad, `{"pool":"secrets","id":"x","reason":"r"}`, abi.PermissionDenied, true},
		{"mark_bad negative weight", abi.OpPoolMarkBad, `{"pool":"cookies","id":"x","reason":"r","weight":-1}`, abi.ValueError, true},
		{"mark_bad fractional weight", abi.OpPoolMarkBad, `{"pool":"cookies","id":"x","reason":"r","weight":0.5}`, abi.ValueError, true},
		{"mark_good gone", abi.OpPoolMarkGood, `{"pool":"cookies","id":"nope"}`, abi.NotFound, false},
		{"mark_good negative weight", abi.OpPoolMarkGood, `{"pool":"cookies","id":"x","weight":-2}`, abi.ValueError, true},
		{"mark_good weight past the bound", abi.OpPoolMarkGood, `{"pool":"cookies","id":"x","weight":1073741825}`, abi.ValueError, true},
		{"mark_good ungranted", abi.OpPoolMarkGood, `{"pool":"secrets","id":"x"}`, abi.PermissionDenied, true},
		{"put negative max_uses", abi.OpPoolPut, `{"pool":"cookies","payload":{"cookie":"c"},"max_uses":-1}`, abi.ValueError, true},
		{"put negative max_error_score", abi.OpPoolPut, `{"pool":"cookies","payload":{"cookie":"c"},"max_error_score":-1}`, abi.ValueError, true},
		{"size ok", abi.OpPoolSize, `{"pool":"cookies"}`, "", false},
		{"size ungranted", abi.OpPoolSize, `{"pool":"secrets"}`, abi.PermissionDenied, true},
		// kv
		{"kv set ok", abi.OpKVSet, `{"namespace":"scraper:state","key":"k","value":{"a":1}}`, "", false},
		{"kv set malformed", abi.OpKVSet, `{"namespace":"scraper:state","key":"k","value":}`, abi.ValueError, true},
		{"kv set no value", abi.OpKVSet, `{"namespace":"scraper:state","key":"k"}`, abi.ValueError, true},
		{"kv set oversized", abi.OpKVSet, `{"namespace":"scraper:state","key":"k","value":` + big + `}`, abi.LimitExceeded, true},
		{"kv set ungranted", abi.OpKVSet, `{"namespace":"global","key":"k","value":1}`, abi.PermissionDenied, true},
		{"kv set contracts", abi.OpKVSet, `{"namespace":"fleet-contracts","key":"queue:jobs","value":1}`, abi.PermissionDenied, true},
		{"kv get ok", abi.OpKVGet, `{"namespace":"scraper:state","key":"missing"}`, "", false},
		{"kv get ungranted", abi.OpKVGet, `{"namespace":"other:state","key":"k"}`, abi.PermissionDenied, true},
		{"kv get unknown field", abi.OpKVGet, `{"namespace":"scraper:state","key":"k","ttl_ms":1}`, abi.TypeError, true},
		{"kv delete ungranted", abi.OpKVDelete, `{"namespace":"other","key":"k"}`, abi.PermissionDenied, true},
		{"kv bad key", abi.OpKVGet, `{"namespace":"scraper:state","key":"a{b}"}`, abi.ValueError, false},
		// locks
		{"lock ok", abi.OpLockAcquire, `{"name":"scraper:l","hold_ms":1000}`, "", false},
		{"lock no hold", abi.OpLockAcquire, `{"name":"scraper:l"}`, abi.ValueError, true},
		{"lock negative wait", abi.OpLockAcquire, `{"name":"scraper:l","hold_ms":1000,"wait_ms":-1}`, abi.ValueError, true},
		{"lock ungranted", abi.OpLockAcquire, `{"name":"other:l","hold_ms":1000}`, abi.PermissionDenied, true},
		{"lock contracts", abi.OpLockAcquire, `{"name":"fleet-contracts","hold_ms":1000}`, abi.PermissionDenied, true},
		{"unlock ungranted", abi.OpLockRelease, `{"name":"other:l","token":"t"}`, abi.PermissionDenied, true},
		// counters
		{"incr ok", abi.OpCounterIncr, `{"name":"scraper:n"}`, "", false},
		{"incr exact grant", abi.OpCounterIncr, `{"name":"shared-exact","delta":2}`, "", false},
		{"incr prefix of exact is not granted", abi.OpCounterIncr, `{"name":"shared-exactly"}`, abi.PermissionDenied, true},
		{"incr wrong type", abi.OpCounterIncr, `{"name":"scraper:n","delta":"2"}`, abi.ValueError, true},
		{"incr ungranted", abi.OpCounterIncr, `{"name":"other:n"}`, abi.PermissionDenied, true},
		{"get ungranted", abi.OpCounterGet, `{"name":"other:n"}`, abi.PermissionDenied, true},
		// submit
		{"submit ok", abi.OpSubmit, `{"queue":"jobs","payload":{"n":1}}`, "", false},
		{"submit refused payload", abi.OpSubmit, `{"queue":"jobs","payload":{"n":"1"}}`, abi.ValueError, true},
		{"submit unknown property", abi.OpSubmit, `{"queue":"jobs","payload":{"n":1,"m":2}}`, abi.TypeError, true},
		{"submit oversized", abi.OpSubmit, `{"queue":"jobs","payload":{"n":1,"pad":` + big + `}}`, abi.LimitExceeded, true},
		{"submit ungranted", abi.OpSubmit, `{"queue":"secret-jobs","payload":{}}`, abi.PermissionDenied, true},
		{"submit unique key of a schedule", abi.OpSubmit, `{"queue":"jobs","payload":{"n":1},"unique":"schedule:poll:1700000000"}`, abi.ValueError, true},
		{"submit key too long", abi.OpSubmit, `{"queue":"jobs","payload":{"n":1},"key":"` + strings.Repeat("k", MaxSubmitKey+1) + `"}`, abi.ValueError, true},
		// config, log, metric, http
		{"config ok", abi.OpConfigGet, `{}`, "", true},
		{"config unknown field", abi.OpConfigGet, `{"x":1}`, abi.TypeError, true},
		{"log ok", abi.OpLog, `{"level":"info","message":"hello","attrs":{"n":1}}`, "", true},
		{"log bad level", abi.OpLog, `{"level":"loud","message":"x"}`, abi.ValueError, true},
		{"metric ok", abi.OpMetric, `{"name":"pages","kind":"counter","value":1}`, "", true},
		{"metric bad name", abi.OpMetric, `{"name":"1 page","kind":"counter","value":1}`, abi.ValueError, true},
		{"metric negative counter", abi.OpMetric, `{"name":"pages","kind":"counter","value":-1}`, abi.ValueError, true},
		{"metric bad kind", abi.OpMetric, `{"name":"pages","kind":"histogram","value":1}`, abi.ValueError, true},
		{"http unavailable", abi.OpHTTP, `{"method":"GET","url":"https://example.com/"}`, abi.Unavailable, true},
		{"reply_fetch is not a core op", abi.OpReplyFetch, ``, abi.Internal, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			e := f.call(t, tt.op, tt.req, nil)
			switch {
			case tt.kind == "" && e != nil:
				t.Fatalf("Call(%s, %s) = %v, want success", tt.op, tt.req, e)
			case tt.kind != "" && (e == nil || e.Kind != tt.kind):
				t.Fatalf("Call(%s, %s) = %v, want kind %s", tt.op, tt.req, e, tt.kind)
			}
			if n := f.spy.calls.Load(); tt.noBackend && n != 0 {
				t.Errorf("Call(%s) reached the backend %d times, want 0", tt.op, n)
			}
			if tt.kind == abi.PermissionDenied && !strings.Contains(f.logs.String(), "outside the grant") {
				t.Errorf("a refused call was not logged; logs:\n%s", f.logs)
			}
		})
	}
}

// TestRoles: each pool and queue op is admitted by its role alone. A plugin granted one
// role on a pool gets PermissionDenied for every op of the others, naming the missing
// role, and none of those calls reaches the backend.
func TestRoles(t *testing.T) {
	calls := map[abi.Op]string{
		abi.OpPoolPut:      `{"pool":"cookies","payload":{"cookie":"c"}}`,
		abi.OpPoolClaim:    `{"pool":"cookies","hold_ms":1000}`,
		abi.OpPoolRelease:  `{"pool":"cookies","id":"x","token":"t"}`,
		abi.OpPoolExtend:   `{"pool":"cookies","id":"x","token":"t","hold_ms":1000}`,
		abi.OpPoolList:     `{"pool":"cookies"}`,
		abi.OpPoolSize:     `{"pool":"cookies"}`,
		abi.OpPoolMarkBad:  `{"pool":"cookies","id":"x","reason":"r"}`,
		abi.OpPoolMarkGood: `{"pool":"cookies","id":"x"}`,
		abi.OpSubmit:       `{"queue":"jobs","payload":{"n":1}}`,
	}
	admits := map[Roles][]abi.Op{
		RolePut:     {abi.OpPoolPut},
		RoleClaim:   {abi.OpPoolClaim, abi.OpPoolRelease, abi.OpPoolExtend},
		RoleList:    {abi.OpPoolList, abi.OpPoolSize},
		RoleMarkBad: {abi.OpPoolMarkBad, abi.OpPoolMarkGood},
		RoleSubmit:  {abi.OpSubmit},
		RoleConsume: nil, // the host consumes for the plugin; no op of the guest's needs it
	}
	for role, ops := range admits {
		t.Run(role.String(), func(t *testing.T) {
			f := newFixture(t)
			g := f.caller.Plugin.Access
			g.Pools = map[string]Roles{"cookies": role & PoolRoles}
			g.Queues = map[string]Roles{"jobs": role & QueueRoles}
			f.caller.Plugin = NewGrantee("scraper", g, nil, testLimits, nil)
			f.ctx = WithCaller(context.Background(), f.caller)
			for op, req := range calls {
				before := f.spy.calls.Load()
				e := f.call(t, op, req, nil)
				if slices.Contains(ops, op) {
					if e != nil && e.Kind == abi.PermissionDenied {
						t.Errorf("role %s: Call(%s) = %v, want it admitted", role, op, e)
					}
					continue
				}
				if e == nil || e.Kind != abi.PermissionDenied {
					t.Errorf("role %s: Call(%s) = %v, want PermissionDenied", role, op, e)
					continue
				}
				if want := "not granted " + opRole[op].String() + " on "; !strings.Contains(e.Message, want) {
					t.Errorf("role %s: Call(%s) says %q, want it to name %q", role, op, e.Message, want)
				}
				if n := f.spy.calls.Load() - before; n != 0 {
					t.Errorf("role %s: refused Call(%s) reached the backend %d times", role, op, n)
				}
			}
		})
	}
}

func TestParseRoles(t *testing.T) {
	tests := []struct {
		names   []string
		allowed Roles
		want    Roles
		err     string
	}{
		{[]string{"put", "claim"}, PoolRoles, RolePut | RoleClaim, ""},
		{[]string{"list", "mark_bad", "list"}, PoolRoles, RoleList | RoleMarkBad, ""},
		{[]string{"consume"}, QueueRoles, RoleConsume, ""},
		{nil, QueueRoles, 0, ""},
		{[]string{"consume"}, PoolRoles, 0, `pools["p"]: "consume" is not a role here; the roles are put, claim, list, mark_bad`},
		{[]string{"put"}, QueueRoles, 0, `pools["p"]: "put" is not a role here; the roles are consume, submit`},
		{[]string{"Claim"}, PoolRoles, 0, `"Claim" is not a role here`},
	}
	for _, tt := range tests {
		got, err := ParseRoles(`pools["p"]`, tt.names, tt.allowed)
		switch {
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("ParseRoles(%q) = %v, %v, want %v", tt.names, got, err, tt.want)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("ParseRoles(%q) = %v, want error containing %q", tt.names, err, tt.err)
		}
	}
	if got := (RoleSubmit | RolePut | RoleMarkBad).Names(); !slices.Equal(got, []string{"put", "mark_bad", "submit"}) {
		t.Errorf("Names() = %q, want put, mark_bad, submit in that order", got)
	}
}

func TestPoolRoundTrip(t *testing.T) {
	f := newFixture(t)
	var put abi.PoolPutReply
	if e := f.call(t, abi.OpPoolPut, `{"pool":"cookies","payload":{"cookie":"c1"},"tags":{"site":"x","fresh":true}}`, &put); e != nil {
		t.Fatal(e)
	}
	if e := f.call(t, abi.OpPoolPut, `{"pool":"cookies","payload":{"cookie":"c2"},"tags":{"site":"y","fresh":true}}`, nil); e != nil {
		t.Fatal(e)
	}
	var claim abi.PoolClaimReply
	if e := f.call(t, abi.OpPoolClaim, `{"pool":"cookies","where":{"site":"x","fresh":true},"hold_ms":5000}`, &claim); e != nil {
		t.Fatal(e)
	}
	if !claim.Found || claim.Item.ID != put.ID || string(claim.Item.Payload) != `{"cookie":"c1"}` {
		t.Fatalf("claim = %+v, want item %s", claim, put.ID)
	}
	if got, want := string(claim.Item.Tags), `{"fresh":true,"site":"x"}`; got != want {
		t.Errorf("claimed tags = %s, want %s", got, want)
	}
	// A string "true" is a different tag from the boolean true.
	var none abi.PoolClaimReply
	if e := f.call(t, abi.OpPoolClaim, `{"pool":"cookies","where":{"site":"x"},"hold_ms":5000}`, &none); e != nil || none.Found {
		t.Fatalf("second claim = %+v (item %+v), %v; want none (leased)", none, none.Item, e)
	}
	var list abi.PoolListReply
	if e := f.call(t, abi.OpPoolList, `{"pool":"cookies"}`, &list); e != nil || len(list.Items) != 2 {
		t.Fatalf("list = %+v, %v; want 2 items", list, e)
	}
	// An extend renews the lease from now: the claim's 5s hold becomes a minute's.
	var ext abi.PoolExtendReply
	before := time.Now()
	if e := f.call(t, abi.OpPoolExtend, fmt.Sprintf(`{"pool":"cookies","id":%q,"token":%q,"hold_ms":60000}`, put.ID, claim.Token), &ext); e != nil {
		t.Fatal(e)
	}
	if until := time.UnixMilli(ext.UntilMs); until.Before(before.Add(time.Minute).Truncate(time.Millisecond)) || until.After(time.Now().Add(time.Minute)) {
		t.Errorf("extend until = %v, want a minute from the call", until)
	}
	if e := f.call(t, abi.OpPoolExtend, fmt.Sprintf(`{"pool":"cookies","id":%q,"token":"not-the-token","hold_ms":60000}`, put.ID), nil); e == nil || e.Kind != abi.Conflict {
		t.Fatalf("extend with another token = %v, want Conflict", e)
	}
	if e := f.call(t, abi.OpPoolRelease, fmt.Sprintf(`{"pool":"cookies","id":%q,"token":%q}`, put.ID, claim.Token), nil); e != nil {
		t.Fatal(e)
	}
	if e := f.call(t, abi.OpPoolExtend, fmt.Sprintf(`{"pool":"cookies","id":%q,"token":%q,"hold_ms":60000}`, put.ID, claim.Token), nil); e == nil || e.Kind != abi.Conflict {
		t.Fatalf("extend after the release = %v, want Conflict", e)
	}
	if e := f.call(t, abi.OpPoolRelease, fmt.Sprintf(`{"pool":"cookies","id":%q,"token":%q}`, put.ID, claim.Token), nil); e == nil || e.Kind != abi.Conflict {
		t.Fatalf("release twice = %v, want Conflict", e)
	}
	if e := f.call(t, abi.OpPoolMarkBad, fmt.Sprintf(`{"pool":"cookies","id":%q,"reason":"bad"}`, put.ID), nil); e != nil {
		t.Fatal(e)
	}
	var size abi.PoolSizeReply
	if e := f.call(t, abi.OpPoolSize, `{"pool":"cookies"}`, &size); e != nil || size.Size != 1 {
		t.Fatalf("size = %+v, %v; want 1", size, e)
	}
}

// TestPoolHealth: a put's health limits reach the item, a claim shows them with the
// item's score and uses, a weighted mark_bad penalises and mark_good credits, and the
// item retires past its max_error_score.
func TestPoolHealth(t *testing.T) {
	f := newFixture(t)
	var put abi.PoolPutReply
	if e := f.call(t, abi.OpPoolPut, `{"pool":"cookies","payload":{"cookie":"c"},"tags":{"site":"x"},"max_uses":5,"max_error_score":2}`, &put); e != nil {
		t.Fatal(e)
	}
	// 2, then 1, then 2: at max_error_score, the item still serves.
	for _, c := range []struct {
		op  abi.Op
		req string
	}{
		{abi.OpPoolMarkBad, `{"pool":"cookies","id":%q,"reason":"stale","weight":2}`},
		{abi.OpPoolMarkGood, `{"pool":"cookies","id":%q}`},
		{abi.OpPoolMarkBad, `{"pool":"cookies","id":%q,"reason":"stale","weight":1}`},
	} {
		if e := f.call(t, c.op, fmt.Sprintf(c.req, put.ID), nil); e != nil {
			t.Fatalf("%s: %v", c.op, e)
		}
	}
	var claim abi.PoolClaimReply
	if e := f.call(t, abi.OpPoolClaim, `{"pool":"cookies","hold_ms":5000}`, &claim); e != nil || !claim.Found {
		t.Fatalf("claim = %+v, %v", claim, e)
	}
	want := abi.PoolItem{Score: 2, Uses: 1, MaxUses: 5, MaxErrorScore: 2}
	if it := claim.Item; it.Score != want.Score || it.Uses != want.Uses || it.MaxUses != want.MaxUses || it.MaxErrorScore != want.MaxErrorScore {
		t.Errorf("claimed item's health = score %d uses %d max_uses %d max_error_score %d, want %+v", it.Score, it.Uses, it.MaxUses, it.MaxErrorScore, want)
	}
	if e := f.call(t, abi.OpPoolMarkBad, fmt.Sprintf(`{"pool":"cookies","id":%q,"reason":"stale","weight":1}`, put.ID), nil); e != nil {
		t.Fatal(e)
	}
	var size abi.PoolSizeReply
	if e := f.call(t, abi.OpPoolSize, `{"pool":"cookies"}`, &size); e != nil || size.Size != 0 {
		t.Fatalf("size after the score passed max_error_score = %+v, %v; want 0", size, e)
	}
}

func TestKVLockCounterConfig(t *testing.T) {
	f := newFixture(t)
	if e := f.call(t, abi.OpKVSet, `{"namespace":"scraper:s","key":"k","value":{"v":[1,2]}}`, nil); e != nil {
		t.Fatal(e)
	}
	var got abi.KVGetReply
	if e := f.call(t, abi.OpKVGet, `{"namespace":"scraper:s","key":"k"}`, &got); e != nil || !got.Found || string(got.Value) != `{"v":[1,2]}` {
		t.Fatalf("kv_get = %+v, %v", got, e)
	}
	var del abi.KVDeleteReply
	if e := f.call(t, abi.OpKVDelete, `{"namespace":"scraper:s","key":"k"}`, &del); e != nil || !del.Existed {
		t.Fatalf("kv_delete = %+v, %v", del, e)
	}
	var l abi.LockAcquireReply
	if e := f.call(t, abi.OpLockAcquire, `{"name":"scraper:l","hold_ms":5000}`, &l); e != nil || !l.Acquired {
		t.Fatalf("lock_acquire = %+v, %v", l, e)
	}
	var l2 abi.LockAcquireReply
	if e := f.call(t, abi.OpLockAcquire, `{"name":"scraper:l","hold_ms":5000}`, &l2); e != nil || l2.Acquired {
		t.Fatalf("second lock_acquire = %+v, %v; want not acquired", l2, e)
	}
	var rel abi.LockReleaseReply
	if e := f.call(t, abi.OpLockRelease, fmt.Sprintf(`{"name":"scraper:l","token":%q}`, l.Token), &rel); e != nil || !rel.Released {
		t.Fatalf("lock_release = %+v, %v", rel, e)
	}
	var c abi.CounterReply
	for range 3 {
		if e := f.call(t, abi.OpCounterIncr, `{"name":"scraper:n"}`, &c); e != nil {
			t.Fatal(e)
		}
	}
	if e := f.call(t, abi.OpCounterGet, `{"name":"scraper:n"}`, &c); e != nil || c.Value != 3 {
		t.Fatalf("counter_get = %+v, %v; want 3", c, e)
	}
	var cfg abi.ConfigGetReply
	if e := f.call(t, abi.OpConfigGet, `{}`, &cfg); e != nil || string(cfg.Config) != `{"site":"x"}` {
		t.Fatalf("config_get = %s, %v", cfg.Config, e)
	}
	if e := f.call(t, abi.OpMetric, `{"name":"depth","kind":"gauge","value":4}`, nil); e != nil {
		t.Fatal(e)
	}
	if e := f.call(t, abi.OpMetric, `{"name":"depth","kind":"counter","value":1}`, nil); e == nil || e.Kind != abi.ValueError {
		t.Fatalf("metric kind change = %v, want ValueError", e)
	}
	if m := f.core.Metrics().Snapshot(); len(m) != 1 || m[0] != (Metric{Plugin: "scraper", Name: "depth", Kind: "gauge", Value: 4}) {
		t.Errorf("metrics = %+v", m)
	}
}

// Each quota answers LimitExceeded past it, naming its grants-file field, and writes
// nothing; within it the op succeeds.
func TestQuotas(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		quota Quota
		op    abi.Op
		req   string // %d is the call's number
		ok    int    // calls that pass
		field string
	}{
		{Quota{KVMaxKeys: 2}, abi.OpKVSet, `{"namespace":"scraper:s","key":"k%d","value":1}`, 2, "kv_max_keys"},
		// The root already holds the two keys above, 12 bytes each; these cost 23.
		{Quota{KVMaxBytes: 60}, abi.OpKVSet, `{"namespace":"scraper:b","key":"k%d","value":"0123456789"}`, 1, "kv_max_bytes"},
		{Quota{Pool: primitives.PoolCap{Items: 2}}, abi.OpPoolPut, `{"pool":"cookies","payload":{"cookie":"c%d"},"tags":{"site":"x"}}`, 2, "max_pool_items"},
		{Quota{Pool: primitives.PoolCap{Bytes: 70}}, abi.OpPoolPut, `{"pool":"cookies","payload":{"cookie":"d%d"},"tags":{"site":"x"}}`, 1, "max_pool_bytes"},
		{Quota{Queue: primitives.QueueCap{Depth: 2}}, abi.OpSubmit, `{"queue":"jobs","payload":{"n":%d}}`, 2, "max_queue_depth"},
		// The queue already holds the two tasks above, 7 bytes each and TaskOverhead.
		{Quota{Queue: primitives.QueueCap{Bytes: 4*(7+primitives.TaskOverhead) - 1}}, abi.OpSubmit, `{"queue":"jobs","payload":{"n":%d}}`, 1, "max_queue_bytes"},
		{Quota{CounterNames: 2}, abi.OpCounterIncr, `{"name":"scraper:c%d"}`, 2, "counter_max_names"},
		{Quota{LockNames: 2}, abi.OpLockAcquire, `{"name":"scraper:l%d","hold_ms":1000}`, 2, "lock_max_names"},
	}
	for _, tt := range tests {
		f.caller.Plugin.Quota = tt.quota
		for i := range tt.ok + 1 {
			e := f.call(t, tt.op, fmt.Sprintf(tt.req, i), nil)
			switch {
			case i < tt.ok && e != nil:
				t.Errorf("%s #%d = %v, want ok within the quota", tt.op, i+1, e)
			case i == tt.ok && (e == nil || e.Kind != abi.LimitExceeded || !strings.Contains(e.Message, "grant field "+tt.field)):
				t.Errorf("%s past its quota = %v, want LimitExceeded naming %s", tt.op, e, tt.field)
			}
		}
	}
	// The submit rate: 3 a second, then refused whatever the queue holds.
	f.caller.Plugin.Quota = Quota{Submits: NewSubmitRate(3)}
	for i := range 3 {
		if e := f.call(t, abi.OpSubmit, `{"queue":"jobs","payload":{"n":9}}`, nil); e != nil {
			t.Errorf("submit #%d within the rate = %v", i+1, e)
		}
	}
	if e := f.call(t, abi.OpSubmit, `{"queue":"jobs","payload":{"n":9}}`, nil); e == nil || !strings.Contains(e.Message, "submit_rate of 3") {
		t.Errorf("submit past the rate = %v, want LimitExceeded naming submit_rate", e)
	}
	if st, _ := f.spy.Backend.QueueStats(f.ctx, "jobs"); st.Depth != 6 {
		t.Errorf("queue depth = %d, want the 6 submits within the quotas", st.Depth)
	}
}

func TestBackendErrorsTranslated(t *testing.T) {
	tests := []struct {
		err  error
		kind abi.Kind
	}{
		{fmt.Errorf("%w: down", primitives.ErrUnavailable), abi.Unavailable},
		{fmt.Errorf("%w: x", primitives.ErrInvalid), abi.ValueError},
		{fmt.Errorf("%w: x", primitives.ErrNotFound), abi.NotFound},
		{fmt.Errorf("%w: x", primitives.ErrConflict), abi.Conflict},
		{fmt.Errorf("%w: x", primitives.ErrLimit), abi.LimitExceeded},
		{context.DeadlineExceeded, abi.Unavailable},
		{errors.New("boom"), abi.Internal},
	}
	for _, tt := range tests {
		f := newFixture(t)
		f.spy.fail = tt.err
		if e := f.call(t, abi.OpCounterIncr, `{"name":"scraper:n"}`, nil); e == nil || e.Kind != tt.kind {
			t.Errorf("backend error %v: Call = %v, want kind %s", tt.err, e, tt.kind)
		}
	}
}

func TestPanicBecomesInternal(t *testing.T) {
	f := newFixture(t)
	f.spy.panic = true
	if e := f.call(t, abi.OpCounterIncr, `{"name":"scraper:n"}`, nil); e == nil || e.Kind != abi.Internal {
		t.Fatalf("Call with a panicking backend = %v, want Internal", e)
	}
	if !strings.Contains(f.logs.String(), "panicked") {
		t.Errorf("the panic was not logged:\n%s", f.logs)
	}
}

func TestNoCaller(t *testing.T) {
	f := newFixture(t)
	reply := f.core.Call(context.Background(), abi.OpCounterGet, []byte(`{"name":"scraper:n"}`))
	var e *abi.Error
	if err := abi.DecodeReply(reply, nil); !errors.As(err, &e) || e.Kind != abi.Internal {
		t.Fatalf("Call without a caller = %s, want Internal", reply)
	}
}

func TestDeniedLogIsRateLimited(t *testing.T) {
	f := newFixture(t)
	for range 100 {
		f.call(t, abi.OpKVGet, `{"namespace":"nope","key":"k"}`, nil)
	}
	if n := strings.Count(f.logs.String(), "outside the grant"); n == 0 || n > 10 {
		t.Errorf("100 refused calls logged %d lines, want 1..10", n)
	}
}

func TestPatterns(t *testing.T) {
	ps := Patterns{"a:*", "exact", "*x"}
	for name, want := range map[string]bool{"a:": true, "a:b": true, "a": false, "exact": true, "exactly": false, "b": false} {
		if got := ps.Match(name); got != want {
			t.Errorf("Match(%q) = %v, want %v", name, got, want)
		}
	}
	if !(Patterns{"*"}).Match("anything") {
		t.Error(`"*" does not admit every name`)
	}
	if (Patterns{}).Match("a") {
		t.Error("no pattern admits a name")
	}
	if err := CheckPatterns("KV", []string{"a*b"}); err == nil {
		t.Error("CheckPatterns(a*b) = nil")
	}
	if err := CheckPatterns("KV", []string{"a b*"}); err == nil {
		t.Error("CheckPatterns(a b*) = nil")
	}
	if err := CheckPatterns("KV", []string{"*", "a:*", "x"}); err != nil {
		t.Errorf("CheckPatterns(valid) = %v", err)
	}
}

func FuzzCall(f *testing.F) {
	for _, s := range []string{`{}`, `{"pool":"cookies","payload":{"cookie":"c"},"tags":{"site":"x"}}`, `{"pool":"cookies","where":{"site":1},"hold_ms":1}`, `{"namespace":"scraper:a","key":"k","value":1}`, `null`, `[`} {
		for i := range abi.Ops {
			f.Add(uint8(i), []byte(s))
		}
	}
	fx := newFixture(f)
	fx.core.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	f.Fuzz(func(t *testing.T, op uint8, req []byte) {
		fx.caller.Begin() // each input is a guest call of its own, under a fresh budget
		reply := fx.core.Call(fx.ctx, abi.Ops[int(op)%len(abi.Ops)], req)
		var env abi.Envelope
		if err := json.Unmarshal(reply, &env); err != nil || (env.OK == nil) == (env.Error == nil) {
			t.Fatalf("reply %s is not one envelope", reply)
		}
	})
}

type fakeHTTP struct{ e *abi.Error }

func (f fakeHTTP) Do(context.Context, abi.HTTPRequest) (abi.HTTPReply, *abi.Error) {
	if f.e != nil {
		return abi.HTTPReply{}, f.e
	}
	return abi.HTTPReply{Status: 200, Body: []byte("hi")}, nil
}

func TestHTTPOp(t *testing.T) {
	f := newFixture(t)
	f.caller.Plugin.HTTP = fakeHTTP{}
	var reply abi.HTTPReply
	if e := f.call(t, abi.OpHTTP, `{"method":"GET","url":"https://example.com/"}`, &reply); e != nil || reply.Status != 200 || string(reply.Body) != "hi" {
		t.Fatalf("http = %+v, %v", reply, e)
	}
	if e := f.call(t, abi.OpHTTP, `{"method":"GET","url":"https://example.com/","body":"`+strings.Repeat("A", 2000)+`"}`, nil); e == nil || e.Kind != abi.LimitExceeded {
		t.Fatalf("http with an oversized body = %v, want LimitExceeded", e)
	}
	f.caller.Plugin.HTTP = fakeHTTP{e: abi.Errorf(abi.PermissionDenied, "httpfn: host %q is not granted", "evil.example")}
	if e := f.call(t, abi.OpHTTP, `{"method":"GET","url":"https://user:secret@evil.example/?token=s3cret"}`, nil); e == nil || e.Kind != abi.PermissionDenied {
		t.Fatalf("http to an ungranted host = %v, want PermissionDenied", e)
	}
	logs := f.logs.String()
	if !strings.Contains(logs, "evil.example") || strings.Contains(logs, "s3cret") || strings.Contains(logs, "secret@") {
		t.Errorf("the denial log should name the host and nothing else of the URL:\n%s", logs)
	}
	f.logs.Reset()
	f.caller.Plugin.HTTP = fakeHTTP{e: abi.Errorf(abi.PermissionDenied, "httpfn: secret %q is not bound to host %q", "api_token", "evil.example")}
	if e := f.call(t, abi.OpHTTP, `{"method":"GET","url":"https://evil.example/"}`, nil); e == nil || e.Kind != abi.PermissionDenied {
		t.Fatalf("http with a secret to a host it is not bound to = %v, want PermissionDenied", e)
	}
	if logs := f.logs.String(); !strings.Contains(logs, "not bound to host") || strings.Contains(logs, "not granted http host") {
		t.Errorf("the denial log should give the refusal's reason, not call a secret's refusal an ungranted host:\n%s", logs)
	}
}

// A submit with a key enqueues once per key and plugin: the same key answers the first
// task, another payload under it is Conflict, and another plugin's same key is its own.
func TestSubmitKey(t *testing.T) {
	f := newFixture(t)
	submit := func(ctx context.Context, payload string) (string, *abi.Error) {
		var r abi.SubmitReply
		reply := f.core.Call(ctx, abi.OpSubmit, []byte(`{"queue":"jobs","payload":`+payload+`,"key":"k1"}`))
		if err := abi.DecodeReply(reply, &r); err != nil {
			var e *abi.Error
			errors.As(err, &e)
			return "", e
		}
		return r.TaskID, nil
	}
	first, e := submit(f.ctx, `{"n":1}`)
	if e != nil {
		t.Fatal(e)
	}
	if again, e := submit(f.ctx, `{"n":1}`); e != nil || again != first {
		t.Errorf("the same submit under its key = %s, %v, want the first task %s", again, e, first)
	}
	if _, e := submit(f.ctx, `{"n":2}`); e == nil || e.Kind != abi.Conflict {
		t.Errorf("another payload under the key = %v, want Conflict", e)
	}
	other := &Caller{Plugin: NewGrantee("rival", Access{Queues: map[string]Roles{"jobs": RoleSubmit}}, nil, testLimits, nil), Slot: "rival/0"}
	theirs, e := submit(WithCaller(context.Background(), other), `{"n":1}`)
	if e != nil || theirs == first {
		t.Errorf("another plugin's submit under the same key = %s, %v, want a task of its own", theirs, e)
	}
	if st, _ := f.spy.Backend.QueueStats(context.Background(), "jobs"); st.Depth != 2 {
		t.Errorf("jobs depth = %d, want 2", st.Depth)
	}
}
