package fleet

import (
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/fleethost/fleet/abi"
)

// PoolClient puts into, browses and claims from one pool. It is a small value: make one
// wherever it is needed.
type PoolClient[P, T any] struct {
	name   string
	health Health // of what Put adds
}

// Health is the health limits of the items a put adds (PoolClient.WithHealth): an item
// retires (is removed from the pool) once claimed MaxUses times, when that last lease
// ends, and once its score passes MaxErrorScore (see Item.Penalize). Zero fields limit
// nothing.
type Health struct {
	MaxUses       int // the claims an item serves
	MaxErrorScore int // the score an item may reach and still serve
}

// WithHealth returns the client whose Put gives its items the limits h:
//
//	fleet.Pool(contracts.Cookies).WithHealth(fleet.Health{MaxUses: 50, MaxErrorScore: 3}).Put(cookie, tags, ttl)
//
// A negative limit is ErrValueError at the put.
func (p PoolClient[P, T]) WithHealth(h Health) PoolClient[P, T] {
	p.health = h
	return p
}

// Pool returns the client of the pool that c declares.
//
//	id, err := fleet.Pool(contracts.Cookies).Put(cookie, tags, 25*time.Minute)
func Pool[P, T any](c PoolContract[P, T]) PoolClient[P, T] { return PoolClient[P, T]{name: c.name} }

// Item is one pool entry. An item from Claim is leased to the caller until LeasedUntil:
// Release it when done; MarkGood it when it served well, Penalize it when it served
// badly, or MarkBad it when it proved unusable. A rate limit (a 429) says nothing of the
// session: Release it and mark nothing.
type Item[P, T any] struct {
	ID          string
	Payload     P
	Tags        T
	CreatedAt   time.Time
	ExpiresAt   time.Time // zero when the item does not expire
	LeasedUntil time.Time // zero for an item from List

	// The item's health: its error score (0: healthy), its claims (this one included),
	// and the limits its put set (0: none). A claim prefers the lowest Score.
	Score, Uses, MaxUses, MaxErrorScore int

	pool  string
	token string // the lease's proof; empty for an item from List
}

// Put adds an item with payload, tags and a time to live (0: no expiry), and returns its
// id. The host validates payload and tags against the pool's schemas (ErrValueError) and
// prunes the pool's expired items.
func (p PoolClient[P, T]) Put(payload P, tags T, ttl time.Duration) (id string, err error) {
	pb, err := marshalValue(payload)
	if err != nil {
		return "", localError(abi.OpPoolPut, abi.ValueError, fmt.Sprintf("pool %q payload: %v", p.name, err))
	}
	tb, err := marshalValue(tags)
	if err != nil {
		return "", localError(abi.OpPoolPut, abi.ValueError, fmt.Sprintf("pool %q tags: %v", p.name, err))
	}
	var reply abi.PoolPutReply
	r := abi.PoolPutRequest{Pool: p.name, Payload: pb, Tags: tb, TTLMs: millis(ttl), MaxUses: int64(p.health.MaxUses), MaxErrorScore: int64(p.health.MaxErrorScore)}
	err = send(abi.OpPoolPut, r.AppendJSON, &reply)
	return reply.ID, err
}

// Size counts the pool's live items, leased or not.
func (p PoolClient[P, T]) Size() (int, error) {
	var reply abi.PoolSizeReply
	err := send(abi.OpPoolSize, abi.PoolSizeRequest{Pool: p.name}.AppendJSON, &reply)
	return reply.Size, err
}

// List browses the pool's live items, leased or not, without claiming any (up to the
// host's default limit, 100).
func (p PoolClient[P, T]) List() ([]Item[P, T], error) { return p.Where().List() }

// Claim leases one live, unleased item for hold; see PoolQuery.Claim.
func (p PoolClient[P, T]) Claim(hold time.Duration) (*Item[P, T], error) {
	return p.Where().Claim(hold)
}

// Where narrows List and Claim to items whose tags equal every filter:
//
//	item, err := fleet.Pool(cookies).Where(fleet.Eq("site", site), fleet.Eq("fresh", true)).Claim(20 * time.Second)
//
// The host checks the filters against the pool's tags schema: an unknown tag is
// ErrTypeError, a value of the wrong type ErrValueError.
func (p PoolClient[P, T]) Where(filters ...Filter) PoolQuery[P, T] {
	return PoolQuery[P, T]{pool: p.name, filters: filters}
}

// PoolQuery is a filtered view of a pool, made by Where.
type PoolQuery[P, T any] struct {
	pool    string
	filters []Filter
	limit   int
}

// Limit caps the number of items List returns (0: the host's default, 100). A limit over
// the plugin's max_pool_list grant (1000 unless the operator says otherwise) is
// ErrValueError, and a page of items over its max_reply (8 MiB) ErrLimitExceeded.
func (q PoolQuery[P, T]) Limit(n int) PoolQuery[P, T] {
	q.limit = n
	return q
}

// Filter is one tag equality of Where; make it with Eq.
type Filter struct {
	tag   string
	value json.RawMessage
	err   error
}

