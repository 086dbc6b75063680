// Package abitest is the conformance suite of the host calls' answers: what a guest is
// answered, on the wire, for pools and their leases, KV, locks, counters and submits, and
// how leases and TTLs end. Every server of the abi passes it: the host's dispatch over
// each backend, and guest-sdk/fleettest, the fake host that plugin authors test with, so
// that a plugin's unit test sees the semantics its plugin meets in a host.
//
//	func TestABIConformance(t *testing.T) {
//		abitest.Run(t, func(t *testing.T) abitest.Serve {
//			return newServer(t) // a fresh server: op and request bytes in, reply envelope out
//		})
//	}
//
// A server under test must grant the names below (Pool with a tags schema of one string
// tag, "site"; Queue with any payload; the KV namespace, lock and counter names) and
// check no schema beyond that. The suite checks what a plugin relies on, never ids or
// tokens beyond their being stable and distinct, nor the text of an error (only its
// kind). It runs in real time, with leases and TTLs of a few hundred milliseconds: a
// check that one has not ended yet is skipped when the machine was too slow to make it
// in time, a check that one has ended never is. Subtests run one after another, each
// against a fresh server.
//
// Why a suite in abi rather than fleettest built on the memory backend:
// guest-sdk/RATIONALE.md, "Why is fleettest held to the host by a suite in abi?".
package abitest

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/fleethost/fleet/abi"
)

// Serve answers one host call as a server of the abi does: the request's bytes in, the
// reply envelope's bytes out.
type Serve func(op abi.Op, request []byte) (envelope []byte)

// The names the suite's calls use, which the server under test grants.
const (
	Pool      = "abitest-items" // tags: {"site": string}
	Namespace = "abitest:state"
	Lock      = "abitest:lock"
	Counter   = "abitest:n" // and "abitest:n:big"
	Queue     = "abitest-jobs"
)

// Run runs the suite; newServer is called once per subtest and returns a fresh server
// that holds nothing.
func Run(t *testing.T, newServer func(t *testing.T) Serve) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &server{t: t, serve: newServer(t)}
			c.fn(s)
		})
	}
}

type testCase struct {
	name string
	fn   func(s *server)
}

// hold is the lease and TTL the cases let run out; wait is how long they sleep for it.
const (
	hold = 200 * time.Millisecond
	wait = 400 * time.Millisecond
	// tol is how far a time the server answers may be from the suite's clock.
	tol = 250 * time.Millisecond
)

var cases = []testCase{
	{"PoolClaimEmpty", poolClaimEmpty},
	{"PoolPutListSize", poolPutListSize},
	{"PoolClaimIsExclusive", poolClaimIsExclusive},
	{"PoolClaimWhere", poolClaimWhere},
	{"PoolLeaseExpires", poolLeaseExpires},
	{"PoolExtend", poolExtend},
	{"PoolItemGone", poolItemGone},
	{"PoolItemTTL", poolItemTTL},
	{"PoolMarkBad", poolMarkBad},
	{"PoolScoreAndHealthiest", poolScoreAndHealthiest},
	{"PoolMaxUses", poolMaxUses},
	{"PoolMaxUsesLeaseRunsOut", poolMaxUsesLeaseRunsOut},
	{"PoolItemTTLWhileLeased", poolItemTTLWhileLeased},
	{"KV", kv},
	{"KVTTL", kvTTL},
	{"Lock", lock},
	{"LockExpires", lockExpires},
	{"LockWaits", lockWaits},
	{"Counter", counter},
	{"SubmitKey", submitKey},
	{"SubmitUnique", submitUnique},
}

// server is the server under test and the test it fails.
type server struct {
	t     *testing.T
	serve Serve
}

// call sends req (encoded as JSON) to op and decodes the result into a value of R, or
// returns the error envelope's error. It fails the test on a reply that is neither.
func call[R any](s *server, op abi.Op, req any) (R, *abi.Error) {
	s.t.Helper()
	var r R
	b, err := json.Marshal(req)
	if err != nil {
		s.t.Fatalf("encode %s request: %v", op, err)
	}
	reply := s.serve(op, b)
	err = abi.DecodeReply(reply, &r)
	if err == nil {
		return r, nil
	}
	var e *abi.Error
	if !errors.As(err, &e) {
		s.t.Fatalf("%s %s: reply %s is no envelope: %v", op, b, reply, err)
	}
	return r, e
}

