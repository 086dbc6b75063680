package hostfn

import (
	"bytes"
	"context"
	"encoding/json"
	"sort"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/validate"
	"github.com/fleethost/fleet/primitives"
)

// pool resolves a pool name for caller: the plugin must be granted the role op needs on
// it (see opRole), and the pool registered as a contract.
func (c *Core) pool(ctx context.Context, caller *Caller, op abi.Op, name string) (*validate.Pool, *abi.Error) {
	if e := checkName("pool", name); e != nil {
		return nil, e
	}
	if caller.Plugin.Access.Pools[name]&opRole[op] == 0 {
		return nil, c.denyRole(ctx, caller, op, "pool", name)
	}
	p := c.contracts.Pool(name)
	if p == nil {
		return nil, abi.Errorf(abi.Internal, "pool %q is granted but has no registered contract", name)
	}
	return p, nil
}

// poolPut: pool_put.
//
//	request:  {"pool": "cookies", "payload": {...}, "tags": {"site": "x"}, "ttl_ms": 60000, "max_uses": 50, "max_error_score": 3}
//	reply:    {"id": "..."}
//
// The payload and the tags are validated against a live version of the pool's contract
// (validate.Pool.Put); each is capped at the plugin's MaxPayload. A put past the plugin's Quota.Pool
// is LimitExceeded. A negative max_uses or max_error_score is a ValueError.
func (c *Core) poolPut(ctx context.Context, caller *Caller, req []byte) (any, *abi.Error) {
	var r abi.PoolPutRequest
	if e := decode(req, &r); e != nil {
		return nil, e
	}
	p, e := c.pool(ctx, caller, abi.OpPoolPut, r.Pool)
	if e != nil {
		return nil, e
	}
	if e := required("payload", r.Payload); e != nil {
		return nil, e
	}
	if e := checkSize(caller.Plugin, "payload", r.Payload); e != nil {
		return nil, e
	}
	if e := checkSize(caller.Plugin, "tags", r.Tags); e != nil {
		return nil, e
	}
	ttl, e := abi.Millis("ttl_ms", r.TTLMs)
	if e != nil {
		return nil, e
	}
	maxUses, e := count("max_uses", r.MaxUses)
	if e != nil {
		return nil, e
	}
	maxScore, e := count("max_error_score", r.MaxErrorScore)
	if e != nil {
		return nil, e
	}
	tags, e := p.Put(r.Payload, r.Tags)
	if e != nil {
		return nil, e
	}
	o := primitives.PoolPutOptions{Cap: caller.Plugin.Quota.Pool, Health: primitives.PoolHealth{MaxUses: maxUses, MaxErrorScore: maxScore}}
	id, err := c.backend.PoolPut(ctx, r.Pool, r.Payload, tags, ttl, o)
	if err != nil {
		return nil, quotaError(err, poolFields)
	}
	return abi.PoolPutReply{ID: id}, nil
}

// poolClaim: pool_claim.
//
//	request:  {"pool": "cookies", "where": {"site": "x"}, "hold_ms": 20000}
//	reply:    {"found": true, "item": {...}, "token": "...", "until_ms": 1700000000000}
//
// Each where entry is validated as a property of a live version's tags schema
// (validate.Pool.Where).
func (c *Core) poolClaim(ctx context.Context, caller *Caller, req []byte) (any, *abi.Error) {
	var r abi.PoolClaimRequest
	if e := decode(req, &r); e != nil {
		return nil, e
	}
	p, e := c.pool(ctx, caller, abi.OpPoolClaim, r.Pool)
	if e != nil {
		return nil, e
	}
	hold, e := holdMs(r.HoldMs)
	if e != nil {
		return nil, e
	}
	where, e := p.Where(r.Where)
	if e != nil {
		return nil, e
	}
	// The slot is named as the lease's holder, which operators see (fleet-host pool items).
	l, ok, err := c.backend.PoolClaim(primitives.WithHolder(ctx, caller.Slot), r.Pool, where, hold)
	if err != nil {
		return nil, fromBackend(err)
	}
	if !ok {
		return abi.PoolClaimReply{Found: false}, nil
	}
	item := toItem(l.Item)
	return abi.PoolClaimReply{Found: true, Item: &item, Token: l.Token, UntilMs: l.Until.UnixMilli()}, nil
}