// Eq matches items whose tag (its JSON name) equals value: a string, bool or integer.
func Eq(tag string, value any) Filter {
	// The value is written as json.Marshal writes it (FuzzWireBytes), without reflection.
	var b []byte
	switch v := value.(type) {
	case string:
		b = abi.AppendString(nil, v)
	case bool:
		b = strconv.AppendBool(nil, v)
	case int:
		b = strconv.AppendInt(nil, int64(v), 10)
	case int8:
		b = strconv.AppendInt(nil, int64(v), 10)
	case int16:
		b = strconv.AppendInt(nil, int64(v), 10)
	case int32:
		b = strconv.AppendInt(nil, int64(v), 10)
	case int64:
		b = strconv.AppendInt(nil, v, 10)
	case uint:
		b = strconv.AppendUint(nil, uint64(v), 10)
	case uint8:
		b = strconv.AppendUint(nil, uint64(v), 10)
	case uint16:
		b = strconv.AppendUint(nil, uint64(v), 10)
	case uint32:
		b = strconv.AppendUint(nil, uint64(v), 10)
	case uint64:
		b = strconv.AppendUint(nil, v, 10)
	default:
		return Filter{tag: tag, err: fmt.Errorf("filter %q: value %v is a %T; tags are strings, bools or integers", tag, value, value)}
	}
	return Filter{tag: tag, value: b}
}

// check refuses a filter that Eq refused and a tag filtered twice, before any call.
func (q PoolQuery[P, T]) check(op abi.Op) error {
	for i, f := range q.filters {
		if f.err != nil {
			return localError(op, abi.ValueError, fmt.Sprintf("pool %q: %v", q.pool, f.err))
		}
		for _, g := range q.filters[:i] {
			if g.tag == f.tag {
				return localError(op, abi.ValueError, fmt.Sprintf("pool %q: tag %q is filtered twice", q.pool, f.tag))
			}
		}
	}
	return nil
}

// List browses the matching live items, leased or not, without claiming any.
func (q PoolQuery[P, T]) List() ([]Item[P, T], error) {
	if err := q.check(abi.OpPoolList); err != nil {
		return nil, err
	}
	var stack [8]abi.WhereTag
	tags := whereTags(stack[:0], q.filters)
	var reply abi.PoolListReply
	if err := send(abi.OpPoolList, func(dst []byte) []byte { return abi.AppendPoolList(dst, q.pool, tags, q.limit) }, &reply); err != nil {
		return nil, err
	}
	items := make([]Item[P, T], 0, len(reply.Items))
	for _, wi := range reply.Items {
		it, err := decodeItem[P, T](abi.OpPoolList, q.pool, wi)
		if err != nil {
			return nil, err
		}
		items = append(items, *it)
	}
	return items, nil
}

// Claim takes an exclusive lease for hold on one live, unleased matching item. It returns
// nil, nil when no such item exists: that is the normal "pool is empty" answer, not an
// error. The lease ends at the item's LeasedUntil unless released first, so a crashed
// slot cannot keep an item.
func (q PoolQuery[P, T]) Claim(hold time.Duration) (*Item[P, T], error) {
	if err := q.check(abi.OpPoolClaim); err != nil {
		return nil, err
	}
	var reply abi.PoolClaimReply
	if claimItem.TryLock() {
		defer claimItem.release()
		claimItem.PoolItem = abi.PoolItem{Payload: claimItem.Payload[:0], Tags: claimItem.Tags[:0]}
		reply.Item = &claimItem.PoolItem
	} else {
		reply.Item = new(abi.PoolItem)
	}
	var stack [8]abi.WhereTag
	tags, holdMs := whereTags(stack[:0], q.filters), millis(hold)
	if err := send(abi.OpPoolClaim, func(dst []byte) []byte { return abi.AppendPoolClaim(dst, q.pool, tags, holdMs) }, &reply); err != nil {
		return nil, err
	}
	if !reply.Found {
		return nil, nil
	}
	if reply.Item.ID == "" { // every item has an id: the reply had no item
		return nil, localError(abi.OpPoolClaim, abi.Internal, fmt.Sprintf("pool %q: the host answered found without an item", q.pool))
	}
	it, err := decodeItem[P, T](abi.OpPoolClaim, q.pool, *reply.Item)
	if err != nil {
		// An item we cannot read is of no use to us; give it back to the others.
		_ = send(abi.OpPoolRelease, abi.PoolReleaseRequest{Pool: q.pool, ID: reply.Item.ID, Token: reply.Token}.AppendJSON, noReply)
		return nil, err
	}
	it.token = reply.Token
	it.LeasedUntil = fromMillis(reply.UntilMs)
	return it, nil
}

// claimItem is the reply item of a claim, reused from one claim to the next: its payload
// and tags are bytes that decodeItem decodes into the plugin's types and drops, and in a
// wasm guest each allocation is tens of calls that pay the sandbox's check
// (guest-sdk/RATIONALE.md, "What does a host call cost the guest?"). A claim that finds
// it in use (another goroutine's claim, or one made from a plugin's UnmarshalJSON)
// decodes into an item of its own.
var claimItem reusedItem