// ok is call that fails the test on an error envelope.
func ok[R any](s *server, op abi.Op, req any) R {
	s.t.Helper()
	r, e := call[R](s, op, req)
	if e != nil {
		s.t.Fatalf("%s %+v = %v, want a result", op, req, e)
	}
	return r
}

// fails is call that wants an error of kind.
func fails(s *server, op abi.Op, req any, kind abi.Kind) {
	s.t.Helper()
	if _, e := call[json.RawMessage](s, op, req); e == nil || e.Kind != kind {
		s.t.Errorf("%s %+v = %v, want %s", op, req, e, kind)
	}
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

func sleep(s *server, d time.Duration) {
	select {
	case <-time.After(d):
	case <-s.t.Context().Done():
		s.t.Fatal("test ended while sleeping")
	}
}

// within fails the test unless the Unix milliseconds got are within tol of want.
func within(s *server, what string, got int64, want time.Time) {
	s.t.Helper()
	if d := time.UnixMilli(got).Sub(want); d < -tol || d > tol {
		s.t.Errorf("%s = %v, want %v (±%v)", what, time.UnixMilli(got), want, tol)
	}
}

// sameJSON fails the test unless got and want are the same JSON value.
func sameJSON(s *server, what string, got json.RawMessage, want string) {
	s.t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		s.t.Errorf("%s = %s, not JSON: %v", what, got, err)
		return
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		s.t.Fatalf("want %s: %v", want, err)
	}
	if !reflect.DeepEqual(g, w) {
		s.t.Errorf("%s = %s, want %s", what, got, want)
	}
}

func (s *server) put(payload, site string, ttl time.Duration, h abi.PoolPutRequest) string {
	s.t.Helper()
	h.Pool, h.Payload, h.TTLMs = Pool, json.RawMessage(payload), ms(ttl)
	if site != "" {
		h.Tags = json.RawMessage(`{"site":"` + site + `"}`)
	}
	r := ok[abi.PoolPutReply](s, abi.OpPoolPut, h)
	if r.ID == "" {
		s.t.Fatalf("pool_put %s answered no id", payload)
	}
	return r.ID
}

// claimReply is a pool_claim's reply as the suite's messages show it.
type claimReply struct{ abi.PoolClaimReply }

func (r claimReply) String() string {
	if !r.Found || r.Item == nil {
		return fmt.Sprintf("found %v", r.Found)
	}
	return fmt.Sprintf("found item %s (uses %d, score %d), token %q, until %v", r.Item.ID, r.Item.Uses, r.Item.Score, r.Token, time.UnixMilli(r.UntilMs))
}

func (s *server) claim(where abi.Where, hold time.Duration) claimReply {
	s.t.Helper()
	return claimReply{ok[abi.PoolClaimReply](s, abi.OpPoolClaim, abi.PoolClaimRequest{Pool: Pool, Where: where, HoldMs: ms(hold)})}
}

func (s *server) size() int {
	s.t.Helper()
	return ok[abi.PoolSizeReply](s, abi.OpPoolSize, abi.PoolSizeRequest{Pool: Pool}).Size
}

func (s *server) release(id, token string) *abi.Error {
	s.t.Helper()
	_, e := call[abi.Empty](s, abi.OpPoolRelease, abi.PoolReleaseRequest{Pool: Pool, ID: id, Token: token})
	return e
}

func site(v string) abi.Where { return abi.Where{"site": json.RawMessage(`"` + v + `"`)} }

func poolClaimEmpty(s *server) {
	if r := s.claim(nil, time.Minute); r.Found {
		s.t.Errorf("pool_claim of an empty pool = %+v, want found false", r)
	}
	if n := s.size(); n != 0 {
		s.t.Errorf("pool_size of an empty pool = %d, want 0", n)
	}
	l := ok[abi.PoolListReply](s, abi.OpPoolList, abi.PoolListRequest{Pool: Pool})
	if len(l.Items) != 0 {
		s.t.Errorf("pool_list of an empty pool = %+v, want none", l.Items)
	}
}