// poolList: pool_list.
//
//	request:  {"pool": "cookies", "where": {"site": "x"}, "limit": 10}
//	reply:    {"items": [...]}
//
// A limit of 0 (or none) is min(100, the plugin's MaxPoolList); a limit over MaxPoolList
// is a ValueError that names it. Items whose payloads and tags add up to more than
// MaxReply answer LimitExceeded before the reply is built.
func (c *Core) poolList(ctx context.Context, caller *Caller, req []byte) (any, *abi.Error) {
	var r abi.PoolListRequest
	if e := decode(req, &r); e != nil {
		return nil, e
	}
	p, e := c.pool(ctx, caller, abi.OpPoolList, r.Pool)
	if e != nil {
		return nil, e
	}
	limits := caller.Plugin.Limits
	switch {
	case r.Limit < 0:
		return nil, abi.Errorf(abi.ValueError, "limit is negative (%d)", r.Limit)
	case r.Limit > limits.MaxPoolList:
		return nil, abi.Errorf(abi.ValueError, "limit is %d, maximum %d (max_pool_list in the grants file)", r.Limit, limits.MaxPoolList)
	case r.Limit == 0:
		r.Limit = min(poolListDefault, limits.MaxPoolList)
	}
	where, e := p.Where(r.Where)
	if e != nil {
		return nil, e
	}
	items, err := c.backend.PoolList(ctx, r.Pool, where, r.Limit)
	if err != nil {
		return nil, fromBackend(err)
	}
	size := 0
	for _, it := range items {
		size += len(it.Payload)
		for k, v := range it.Tags {
			size += len(k) + len(v)
		}
	}
	if size > limits.MaxReply {
		return nil, abi.Errorf(abi.LimitExceeded, "pool_list: %d items of %d bytes are over the reply limit %d (max_reply in the grants file); ask for fewer (limit)",
			len(items), size, limits.MaxReply)
	}
	out := abi.PoolListReply{Items: make([]abi.PoolItem, 0, len(items))}
	for _, it := range items {
		out.Items = append(out.Items, toItem(it))
	}
	return out, nil
}

// poolRelease: pool_release.
//
//	request:  {"pool": "cookies", "id": "...", "token": "..."}
//	reply:    {}
func (c *Core) poolRelease(ctx context.Context, caller *Caller, req []byte) (any, *abi.Error) {
	var r abi.PoolReleaseRequest
	if e := decode(req, &r); e != nil {
		return nil, e
	}
	if _, e := c.pool(ctx, caller, abi.OpPoolRelease, r.Pool); e != nil {
		return nil, e
	}
	if err := c.backend.PoolRelease(ctx, r.Pool, r.ID, r.Token); err != nil {
		return nil, fromBackend(err)
	}
	return abi.Empty{}, nil
}

// poolExtend: pool_extend.
//
//	request:  {"pool": "cookies", "id": "...", "token": "...", "hold_ms": 20000}
//	reply:    {"until_ms": 1700000000000}
//
// The lease then ends hold_ms from now; hold_ms is bounded as a claim's is (holdMs).
func (c *Core) poolExtend(ctx context.Context, caller *Caller, req []byte) (any, *abi.Error) {
	var r abi.PoolExtendRequest
	if e := decode(req, &r); e != nil {
		return nil, e
	}
	if _, e := c.pool(ctx, caller, abi.OpPoolExtend, r.Pool); e != nil {
		return nil, e
	}
	hold, e := holdMs(r.HoldMs)
	if e != nil {
		return nil, e
	}
	until, err := c.backend.PoolExtend(ctx, r.Pool, r.ID, r.Token, hold)
	if err != nil {
		return nil, fromBackend(err)
	}
	return abi.PoolExtendReply{UntilMs: until.UnixMilli()}, nil
}

// maxReason caps a mark_bad reason or a task's failure reason, in bytes.
const maxReason = 1024

// poolMarkBad: pool_mark_bad.
//
//	request:  {"pool": "cookies", "id": "...", "reason": "clearance rejected"[, "weight": 1]}
//	reply:    {}
//
// Without a weight it evicts the item; with one it adds to the item's score
// (primitives.Pool.PoolMarkBad). A negative weight is a ValueError.
func (c *Core) poolMarkBad(ctx context.Context, caller *Caller, req []byte) (any, *abi.Error) {
	var r abi.PoolMarkBadRequest
	if e := decode(req, &r); e != nil {
		return nil, e
	}
	if _, e := c.pool(ctx, caller, abi.OpPoolMarkBad, r.Pool); e != nil {
		return nil, e
	}
	if len(r.Reason) > maxReason {
		return nil, abi.Errorf(abi.LimitExceeded, "reason is %d bytes, limit %d", len(r.Reason), maxReason)
	}
	weight, e := count("weight", r.Weight)
	if e != nil {
		return nil, e
	}
	if err := c.backend.PoolMarkBad(ctx, r.Pool, r.ID, r.Reason, weight); err != nil {
		return nil, fromBackend(err)
	}
	return abi.Empty{}, nil
}

