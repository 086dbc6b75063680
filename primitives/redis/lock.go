package redis

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/fleethost/fleet/primitives"
	goredis "github.com/redis/go-redis/v9"
)

// lockAcquireCmd takes a free lock and draws its fencing token from the root's sequence,
// once per request (luaOnce). With an owner, the lease is counted in the owner's ledger
// of held locks, after the ledger has dropped the locks whose hold has ended, and
// refused at the quota.
//
//	KEYS[1]    -> fleet:lock:{root}[name]              STRING holder's token "<fence>.<ARGV[1]>", PX hold
//	KEYS[2]    -> fleet:lock:{root}:fence              STRING integer, the root's fences; never expires
//	KEYS[3]    -> fleet:lock:{root}:req:<id>           the request's record
//	KEYS[4]    -> fleet:lock:{root}:held:<owner>       ZSET name -> hold end ms (optional)
//	ARGV[1]    -> token (fresh, from Go; "<hex>/<owner>" with an owner)
//	ARGV[2]    -> hold in ms
//	ARGV[3]    -> the quota of locks held (0: none)
//	ARGV[4]    -> name, the ledger's member
//	ARGV[5..7] -> the request (luaOnce)
//
// A root's first fence (INCR gives 1: the sequence is new, or was lost) is Redis's clock
// in µs instead: above every fence drawn before, which an INCR a lease never outruns,
// and above the per-name sequences of the layout before this one.
//
// The token handed out is "<fence>.<ARGV[1]>": the lock's one key then says its fence
// too, for LockShow, and a release still compares the token whole.
//
// Output: 0 the lock is held; -1 past the quota, nothing written; {fence, token, hold
// left in ms} acquired, by this run or by the request's first (then the hold left is 0
// once its token no longer holds the lock).
var lockAcquireCmd = goredis.NewScript(luaNow + luaOnce + `
local prev = replay(KEYS[3])
if prev then
  local left = 0
  if redis.call('GET', KEYS[1]) == prev[3] then left = math.max(redis.call('PTTL', KEYS[1]), 0) end
  return {prev[2], prev[3], left}
end
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local hold = tonumber(ARGV[2])
local now = now_ms()
if KEYS[4] then
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
  local max = tonumber(ARGV[3])
  if max > 0 and redis.call('ZCARD', KEYS[4]) >= max then return -1 end
  redis.call('ZADD', KEYS[4], now + hold, ARGV[4])
end
local fence = redis.call('INCR', KEYS[2])
if fence == 1 then
  local t = redis.call('TIME')
  fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
  redis.call('SET', KEYS[2], fence)
end
local token = string.format('%.0f', fence) .. '.' .. ARGV[1]
redis.call('SET', KEYS[1], token, 'PX', hold)
remember(KEYS[3], fence, token)
return {fence, token, hold}
`)

// LockAcquire takes lock name for hold. With wait 0 it tries once and returns ok false
// when the lock is held; with wait > 0 it tries again with jittered exponential backoff
// (primitives.RetryAcquire) until wait has passed or ctx ends. Each try is one round
// trip, bounded by Options.CallTimeout, that counts the lease against q's locks held in
// the same script as the lease (primitives.Lock). hold must be > 0.
func (b *Backend) LockAcquire(ctx context.Context, name string, hold, wait time.Duration, q primitives.NameQuota) (primitives.LockLease, bool, error) {
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
		keys = append(keys, lockHeldKey(name, q.Owner))
	}
	var l primitives.LockLease
	ok, err := primitives.RetryAcquire(ctx, wait, func(ctx context.Context) (bool, error) {
		start := time.Now()
		ctx, cancel := b.call(ctx)
		defer cancel()
		v, err := lockAcquireCmd.Run(ctx, b.client, keys, req.args(lockToken(q.Owner), ms(hold), q.Max, name)...).Result()
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

// lockToken is a fresh lock token: primitives.NewToken, and "/<owner>" when the lease
// counts against an owner, so that the release, which is given only the token, finds
// the ledger to take the lock out of. A token is compared whole before its owner is
// read, so no caller can name another's ledger.
func lockToken(owner string) string {
	if owner == "" {
		return primitives.NewToken()
	}
	return primitives.NewToken() + "/" + owner
}

// lockReleaseCmd deletes a lock only if the token still holds it, and takes it out of
// the ledger of the owner its token names.
//
//	KEYS[1] -> fleet:lock:{root}[name]  STRING holder's token
//	KEYS[2] -> fleet:lock:{root}:held:  prefix of the owners' ledgers (never read itself)
//	KEYS[3] -> fleet:lock:{root}:req:<id>  the request's record
//	ARGV[1] -> token
//	ARGV[2] -> name, the ledger's member
//	ARGV[3..5] -> the request (luaOnce)
//
// Output: 1 released, by this run or the request's first; 0 not held by token
// (expired, maybe leased again).
var lockReleaseCmd = goredis.NewScript(luaOnce + `
if replay(KEYS[3]) then return 1 end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
local owner = string.match(ARGV[1], '^[^/]*/(.+)$')
if owner then redis.call('ZREM', KEYS[2] .. owner, ARGV[2]) end
remember(KEYS[3], 1)
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
	v, err := lockReleaseCmd.Run(ctx, b.client, []string{lockKey(name), lockHeldPrefix(name), lockRequestKey(name, req.id)}, req.args(token, name)...).Result()
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

// lockShowCmd reads a lock's token and the hold it has left, in one step.
//
//	KEYS[1] -> fleet:lock:{root}[name]  STRING holder's token
//
// Output: {} free; {token, hold left in ms} held.
var lockShowCmd = goredis.NewScript(`
local token = redis.call('GET', KEYS[1])
if not token then return {} end
return {token, redis.call('PTTL', KEYS[1])}
`)

// LockShow reads who holds lock name (primitives.Lock): its owner and fence, which its
// token carries ("<fence>.<hex>[/<owner>]"; lockAcquireCmd), and the end of its hold.
func (b *Backend) LockShow(ctx context.Context, name string) (primitives.LockHolder, bool, error) {
	if err := primitives.CheckName("lock", name); err != nil {
		return primitives.LockHolder{}, false, err
	}
	start := time.Now()
	ctx, cancel := b.call(ctx)
	defer cancel()
	v, err := lockShowCmd.Run(ctx, b.client, []string{lockKey(name)}).Result()
	if err != nil {
		return primitives.LockHolder{}, false, b.scriptFail(ctx, "lock show", name, err)
	}
	a, ok := v.([]any)
	if !ok {
		return primitives.LockHolder{}, false, replyError("lock show", v)
	}
	if len(a) == 0 {
		return primitives.LockHolder{}, false, nil
	}
	if len(a) != 2 {
		return primitives.LockHolder{}, false, replyError("lock show", v)
	}
	token, err1 := replyString("lock show", a[0])
	left, err2 := replyInt("lock show", a[1])
	if err := errors.Join(err1, err2); err != nil {
		return primitives.LockHolder{}, false, err
	}
	h := primitives.LockHolder{Owner: primitives.TokenHolder(token), Until: start.Add(time.Duration(max(left, 0)) * time.Millisecond)}
	if f, _, ok := strings.Cut(token, "."); ok {
		h.Fence, _ = strconv.ParseInt(f, 10, 64)
	}
	return h, true, nil
}