func poolPutListSize(s *server) {
	start := time.Now()
	a := s.put(`{"n":1}`, "a", 0, abi.PoolPutRequest{})
	b := s.put(`{"n":2}`, "b", time.Hour, abi.PoolPutRequest{})
	if a == b {
		s.t.Fatalf("two puts answered one id %q", a)
	}
	if n := s.size(); n != 2 {
		s.t.Errorf("pool_size after two puts = %d, want 2", n)
	}
	l := ok[abi.PoolListReply](s, abi.OpPoolList, abi.PoolListRequest{Pool: Pool, Where: site("b")})
	if len(l.Items) != 1 || l.Items[0].ID != b {
		s.t.Fatalf("pool_list where site b = %+v, want the item %s", l.Items, b)
	}
	it := l.Items[0]
	sameJSON(s, "the listed item's payload", it.Payload, `{"n":2}`)
	sameJSON(s, "the listed item's tags", it.Tags, `{"site":"b"}`)
	within(s, "the listed item's created_at_ms", it.CreatedAtMs, start)
	within(s, "the listed item's expires_at_ms", it.ExpiresAtMs, start.Add(time.Hour))
	all := ok[abi.PoolListReply](s, abi.OpPoolList, abi.PoolListRequest{Pool: Pool})
	if len(all.Items) != 2 {
		s.t.Errorf("pool_list = %d items, want 2", len(all.Items))
	}
	one := ok[abi.PoolListReply](s, abi.OpPoolList, abi.PoolListRequest{Pool: Pool, Limit: 1})
	if len(one.Items) != 1 {
		s.t.Errorf("pool_list limit 1 = %d items, want 1", len(one.Items))
	}
	if la := ok[abi.PoolListReply](s, abi.OpPoolList, abi.PoolListRequest{Pool: Pool, Where: site("a")}); len(la.Items) != 1 || la.Items[0].ID != a || la.Items[0].ExpiresAtMs != 0 {
		s.t.Errorf("pool_list where site a = %+v, want item %s, which never expires", la.Items, a)
	}
}

func poolClaimIsExclusive(s *server) {
	id := s.put(`{"n":1}`, "a", 0, abi.PoolPutRequest{})
	start := time.Now()
	c := s.claim(nil, time.Minute)
	if !c.Found || c.Item == nil || c.Item.ID != id || c.Token == "" {
		s.t.Fatalf("pool_claim = %+v, want item %s with a token", c, id)
	}
	within(s, "the claim's until_ms", c.UntilMs, start.Add(time.Minute))
	if c.Item.Uses != 1 {
		s.t.Errorf("the first claim's uses = %d, want 1", c.Item.Uses)
	}
	if again := s.claim(nil, time.Minute); again.Found {
		s.t.Errorf("pool_claim of a leased item = %+v, want found false", again)
	}
	if n := s.size(); n != 1 {
		s.t.Errorf("pool_size with the item leased = %d, want 1 (leased items count)", n)
	}
	if e := s.release(id, c.Token+"x"); e == nil || e.Kind != abi.Conflict {
		s.t.Errorf("pool_release with another token = %v, want Conflict", e)
	}
	if e := s.release(id, c.Token); e != nil {
		s.t.Fatalf("pool_release = %v", e)
	}
	if e := s.release(id, c.Token); e == nil || e.Kind != abi.Conflict {
		s.t.Errorf("a second pool_release = %v, want Conflict", e)
	}
	c2 := s.claim(nil, time.Minute)
	if !c2.Found || c2.Item.ID != id || c2.Token == c.Token {
		s.t.Fatalf("pool_claim after the release = %+v, want item %s with a new token", c2, id)
	}
	if c2.Item.Uses != 2 {
		s.t.Errorf("the second claim's uses = %d, want 2", c2.Item.Uses)
	}
}

