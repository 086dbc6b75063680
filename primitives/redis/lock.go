package redis

import (
	"context"
	"errors"
	"time"

	"github.com/fleethost/fleet/primitives"
	goredis "github.com/redis/go-redis/v9"
)

// lockAcquireCmd takes a free lock and draws its fencing token, once per request
// (luaOnce). A name never leased (no fence yet) is counted against its owner's quota
// of names first, when there is an owner.
//
//	KEYS[1]    -> fleet:lock:{root}[name]              STRING holder's token, PX hold
//	KEYS[2]    -> fleet:lock:{root}[name]:fence        STRING integer, never expires
//	KEYS[3]    -> fleet:lock:{root}:req:<id>           the request's record
//	KEYS[4]    -> fleet:lock:{root}:names:<owner>      STRING integer, the names it created (optional)
//	ARGV[1]    -> token (fresh, from Go)
//	ARGV[2]    -> hold in ms
//	ARGV[3]    -> the quota of names (0: none)
//	ARGV[4..6] -> the request (luaOnce)
//
// Output: 0 the lock is held; -1 past the quota, nothing written; {fence, token, hold
// left in ms} acquired, by this run or by the request's first (then the hold left is 0
// once its token no longer holds the lock).
var lockAcquireCmd = goredis.NewScript(luaOnce + `
local prev = replay(KEYS[3])
if prev then
  local left = 0
  if redis.call('GET', KEYS[1]) == prev[3] then left = math.max(redis.call('PTTL', KEYS[1]), 0) end
  return {prev[2], prev[3], left}
end
local charge = KEYS[4] and redis.call('EXISTS', KEYS[2]) == 0
if charge then
  local max = tonumber(ARGV[3])
  if max > 0 and tonumber(redis.call('GET', KEYS[4]) or '0') >= max then return -1 end
end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
if charge then redis.call('INCR', KEYS[4]) end
local fence = redis.call('INCR', KEYS[2])
remember(KEYS[3], fence, ARGV[1])
return {fence, ARGV[1], tonumber(ARGV[2])}
`)

// LockAcquire takes lock name for hold. With wait 0 it tries once and returns ok false
// when the lock is held; with wait > 0 it tries again with jittered exponential backoff
// (primitives.RetryAcquire) until wait has passed or ctx ends. Each try is one round
// trip, bounded by Options.CallTimeout. hold must be > 0.
func (b *Backend) LockAcquire(ctx context.Context, name string, hold, wait time.Duration) (primitives.LockLease, bool, error) {
	return b.LockAcquireWithin(ctx, name, hold, wait, primitives.NameQuota{})
}

// LockAcquireWithin is LockAcquire that counts a name never leased against q in the
// same script as the lease (primitives.Lock).
func (b *Backend) LockAcquireWithin(ctx context.Context, name string, hold, wait time.Duration, q primitives.NameQuota) (primitives.LockLease, bool, error) {
	if err := primitives.CheckName("lock", name); err != nil {
		return primitives.LockLease{}, false, err
	}
	if err := primitives.CheckPositive("hold", hold); err != nil {
		return primitives.LockLease{}, false, err
	}
	if err := primitives.CheckTTL("wait", wait); err != nil {
		return primitives.LockLease{}, false, err
	}
	req, err := b.request(ctx, "lock acquire", name, ms(hold))
	if err != nil {
		return primitives.LockLease{}, false, err
	}
	keys := []string{lockKey(name), lockFenceKey(name), lockRequestKey(name, req.id)}
	if q.Owner != "" {
		keys = append(keys, lockNamesKey(name, q.Owner))
	}
	var l primitives.LockLease
	ok, err := primitives.RetryAcquire(ctx, wait, func(ctx context.Context) (bool, error) {
		start := time.Now()
		ctx, cancel := b.call(ctx)
		defer cancel()
		v, err := lockAcquireCmd.Run(ctx, b.client, keys, req.args(primitives.NewToken(), ms(hold), q.Max)...).Result()
		if err != nil {
			return false, b.scriptFail(ctx, "lock acquire", name, err)
		}
		switch v {
		case int64(0):
			return false, nil
		case int64(-1):
			return false, primitives.NamesExceeded("lock", q, primitives.KVRoot(name))
		}
		a, err := replyArray("lock acquire", v, 3)
		if err != nil {
			return false, err
		}
		fence, err1 := replyInt("lock acquire", a[0])
		token, err2 := replyString("lock acquire", a[1])
		left, err3 := replyInt("lock acquire", a[2])
		if err := errors.Join(err1, err2, err3); err != nil {
			return false, err
		}
		l = primitives.LockLease{Lease: primitives.Lease{Token: token, Until: start.Add(time.Duration(left) * time.Millisecond)}, Fence: fence}
		return true, nil
	})
	if err != nil || !ok {
		return primitives.LockLease{}, false, err
	}
	return l, true, nil
}

// lockReleaseCmd deletes a lock only if the token still holds it.
//
//	KEYS[1] -> fleet:lock:{root}[name]  STRING holder's token
//	KEYS[2] -> fleet:lock:{root}:req:<id>  the request's record
//	ARGV[1] -> token
//	ARGV[2..4] -> the request (luaOnce)
//
// Output: 1 released, by this run or the request's first; 0 not held by token
// (expired, maybe leased again).
var lockReleaseCmd = goredis.NewScript(luaOnce + `
if replay(KEYS[2]) then return 1 end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
remember(KEYS[2], 1)
return 1
`)

// LockRelease releases lock name if token still holds it; released is false otherwise
// (the lease expired, and maybe another holder has it now).
func (b *Backend) LockRelease(ctx context.Context, name, token string) (bool, error) {
	if err := primitives.CheckName("lock", name); err != nil {
		return false, err
	}
	req, err := b.request(ctx, "lock release", name, token)
	if err != nil {
		return false, err
	}
	ctx, cancel := b.call(ctx)
	defer cancel()
	v, err := lockReleaseCmd.Run(ctx, b.client, []string{lockKey(name), lockRequestKey(name, req.id)}, req.args(token)...).Result()
	if err != nil {
		return false, b.scriptFail(ctx, "lock release", name, err)
	}
	switch v {
	case int64(1):
		return true, nil
	case int64(0):
		return false, nil
	}
	return false, replyError("lock release", v)
}