// poolMarkGood: pool_mark_good.
//
//	request:  {"pool": "cookies", "id": "..."[, "weight": 1]}
//	reply:    {}
//
// It lowers the item's score by weight (1 when absent), never below 0. It needs the
// mark_bad role: reporting an item's health either way is one permission. A negative
// weight is a ValueError.
func (c *Core) poolMarkGood(ctx context.Context, caller *Caller, req []byte) (any, *abi.Error) {
	var r abi.PoolMarkGoodRequest
	if e := decode(req, &r); e != nil {
		return nil, e
	}
	if _, e := c.pool(ctx, caller, abi.OpPoolMarkGood, r.Pool); e != nil {
		return nil, e
	}
	weight, e := count("weight", r.Weight)
	if e != nil {
		return nil, e
	}
	if err := c.backend.PoolMarkGood(ctx, r.Pool, r.ID, weight); err != nil {
		return nil, fromBackend(err)
	}
	return abi.Empty{}, nil
}

// maxCount bounds a health count or weight (max_uses, max_error_score, weight), so that
// a score's sum stays exact in every backend's arithmetic (Lua's doubles are exact to
// 2^53) however many penalties a guest sends.
const maxCount = 1 << 30

// count converts the health count or weight field: 0..maxCount.
func count(field string, n int64) (int, *abi.Error) {
	if n < 0 || n > maxCount {
		return 0, abi.Errorf(abi.ValueError, "%s is %d, want 0..%d", field, n, maxCount)
	}
	return int(n), nil
}

// poolSize: pool_size.
//
//	request:  {"pool": "cookies"}
//	reply:    {"size": 3}
func (c *Core) poolSize(ctx context.Context, caller *Caller, req []byte) (any, *abi.Error) {
	var r abi.PoolSizeRequest
	if e := decode(req, &r); e != nil {
		return nil, e
	}
	if _, e := c.pool(ctx, caller, abi.OpPoolSize, r.Pool); e != nil {
		return nil, e
	}
	n, err := c.backend.PoolSize(ctx, r.Pool)
	if err != nil {
		return nil, fromBackend(err)
	}
	return abi.PoolSizeReply{Size: n}, nil
}

func toItem(it primitives.Item) abi.PoolItem {
	out := abi.PoolItem{
		ID:          it.ID,
		Payload:     json.RawMessage(it.Payload),
		Tags:        tagsJSON(it.Tags),
		CreatedAtMs: it.CreatedAt.UnixMilli(),
	}
	if !it.ExpiresAt.IsZero() {
		out.ExpiresAtMs = it.ExpiresAt.UnixMilli()
	}
	out.Score, out.Uses, out.MaxUses, out.MaxErrorScore = int64(it.Score), int64(it.Uses), int64(it.MaxUses), int64(it.MaxErrorScore)
	if len(out.Payload) == 0 {
		out.Payload = json.RawMessage("null")
	}
	return out
}

// tagsJSON renders primitives.Tags, whose values are canonical JSON texts, as a JSON
// object with sorted keys. A value that is not JSON (which the host never writes, but
// another writer of the backend might) is rendered as a string.
func tagsJSON(t primitives.Tags) json.RawMessage {
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			buf.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		buf.Write(kb)
		buf.WriteByte(':')
		if v := t[k]; json.Valid([]byte(v)) {
			buf.WriteString(v)
		} else {
			vb, _ := json.Marshal(v)
			buf.Write(vb)
		}
	}
	buf.WriteByte('}')
	return buf.Bytes()
}

// holdMs converts the hold_ms of a pool claim or a lock: a lease of no time is no lease,
// so 0 is refused too.
func holdMs(ms int64) (time.Duration, *abi.Error) {
	if ms <= 0 {
		return 0, abi.Errorf(abi.ValueError, "hold_ms must be positive, got %d", ms)
	}
	return abi.Millis("hold_ms", ms)
}