func poolClaimWhere(s *server) {
	s.put(`{"n":1}`, "a", 0, abi.PoolPutRequest{})
	b := s.put(`{"n":2}`, "b", 0, abi.PoolPutRequest{})
	if c := s.claim(site("c"), time.Minute); c.Found {
		s.t.Errorf("pool_claim where site c = %+v, want found false", c)
	}
	c := s.claim(site("b"), time.Minute)
	if !c.Found || c.Item.ID != b {
		s.t.Fatalf("pool_claim where site b = %+v, want item %s", c, b)
	}
	sameJSON(s, "the claimed item's payload", c.Item.Payload, `{"n":2}`)
	sameJSON(s, "the claimed item's tags", c.Item.Tags, `{"site":"b"}`)
	if again := s.claim(site("b"), time.Minute); again.Found {
		s.t.Errorf("pool_claim where site b, leased = %+v, want found false", again)
	}
}

func poolLeaseExpires(s *server) {
	id := s.put(`{"n":1}`, "a", 0, abi.PoolPutRequest{})
	c := s.claim(nil, hold)
	if !c.Found {
		s.t.Fatal("pool_claim found nothing")
	}
	sleep(s, wait)
	if e := s.release(id, c.Token); e == nil || e.Kind != abi.Conflict {
		s.t.Errorf("pool_release after the lease ended = %v, want Conflict", e)
	}
	if _, e := call[abi.PoolExtendReply](s, abi.OpPoolExtend, abi.PoolExtendRequest{Pool: Pool, ID: id, Token: c.Token, HoldMs: ms(time.Minute)}); e == nil || e.Kind != abi.Conflict {
		s.t.Errorf("pool_extend after the lease ended = %v, want Conflict", e)
	}
	c2 := s.claim(nil, time.Minute)
	if !c2.Found || c2.Item.ID != id {
		s.t.Errorf("pool_claim after the lease ended = %+v, want item %s again", c2, id)
	}
}

func poolExtend(s *server) {
	id := s.put(`{"n":1}`, "a", 0, abi.PoolPutRequest{})
	c := s.claim(nil, hold)
	start := time.Now()
	r, e := call[abi.PoolExtendReply](s, abi.OpPoolExtend, abi.PoolExtendRequest{Pool: Pool, ID: id, Token: c.Token, HoldMs: ms(time.Minute)})
	if e != nil {
		s.t.Fatalf("pool_extend = %v", e)
	}
	within(s, "pool_extend's until_ms", r.UntilMs, start.Add(time.Minute))
	sleep(s, wait)
	if again := s.claim(nil, time.Minute); again.Found {
		s.t.Errorf("pool_claim past the first hold of an extended lease = %+v, want found false", again)
	}
	if e := s.release(id, c.Token); e != nil {
		s.t.Errorf("pool_release of the extended lease = %v", e)
	}
}

func poolItemGone(s *server) {
	if e := s.release("no-such-item", "t"); e == nil || e.Kind != abi.NotFound {
		s.t.Errorf("pool_release of no item = %v, want NotFound", e)
	}
	fails(s, abi.OpPoolExtend, abi.PoolExtendRequest{Pool: Pool, ID: "no-such-item", Token: "t", HoldMs: 1000}, abi.NotFound)
	fails(s, abi.OpPoolMarkBad, abi.PoolMarkBadRequest{Pool: Pool, ID: "no-such-item", Reason: "r"}, abi.NotFound)
	fails(s, abi.OpPoolMarkGood, abi.PoolMarkGoodRequest{Pool: Pool, ID: "no-such-item"}, abi.NotFound)
	fails(s, abi.OpPoolMarkBad, abi.PoolMarkBadRequest{Pool: Pool, ID: "x", Reason: "r", Weight: -1}, abi.ValueError)
	fails(s, abi.OpPoolPut, abi.PoolPutRequest{Pool: Pool, Payload: json.RawMessage(`{}`), MaxUses: -1}, abi.ValueError)
}

