package redis

import (
	"context"
	"errors"
	"time"

	"github.com/fleethost/fleet/primitives"
	goredis "github.com/redis/go-redis/v9"
)

// luaKV is the prelude of the KV write scripts: a root's quota keys, and how a key
// leaves its owner's ledger. Every KV write script passes
//
//	KEYS[1] -> fleet:kv:{root}[ns]key   the value
//	KEYS[2] -> fleet:kv:{root}          prefix of the root's quota keys (never read itself)
//	KEYS[3] -> fleet:kv:{root}:req:<id> the request's record (luaOnce)
//	ARGV[1] -> [ns]key                  the key's member in the ledgers
//	ARGV[-3..] -> the request (luaOnce)
const luaKV = luaNow + luaOnce + luaKVKeys + `
local M = ARGV[1]

-- release takes member m out of owner o's ledger, and out of OWNERS if o holds it there.
local function release(o, m)
  local bk = bytes_key(o)
  local c = redis.call('HGET', bk, m)
  if c then
    redis.call('HDEL', bk, m)
    redis.call('HINCRBY', bk, 'total', -tonumber(c))
  end
  redis.call('ZREM', keys_key(o), m)
  if redis.call('HGET', OWNERS, m) == o then redis.call('HDEL', OWNERS, m) end
end
`

// kvSetCmd sets a value, counting it against its owner's quota in the root.
//
//	KEYS[1..3], ARGV[1] -> as luaKV
//	ARGV[2] -> the value
//	ARGV[3] -> ttl in ms; 0 for none
//	ARGV[4] -> the owner; '' counts nowhere
//	ARGV[5] -> the owner's most keys in the root; 0 for no cap
//	ARGV[6] -> the owner's most bytes in the root; 0 for no cap
//	ARGV[7] -> the key's cost in bytes (primitives.KVCost)
//
// Output: {1} set, by this run or the request's first (a repeat does not set again over
// a later write); {-3, keys, bytes} refused: the owner would hold keys keys of bytes bytes.
//
// The ledger counts a key until just after Redis expires it (a member is pruned once
// its expiry is in the past, PXAT keeps the key while it is not), so it never counts
// less than the root holds. Expired members are pruned 100 per set, and 1,000 more when
// the set would be refused, so that a refusal counts no expired key unless over 1,100
// of the owner's expired at once (the next sets prune them).
var kvSetCmd = goredis.NewScript(luaKV + `
if replay(KEYS[3]) then return {1} end
local now = now_ms()
local value, ttl, owner = ARGV[2], tonumber(ARGV[3]), ARGV[4]
local maxKeys, maxBytes, cost = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local prev = redis.call('HGET', OWNERS, M)

-- prune releases up to n of owner o's keys whose expiry has passed.
local function prune(o, n)
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', keys_key(o), '-inf', '(' .. now, 'LIMIT', 0, n)) do
    release(o, m)
  end
end

-- after is what owner would hold once the set is done: its keys and bytes, and the
-- cost it is charged for the key now (nil when it holds none).
local function after()
  local keys = redis.call('ZCARD', keys_key(owner))
  local f = redis.call('HMGET', bytes_key(owner), 'total', M)
  local bytes, old = tonumber(f[1] or '0'), f[2]
  if old then keys, bytes = keys - 1, bytes - tonumber(old) end
  return keys + 1, bytes + cost, old
end

local function over(keys, bytes)
  return (maxKeys > 0 and keys > maxKeys) or (maxBytes > 0 and bytes > maxBytes)
end

local old
if owner ~= '' then
  prune(owner, 100)
  local keys, bytes
  keys, bytes, old = after()
  if over(keys, bytes) then
    prune(owner, 1000)
    keys, bytes, old = after()
    if over(keys, bytes) then return {-3, keys, bytes} end
  end
end
-- An owner overwriting its own key is charged the difference; any other previous
-- owner gives the key back.
if prev and not (prev == owner and old) then release(prev, M); old = nil end
local score = '+inf'
if ttl > 0 then
  score = now + ttl
  redis.call('SET', KEYS[1], value, 'PXAT', score)
else
  redis.call('SET', KEYS[1], value)
end
if owner ~= '' then
  redis.call('ZADD', keys_key(owner), score, M)
  redis.call('HSET', bytes_key(owner), M, cost)
  redis.call('HINCRBY', bytes_key(owner), 'total', cost - tonumber(old or '0'))
  if not old then redis.call('HSET', OWNERS, M, owner) end
end
remember(KEYS[3], 1)
return {1}
`)