type reusedItem struct {
	sync.Mutex
	abi.PoolItem
}

// maxKeptItem is the most payload and tags bytes claimItem keeps for the next claim.
const maxKeptItem = 64 << 10

func (r *reusedItem) release() {
	if cap(r.Payload)+cap(r.Tags) > maxKeptItem {
		r.PoolItem = abi.PoolItem{}
	}
	r.Unlock()
}

func decodeItem[P, T any](op abi.Op, pool string, wi abi.PoolItem) (*Item[P, T], error) {
	it := &Item[P, T]{
		ID:        wi.ID,
		CreatedAt: fromMillis(wi.CreatedAtMs),
		ExpiresAt: fromMillis(wi.ExpiresAtMs),
		pool:      pool,

		Score:         int(wi.Score),
		Uses:          int(wi.Uses),
		MaxUses:       int(wi.MaxUses),
		MaxErrorScore: int(wi.MaxErrorScore),
	}
	if err := unmarshalValue(wi.Payload, &it.Payload); err != nil {
		return nil, localError(op, abi.ValueError, fmt.Sprintf("pool %q item %s: payload does not decode into %T: %v", pool, wi.ID, it.Payload, err))
	}
	if len(wi.Tags) > 0 {
		if err := unmarshalValue(wi.Tags, &it.Tags); err != nil {
			return nil, localError(op, abi.ValueError, fmt.Sprintf("pool %q item %s: tags do not decode into %T: %v", pool, wi.ID, it.Tags, err))
		}
	}
	return it, nil
}

// Release ends the lease of a claimed item early, so that others may claim it.
// ErrConflict when the lease already expired (maybe claimed by another slot since),
// ErrNotFound when the item is gone. Releasing an item from List is ErrValueError.
func (it *Item[P, T]) Release() error {
	if err := it.claimed(abi.OpPoolRelease, "release"); err != nil {
		return err
	}
	return send(abi.OpPoolRelease, abi.PoolReleaseRequest{Pool: it.pool, ID: it.ID, Token: it.token}.AppendJSON, noReply)
}

// Extend renews the lease of a claimed item: it then ends hold from now (LeasedUntil
// says when), so that work that outlasts the claim's hold keeps the item without
// claiming it for longer than a crash should keep it from the others. ErrConflict when
// the lease already ended (maybe claimed by another slot since): the item is no longer
// the caller's. ErrNotFound when the item is gone. Extending an item from List is
// ErrValueError.
func (it *Item[P, T]) Extend(hold time.Duration) error {
	if err := it.claimed(abi.OpPoolExtend, "extend"); err != nil {
		return err
	}
	var reply abi.PoolExtendReply
	if err := call(abi.OpPoolExtend, abi.PoolExtendRequest{Pool: it.pool, ID: it.ID, Token: it.token, HoldMs: millis(hold)}, &reply); err != nil {
		return err
	}
	it.LeasedUntil = fromMillis(reply.UntilMs)
	return nil
}

// claimed refuses op (which verb names) on an item from List, which holds no lease.
func (it *Item[P, T]) claimed(op abi.Op, verb string) error {
	if it.token == "" {
		return localError(op, abi.ValueError, fmt.Sprintf("pool %q item %s was listed, not claimed: there is no lease to %s", it.pool, it.ID, verb))
	}
	return nil
}

// MarkBad evicts the item from the pool permanently, leased or not, for reason (an
// expired session, a rejected cookie). ErrNotFound when it is already gone.
func (it *Item[P, T]) MarkBad(reason string) error {
	return send(abi.OpPoolMarkBad, abi.PoolMarkBadRequest{Pool: it.pool, ID: it.ID, Reason: reason}.AppendJSON, noReply)
}

// Penalize adds weight (1 or more) to the item's score, leased or not, for reason (a
// page that looked stale, a soft block): the item keeps serving, claimed after healthier
// ones, until its score passes its MaxErrorScore, which retires it (never, without one).
// ErrNotFound when it is gone; a weight below 1 is ErrValueError (MarkBad evicts).
func (it *Item[P, T]) Penalize(reason string, weight int) error {
	if weight < 1 {
		return localError(abi.OpPoolMarkBad, abi.ValueError, fmt.Sprintf("pool %q item %s: penalty weight is %d, want 1 or more (MarkBad evicts)", it.pool, it.ID, weight))
	}
	return send(abi.OpPoolMarkBad, abi.PoolMarkBadRequest{Pool: it.pool, ID: it.ID, Reason: reason, Weight: int64(weight)}.AppendJSON, noReply)
}

// MarkGood lowers the item's score by 1, never below 0, leased or not: it served well.
// ErrNotFound when it is gone.
func (it *Item[P, T]) MarkGood() error {
	return send(abi.OpPoolMarkGood, abi.PoolMarkGoodRequest{Pool: it.pool, ID: it.ID}.AppendJSON, noReply)
}