func poolItemTTL(s *server) {
	start := time.Now()
	s.put(`{"n":1}`, "a", hold, abi.PoolPutRequest{})
	if n := s.size(); n != 1 && time.Since(start) < hold {
		s.t.Errorf("pool_size before the TTL = %d, want 1", n)
	}
	sleep(s, wait)
	if n := s.size(); n != 0 {
		s.t.Errorf("pool_size past the TTL = %d, want 0", n)
	}
	if c := s.claim(nil, time.Minute); c.Found {
		s.t.Errorf("pool_claim past the TTL = %+v, want found false", c)
	}
	if l := ok[abi.PoolListReply](s, abi.OpPoolList, abi.PoolListRequest{Pool: Pool}); len(l.Items) != 0 {
		s.t.Errorf("pool_list past the TTL = %+v, want none", l.Items)
	}
}

func poolMarkBad(s *server) {
	id := s.put(`{"n":1}`, "a", 0, abi.PoolPutRequest{})
	c := s.claim(nil, time.Minute)
	ok[abi.Empty](s, abi.OpPoolMarkBad, abi.PoolMarkBadRequest{Pool: Pool, ID: id, Reason: "dead"})
	if n := s.size(); n != 0 {
		s.t.Errorf("pool_size after a weightless mark_bad of a leased item = %d, want 0", n)
	}
	if e := s.release(id, c.Token); e == nil || e.Kind != abi.NotFound {
		s.t.Errorf("pool_release of an evicted item = %v, want NotFound", e)
	}
	// A weighted mark is a penalty: the item retires only past its max_error_score.
	p := s.put(`{"n":2}`, "a", 0, abi.PoolPutRequest{MaxErrorScore: 2})
	ok[abi.Empty](s, abi.OpPoolMarkBad, abi.PoolMarkBadRequest{Pool: Pool, ID: p, Reason: "slow", Weight: 2})
	if l := ok[abi.PoolListReply](s, abi.OpPoolList, abi.PoolListRequest{Pool: Pool}); len(l.Items) != 1 || l.Items[0].Score != 2 {
		s.t.Fatalf("pool_list after a penalty of 2 (max 2) = %+v, want the item with score 2", l.Items)
	}
	ok[abi.Empty](s, abi.OpPoolMarkBad, abi.PoolMarkBadRequest{Pool: Pool, ID: p, Reason: "slow", Weight: 1})
	if n := s.size(); n != 0 {
		s.t.Errorf("pool_size after the score passed max_error_score = %d, want 0", n)
	}
	// Without a max_error_score a penalty never retires the item.
	q := s.put(`{"n":3}`, "a", 0, abi.PoolPutRequest{})
	ok[abi.Empty](s, abi.OpPoolMarkBad, abi.PoolMarkBadRequest{Pool: Pool, ID: q, Reason: "slow", Weight: 100})
	if n := s.size(); n != 1 {
		s.t.Errorf("pool_size after a penalty of an item without max_error_score = %d, want 1", n)
	}
}

func poolScoreAndHealthiest(s *server) {
	a := s.put(`{"n":1}`, "a", 0, abi.PoolPutRequest{})
	b := s.put(`{"n":2}`, "a", 0, abi.PoolPutRequest{})
	ok[abi.Empty](s, abi.OpPoolMarkBad, abi.PoolMarkBadRequest{Pool: Pool, ID: a, Reason: "slow", Weight: 3})
	c := s.claim(nil, time.Minute)
	if !c.Found || c.Item.ID != b {
		s.t.Fatalf("pool_claim with %s penalised = %+v, want the healthier %s", a, c, b)
	}
	// mark_good takes 1 off by default, a weight otherwise, never below 0.
	ok[abi.Empty](s, abi.OpPoolMarkGood, abi.PoolMarkGoodRequest{Pool: Pool, ID: a})
	ok[abi.Empty](s, abi.OpPoolMarkGood, abi.PoolMarkGoodRequest{Pool: Pool, ID: b, Weight: 5})
	scores := map[string]int64{}
	for _, it := range ok[abi.PoolListReply](s, abi.OpPoolList, abi.PoolListRequest{Pool: Pool}).Items {
		scores[it.ID] = it.Score
	}
	if want := map[string]int64{a: 2, b: 0}; !reflect.DeepEqual(scores, want) {
		s.t.Errorf("scores after mark_good = %v, want %v", scores, want)
	}
}

