package redis

import (
	"context"
	"errors"
	"time"

	"github.com/fleethost/fleet/primitives"
	goredis "github.com/redis/go-redis/v9"
)

// luaNowUs is the Lua prelude that reads Redis's clock in microseconds: a gate counts
// intervals as short as one (primitives.MaxPerSecond). Its values are below 2^53, so a
// Lua number holds them exactly; scripts write them with '%.0f', since Lua's own
// conversion keeps 14 digits.
const luaNowUs = `
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function expire_at(key, at, now)
  redis.call('PEXPIRE', key, math.ceil((at - now) / 1000))
end
`

// gateAcquireCmd admits one request to a site, or says why not and for how long, by
// Redis's clock: closed, busy (places), rate (GCRA), checked in that order, all in one
// step. An admission moves tat on by one interval and, with a bound on places, takes one.
//
//	KEYS[1] -> fleet:gate:{site}:state  HASH tat, closed (µs); PEXPIRE at the later
//	KEYS[2] -> fleet:gate:{site}:held   ZSET token -> hold end µs; PEXPIRE at the latest
//	ARGV[1] -> the rate's interval in µs (primitives.Rate.Interval, >= 1)
//	ARGV[2] -> the rate's tolerance in µs (primitives.Rate.Tolerance)
//	ARGV[3] -> concurrency (0: no bound, no place taken)
//	ARGV[4] -> hold in µs
//	ARGV[5] -> the place's token (fresh, from Go)
//
// Output: 1 admitted; {0, reason, wait in µs} refused, nothing written but the holds
// that had ended: reason the first of closed, busy, rate that refuses, wait the longest
// of their waits.
var gateAcquireCmd = goredis.NewScript(luaNowUs + `
local interval, tol, conc, hold = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local now = now_us()
local st = redis.call('HMGET', KEYS[1], 'tat', 'closed')
local tat = math.max(tonumber(st[1]) or 0, now)
local closed = tonumber(st[2]) or 0
local reason, wait = false, 0
if closed > now then reason, wait = '` + primitives.GateClosed + `', closed - now end
if conc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if redis.call('ZCARD', KEYS[2]) >= conc then
    local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
    reason = reason or '` + primitives.GateBusy + `'
    wait = math.max(wait, math.min(tonumber(first[2]) - now, hold))
  end
end
if tat - now > tol then
  reason = reason or '` + primitives.GateRate + `'
  wait = math.max(wait, tat - now - tol)
end
if reason then return {0, reason, math.ceil(wait)} end
tat = tat + interval
redis.call('HSET', KEYS[1], 'tat', string.format('%.0f', tat))
expire_at(KEYS[1], math.max(tat, closed), now)
if conc > 0 then
  redis.call('ZADD', KEYS[2], string.format('%.0f', now + hold), ARGV[5])
  local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
  expire_at(KEYS[2], tonumber(last[2]), now)
end
return 1
`)

// GateAcquire admits one request to site under r, or refuses it, in one round trip
// (primitives.Gate). It takes no request id: go-redis resending it after a lost reply
// costs the site one more unit of budget.
func (b *Backend) GateAcquire(ctx context.Context, site string, r primitives.Rate) (primitives.GatePass, error) {
	if err := primitives.CheckName("site", site); err != nil {
		return primitives.GatePass{}, err
	}
	if err := primitives.CheckRate(r); err != nil {
		return primitives.GatePass{}, err
	}
	var token string
	if r.Concurrency > 0 {
		token = primitives.NewToken()
	}
	ctx, cancel := b.call(ctx)
	defer cancel()
	keys := []string{gateStateKey(site), gateHeldKey(site)}
	v, err := gateAcquireCmd.Run(ctx, b.client, keys, max(us(r.Interval()), 1), us(r.Tolerance()), r.Concurrency, us(r.Hold), token).Result()
	if err != nil {
		return primitives.GatePass{}, b.scriptFail(ctx, "gate acquire", site, err)
	}
	if v == int64(1) {
		return primitives.GatePass{OK: true, Token: token}, nil
	}
	if a, ok := v.([]any); ok && len(a) == 3 && a[0] == int64(0) {
		reason, err1 := replyString("gate acquire", a[1])
		wait, err2 := replyInt("gate acquire", a[2])
		if err := errors.Join(err1, err2); err != nil {
			return primitives.GatePass{}, err
		}
		return primitives.GatePass{Reason: reason, Wait: time.Duration(wait) * time.Microsecond}, nil
	}
	return primitives.GatePass{}, replyError("gate acquire", v)
}