// kvDeleteCmd deletes a value and gives it back to its owner's quota.
//
//	KEYS[1..3], ARGV[1] -> as luaKV
//
// Output: 1 the key existed (and had not expired); 0 not. A repeat of a request that
// deleted returns 1 and deletes nothing that was set since.
var kvDeleteCmd = goredis.NewScript(luaKV + `
if replay(KEYS[3]) then return 1 end
local prev = redis.call('HGET', OWNERS, M)
if prev then release(prev, M) end
local n = redis.call('DEL', KEYS[1])
if n > 0 then remember(KEYS[3], 1) end
return n
`)

// KVSet stores value under (namespace, key), with PXAT now+ttl when ttl > 0 (ttl 0
// clears an earlier TTL), and counts it against q's owner in the namespace's root, in
// one script: the root's keys and the owners' ledgers share its hash tag.
func (b *Backend) KVSet(ctx context.Context, namespace, key string, value []byte, ttl time.Duration, q primitives.KVQuota) error {
	if err := primitives.CheckKV(namespace, key); err != nil {
		return err
	}
	if err := primitives.CheckValue("value", value); err != nil {
		return err
	}
	if err := primitives.CheckTTL("ttl", ttl); err != nil {
		return err
	}
	if q.Owner != "" {
		if err := primitives.CheckName("kv quota owner", q.Owner); err != nil {
			return err
		}
	}
	req, err := b.request(ctx, "kv set", namespace, key, value, ttl)
	if err != nil {
		return err
	}
	ctx, cancel := b.call(ctx)
	defer cancel()
	v, err := kvSetCmd.Run(ctx, b.client, []string{kvKey(namespace, key), kvPrefix(namespace), kvRequestKey(namespace, req.id)},
		req.args(kvMember(namespace, key), value, ms(ttl), q.Owner, max(q.MaxKeys, 0), max(q.MaxBytes, 0),
			primitives.KVCost(namespace, key, value))...).Result()
	if err != nil {
		return b.scriptFail(ctx, "kv set", namespace, err)
	}
	a, err := replyArray("kv set", v, 1)
	if err != nil {
		return err
	}
	switch code, _ := a[0].(int64); {
	case code == codeOK:
		return nil
	case code == codeLimit && len(a) == 3:
		keys, _ := a[1].(int64)
		bytes, _ := a[2].(int64)
		return primitives.KVQuotaExceeded(q, primitives.KVRoot(namespace), int(keys), bytes)
	}
	return replyError("kv set", v)
}

// KVGet returns the value under (namespace, key); ok is false when it is absent or
// expired. It is one GET: quotas cost reads nothing.
func (b *Backend) KVGet(ctx context.Context, namespace, key string) ([]byte, bool, error) {
	if err := primitives.CheckKV(namespace, key); err != nil {
		return nil, false, err
	}
	ctx, cancel := b.call(ctx)
	defer cancel()
	v, err := b.client.Get(ctx, kvKey(namespace, key)).Bytes()
	if errors.Is(err, goredis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, b.fail(ctx, "kv get", namespace, err)
	}
	return v, true, nil
}

// KVDelete removes (namespace, key), gives it back to its owner's quota, and reports
// whether it existed.
func (b *Backend) KVDelete(ctx context.Context, namespace, key string) (bool, error) {
	if err := primitives.CheckKV(namespace, key); err != nil {
		return false, err
	}
	req, err := b.request(ctx, "kv delete", namespace, key)
	if err != nil {
		return false, err
	}
	ctx, cancel := b.call(ctx)
	defer cancel()
	v, err := kvDeleteCmd.Run(ctx, b.client, []string{kvKey(namespace, key), kvPrefix(namespace), kvRequestKey(namespace, req.id)},
		req.args(kvMember(namespace, key))...).Result()
	if err != nil {
		return false, b.scriptFail(ctx, "kv delete", namespace, err)
	}
	n, err := replyInt("kv delete", v)
	return n > 0, err
}