func poolMaxUses(s *server) {
	id := s.put(`{"n":1}`, "a", 0, abi.PoolPutRequest{MaxUses: 1})
	c := s.claim(nil, time.Minute)
	if !c.Found || c.Item.ID != id || c.Item.MaxUses != 1 {
		s.t.Fatalf("pool_claim = %+v, want item %s with max_uses 1", c, id)
	}
	if n := s.size(); n != 1 {
		s.t.Errorf("pool_size while the last use is leased = %d, want 1", n)
	}
	if e := s.release(id, c.Token); e != nil {
		s.t.Fatalf("pool_release = %v", e)
	}
	if n := s.size(); n != 0 {
		s.t.Errorf("pool_size once the last use was released = %d, want 0", n)
	}
	if c := s.claim(nil, time.Minute); c.Found {
		s.t.Errorf("pool_claim of a retired item = %+v, want found false", c)
	}
}

func poolMaxUsesLeaseRunsOut(s *server) {
	s.put(`{"n":1}`, "a", 0, abi.PoolPutRequest{MaxUses: 1})
	if c := s.claim(nil, hold); !c.Found {
		s.t.Fatal("pool_claim found nothing")
	}
	sleep(s, wait)
	if c := s.claim(nil, time.Minute); c.Found {
		s.t.Errorf("pool_claim once the last use's lease ran out = %+v, want found false (retired)", c)
	}
	if n := s.size(); n != 0 {
		s.t.Errorf("pool_size once the last use's lease ran out = %d, want 0", n)
	}
}

func poolItemTTLWhileLeased(s *server) {
	id := s.put(`{"n":1}`, "a", hold, abi.PoolPutRequest{})
	c := s.claim(nil, time.Minute)
	if !c.Found {
		s.t.Fatal("pool_claim found nothing")
	}
	sleep(s, wait)
	if n := s.size(); n != 0 {
		s.t.Errorf("pool_size past the TTL of a leased item = %d, want 0", n)
	}
	if e := s.release(id, c.Token); e == nil || e.Kind != abi.NotFound {
		s.t.Errorf("pool_release of a leased item past its TTL = %v, want NotFound", e)
	}
}

func kv(s *server) {
	get := func() abi.KVGetReply {
		return ok[abi.KVGetReply](s, abi.OpKVGet, abi.KVGetRequest{Namespace: Namespace, Key: "k"})
	}
	if r := get(); r.Found {
		s.t.Errorf("kv_get of no key = %+v, want found false", r)
	}
	ok[abi.Empty](s, abi.OpKVSet, abi.KVSetRequest{Namespace: Namespace, Key: "k", Value: json.RawMessage(`{"a":1}`)})
	if r := get(); !r.Found {
		s.t.Errorf("kv_get after kv_set = %+v, want found", r)
	} else {
		sameJSON(s, "kv_get's value", r.Value, `{"a":1}`)
	}
	ok[abi.Empty](s, abi.OpKVSet, abi.KVSetRequest{Namespace: Namespace, Key: "k", Value: json.RawMessage(`"b"`)})
	if r := get(); r.Found {
		sameJSON(s, "kv_get's value after an overwrite", r.Value, `"b"`)
	}
	if r := ok[abi.KVGetReply](s, abi.OpKVGet, abi.KVGetRequest{Namespace: Namespace + "x", Key: "k"}); r.Found {
		s.t.Errorf("kv_get of the key in another namespace = %+v, want found false", r)
	}
	del := func() bool {
		return ok[abi.KVDeleteReply](s, abi.OpKVDelete, abi.KVDeleteRequest{Namespace: Namespace, Key: "k"}).Existed
	}
	if !del() {
		s.t.Error("kv_delete of a set key = existed false, want true")
	}
	if del() {
		s.t.Error("a second kv_delete = existed true, want false")
	}
	if r := get(); r.Found {
		s.t.Errorf("kv_get after kv_delete = %+v, want found false", r)
	}
}