// GateRelease gives back the place token holds on site (primitives.Gate): one ZREM,
// which deletes the key with its last member.
func (b *Backend) GateRelease(ctx context.Context, site, token string) error {
	if err := primitives.CheckName("site", site); err != nil {
		return err
	}
	ctx, cancel := b.call(ctx)
	defer cancel()
	return b.fail(ctx, "gate release", site, b.client.ZRem(ctx, gateHeldKey(site), token).Err())
}

// gateCloseCmd closes a site until now + d, unless it is closed longer already.
//
//	KEYS[1] -> fleet:gate:{site}:state  HASH tat, closed (µs); PEXPIRE at the later
//	ARGV[1] -> d in µs, > 0
//
// Output: the µs until the site opens.
var gateCloseCmd = goredis.NewScript(luaNowUs + `
local now = now_us()
local st = redis.call('HMGET', KEYS[1], 'tat', 'closed')
local closed = math.max(tonumber(st[2]) or 0, now + tonumber(ARGV[1]))
redis.call('HSET', KEYS[1], 'closed', string.format('%.0f', closed))
expire_at(KEYS[1], math.max(closed, tonumber(st[1]) or 0), now)
return closed - now
`)

// GateClose closes site for d from now, unless it is closed longer already, and returns
// when it opens (primitives.Gate), by the local clock: the start of the call plus what
// Redis says is left.
func (b *Backend) GateClose(ctx context.Context, site string, d time.Duration) (time.Time, error) {
	if err := primitives.CheckGateClose(site, d); err != nil {
		return time.Time{}, err
	}
	start := time.Now()
	ctx, cancel := b.call(ctx)
	defer cancel()
	v, err := gateCloseCmd.Run(ctx, b.client, []string{gateStateKey(site)}, us(d)).Result()
	if err != nil {
		return time.Time{}, b.scriptFail(ctx, "gate close", site, err)
	}
	left, err := replyInt("gate close", v)
	if err != nil {
		return time.Time{}, err
	}
	return start.Add(time.Duration(left) * time.Microsecond), nil
}

// gateStateCmd reads a site's state, changing nothing.
//
//	KEYS[1] -> fleet:gate:{site}:state  HASH tat, closed (µs)
//	KEYS[2] -> fleet:gate:{site}:held   ZSET token -> hold end µs
//
// Output: {µs until it opens (<= 0: open), places held, µs by which tat is ahead of now
// (<= 0: idle)}.
var gateStateCmd = goredis.NewScript(luaNowUs + `
local now = now_us()
local st = redis.call('HMGET', KEYS[1], 'tat', 'closed')
local held = redis.call('ZCOUNT', KEYS[2], '(' .. string.format('%.0f', now), '+inf')
return {(tonumber(st[2]) or 0) - now, held, (tonumber(st[1]) or 0) - now}
`)

// GateState reports site's state under r (primitives.Gate).
func (b *Backend) GateState(ctx context.Context, site string, r primitives.Rate) (primitives.GateState, error) {
	if err := primitives.CheckName("site", site); err != nil {
		return primitives.GateState{}, err
	}
	if err := primitives.CheckRate(r); err != nil {
		return primitives.GateState{}, err
	}
	start := time.Now()
	ctx, cancel := b.call(ctx)
	defer cancel()
	v, err := gateStateCmd.Run(ctx, b.client, []string{gateStateKey(site), gateHeldKey(site)}).Result()
	if err != nil {
		return primitives.GateState{}, b.scriptFail(ctx, "gate state", site, err)
	}
	a, err := replyArray("gate state", v, 3)
	if err != nil {
		return primitives.GateState{}, err
	}
	closed, err1 := replyInt("gate state", a[0])
	held, err2 := replyInt("gate state", a[1])
	ahead, err3 := replyInt("gate state", a[2])
	if err := errors.Join(err1, err2, err3); err != nil {
		return primitives.GateState{}, err
	}
	st := primitives.GateState{InFlight: int(held), Wait: max(time.Duration(ahead)*time.Microsecond-r.Tolerance(), 0)}
	if closed > 0 {
		st.ClosedUntil = start.Add(time.Duration(closed) * time.Microsecond)
	}
	return st, nil
}

// us is d in whole microseconds, rounded up, as the gate's scripts count.
func us(d time.Duration) int64 { return int64((d + time.Microsecond - 1) / time.Microsecond) }