func kvTTL(s *server) {
	start := time.Now()
	ok[abi.Empty](s, abi.OpKVSet, abi.KVSetRequest{Namespace: Namespace, Key: "k", Value: json.RawMessage(`1`), TTLMs: ms(hold)})
	if r := ok[abi.KVGetReply](s, abi.OpKVGet, abi.KVGetRequest{Namespace: Namespace, Key: "k"}); !r.Found && time.Since(start) < hold {
		s.t.Error("kv_get before the TTL = found false, want true")
	}
	sleep(s, wait)
	if r := ok[abi.KVGetReply](s, abi.OpKVGet, abi.KVGetRequest{Namespace: Namespace, Key: "k"}); r.Found {
		s.t.Errorf("kv_get past the TTL = %+v, want found false", r)
	}
	if ok[abi.KVDeleteReply](s, abi.OpKVDelete, abi.KVDeleteRequest{Namespace: Namespace, Key: "k"}).Existed {
		s.t.Error("kv_delete of an expired key = existed true, want false")
	}
}

func (s *server) acquire(hold time.Duration) abi.LockAcquireReply {
	s.t.Helper()
	return ok[abi.LockAcquireReply](s, abi.OpLockAcquire, abi.LockAcquireRequest{Name: Lock, HoldMs: ms(hold)})
}

func (s *server) unlock(token string) bool {
	s.t.Helper()
	return ok[abi.LockReleaseReply](s, abi.OpLockRelease, abi.LockReleaseRequest{Name: Lock, Token: token}).Released
}

func lock(s *server) {
	start := time.Now()
	l := s.acquire(time.Minute)
	if !l.Acquired || l.Token == "" || l.Fence <= 0 {
		s.t.Fatalf("lock_acquire of a free lock = %+v, want acquired with a token and a fence", l)
	}
	within(s, "lock_acquire's until_ms", l.UntilMs, start.Add(time.Minute))
	if again := s.acquire(time.Minute); again.Acquired {
		s.t.Errorf("lock_acquire of a held lock = %+v, want acquired false", again)
	}
	if s.unlock(l.Token + "x") {
		s.t.Error("lock_release with another token = released true, want false")
	}
	if !s.unlock(l.Token) {
		s.t.Fatal("lock_release = released false, want true")
	}
	if s.unlock(l.Token) {
		s.t.Error("a second lock_release = released true, want false")
	}
	l2 := s.acquire(time.Minute)
	if !l2.Acquired || l2.Fence <= l.Fence || l2.Token == l.Token {
		s.t.Errorf("lock_acquire after the release = %+v, want a new token and a fence above %d", l2, l.Fence)
	}
}

func lockExpires(s *server) {
	l := s.acquire(hold)
	if !l.Acquired {
		s.t.Fatal("lock_acquire of a free lock = not acquired")
	}
	sleep(s, wait)
	l2 := s.acquire(time.Minute)
	if !l2.Acquired || l2.Fence <= l.Fence {
		s.t.Errorf("lock_acquire past the hold = %+v, want acquired with a fence above %d", l2, l.Fence)
	}
	if s.unlock(l.Token) {
		s.t.Error("lock_release by the lease that ran out = released true, want false")
	}
}

func lockWaits(s *server) {
	start := time.Now()
	l := s.acquire(hold)
	if !l.Acquired {
		s.t.Fatal("lock_acquire of a free lock = not acquired")
	}
	// A wait shorter than what is left of the hold comes back empty; one that outlasts
	// it takes the lock.
	short := ok[abi.LockAcquireReply](s, abi.OpLockAcquire, abi.LockAcquireRequest{Name: Lock, HoldMs: ms(time.Minute), WaitMs: 20})
	if short.Acquired && time.Since(start) < hold {
		s.t.Errorf("lock_acquire waiting 20ms for a lock held %v = acquired, want acquired false", hold)
	}
	long := ok[abi.LockAcquireReply](s, abi.OpLockAcquire, abi.LockAcquireRequest{Name: Lock, HoldMs: ms(time.Minute), WaitMs: ms(5 * wait)})
	if !short.Acquired && (!long.Acquired || long.Fence <= l.Fence) {
		s.t.Errorf("lock_acquire waiting %v for a lock held %v = %+v, want acquired with a fence above %d", 5*wait, hold, long, l.Fence)
	}
}

func counter(s *server) {
	incr := func(delta int64) int64 {
		return ok[abi.CounterReply](s, abi.OpCounterIncr, abi.CounterIncrRequest{Name: Counter, Delta: delta}).Value
	}
	if v := ok[abi.CounterReply](s, abi.OpCounterGet, abi.CounterGetRequest{Name: Counter}).Value; v != 0 {
		s.t.Errorf("counter_get of a counter never touched = %d, want 0", v)
	}
	for _, step := range []struct{ delta, want int64 }{{0, 1}, {5, 6}, {-8, -2}} {
		if v := incr(step.delta); v != step.want {
			s.t.Errorf("counter_incr delta %d = %d, want %d", step.delta, v, step.want)
		}
	}
	if v := ok[abi.CounterReply](s, abi.OpCounterGet, abi.CounterGetRequest{Name: Counter}).Value; v != -2 {
		s.t.Errorf("counter_get = %d, want -2", v)
	}
	// An update past int64 is LimitExceeded and changes nothing.
	big := Counter + ":big"
	if v := ok[abi.CounterReply](s, abi.OpCounterIncr, abi.CounterIncrRequest{Name: big, Delta: math.MaxInt64}).Value; v != math.MaxInt64 {
		s.t.Fatalf("counter_incr delta MaxInt64 = %d, want %d", v, int64(math.MaxInt64))
	}
	fails(s, abi.OpCounterIncr, abi.CounterIncrRequest{Name: big, Delta: 1}, abi.LimitExceeded)
	if v := ok[abi.CounterReply](s, abi.OpCounterGet, abi.CounterGetRequest{Name: big}).Value; v != math.MaxInt64 {
		s.t.Errorf("counter_get after a refused overflow = %d, want %d", v, int64(math.MaxInt64))
	}
}

func (s *server) submit(r abi.SubmitRequest) (string, *abi.Error) {
	s.t.Helper()
	r.Queue = Queue
	reply, e := call[abi.SubmitReply](s, abi.OpSubmit, r)
	if e == nil && reply.TaskID == "" {
		s.t.Fatalf("submit %+v answered no task id", r)
	}
	return reply.TaskID, e
}

func submitKey(s *server) {
	a, e := s.submit(abi.SubmitRequest{Payload: json.RawMessage(`{"n":1}`)})
	b, e2 := s.submit(abi.SubmitRequest{Payload: json.RawMessage(`{"n":1}`)})
	if e != nil || e2 != nil || a == b {
		s.t.Errorf("two submits without a key = %q %v, %q %v, want two tasks", a, e, b, e2)
	}
	k, e := s.submit(abi.SubmitRequest{Payload: json.RawMessage(`{"n":2}`), Key: "once"})
	k2, e2 := s.submit(abi.SubmitRequest{Payload: json.RawMessage(`{"n":2}`), Key: "once"})
	if e != nil || e2 != nil || k != k2 {
		s.t.Errorf("a submit sent again under its key = %q %v, %q %v, want the first task", k, e, k2, e2)
	}
	if _, e := s.submit(abi.SubmitRequest{Payload: json.RawMessage(`{"n":3}`), Key: "once"}); e == nil || e.Kind != abi.Conflict {
		s.t.Errorf("another payload under a used key = %v, want Conflict", e)
	}
}

func submitUnique(s *server) {
	u, e := s.submit(abi.SubmitRequest{Payload: json.RawMessage(`{"n":1}`), Unique: "site-a"})
	u2, e2 := s.submit(abi.SubmitRequest{Payload: json.RawMessage(`{"n":2}`), Unique: "site-a"})
	if e != nil || e2 != nil || u != u2 {
		s.t.Errorf("a second submit of a unique key while its task waits = %q %v, %q %v, want the first task", u, e, u2, e2)
	}
	o, e := s.submit(abi.SubmitRequest{Payload: json.RawMessage(`{"n":1}`), Unique: "site-b"})
	if e != nil || o == u {
		s.t.Errorf("a submit of another unique key = %q %v, want a new task", o, e)
	}
}
