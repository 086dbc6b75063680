package redis

import (
	"context"
	"errors"
	"time"

	"github.com/fleethost/fleet/primitives"
	goredis "github.com/redis/go-redis/v9"
)

// luaGate is the Lua prelude of the gate's close and state (the acquire writes the same
// out, see gateAcquireCmd). now_us reads Redis's clock in microseconds: a gate counts
// intervals as short as one (primitives.MaxPerSecond). Its values are below 2^53, so a
// Lua number holds them exactly, and redis.call writes a number argument with 17
// digits, so scores and expiries go to Redis as numbers.
//
// A site's times are one STRING (gateTimesKey), read with one GET and written with one
// SET ... PX, rather than a HASH's HMGET, HSET and PEXPIRE: each redis.call is much of
// what a script costs beyond the EVALSHA itself. They are three little-endian float64s
// (struct.pack '<ddd'), whole µs, rather than text: Lua's own number conversion keeps 14
// digits, so text would need a string.format and a string.match on every acquire,
// which measured as much as one of the redis.calls saved.
const luaGate = `
local function now_us()
  local t = redis.call('TIME')
  return t[1] * 1000000 + t[2]
end
local function get_times()
  local v = redis.call('GET', KEYS[1])
  if not v then return 0, 0, 0 end
  local tat, closed, held = struct.unpack('<ddd', v)
  return tat, closed, held
end
local function set_times(tat, closed, held, now)
  redis.call('SET', KEYS[1], struct.pack('<ddd', tat, closed, held),
    'PX', math.ceil((math.max(tat, closed) - now) / 1000))
end
`

// gateAcquireCmd admits one request to a site, or says why not and for how long, by
// Redis's clock: closed, busy (places), rate (GCRA), checked in that order, all in one
// step. An admission moves tat on by one interval and, with a bound on places, takes one.
//
//	KEYS[1] -> fleet:gate:{site}:times  STRING tat, closed, held (µs, '<ddd'); PX to the later of tat and closed
//	KEYS[2] -> fleet:gate:{site}:held   ZSET token -> hold end µs; PEXPIRE at the latest (times' held)
//	ARGV[1] -> the rate's interval in µs (primitives.Rate.Interval, >= 1)
//	ARGV[2] -> the rate's tolerance in µs (primitives.Rate.Tolerance)
//	ARGV[3] -> concurrency (> 0)
//	ARGV[4] -> hold in µs
//	ARGV[5] -> the place's token (fresh, from Go)
//
// A rate without a concurrency passes KEYS[1], ARGV[1] and ARGV[2] alone, and the script
// never touches the ZSET: every key and argument sent is a part of the call's cost. The
// script is written out, without luaGate's helpers, for the same reason: their closures
// and calls measured as a few percent of an acquire.
//
// Output: 1 admitted; {0, reason, wait in µs} refused, nothing written but the holds
// that had ended: reason the first of closed, busy, rate that refuses, wait the longest
// of their waits.
//
// held is the expiry last given to KEYS[2], so that an admission extends it without
// reading the ZSET's latest score: it is kept while both keys live (every write of the
// times carries it over), and is 0 once the times expired. With places held (n > 0) and
// no held known, the admission reads the latest score as before (ZRANGE -1 -1); with
// none (n = 0), the ZSET is new, and the place's end is its expiry.
var gateAcquireCmd = goredis.NewScript(`
local interval, tol, conc = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]) or 0
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local tat, closed, held = 0, 0, 0
local v = redis.call('GET', KEYS[1])
if v then tat, closed, held = struct.unpack('<ddd', v) end
if tat < now then tat = now end
local reason, wait = false, 0
if closed > now then reason, wait = '` + primitives.GateClosed + `', closed - now end
local n, hold = 0, 0
if conc > 0 then
  hold = tonumber(ARGV[4])
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  n = redis.call('ZCARD', KEYS[2])
  if n >= conc then
    local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
    reason = reason or '` + primitives.GateBusy + `'
    wait = math.max(wait, math.min(first[2] - now, hold))
  end
end
if tat - now > tol then
  reason = reason or '` + primitives.GateRate + `'
  wait = math.max(wait, tat - now - tol)
end
if reason then return {0, reason, math.ceil(wait)} end
tat = tat + interval
if conc > 0 then
  local ends = now + hold
  redis.call('ZADD', KEYS[2], ends, ARGV[5])
  if n > 0 and held == 0 then
    held = tonumber(redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2])
    redis.call('PEXPIRE', KEYS[2], math.ceil((held - now) / 1000))
  elseif n == 0 or ends > held then
    held = ends
    redis.call('PEXPIRE', KEYS[2], math.ceil((held - now) / 1000))
  end
end
local last = tat
if closed > last then last = closed end
redis.call('SET', KEYS[1], struct.pack('<ddd', tat, closed, held), 'PX', math.ceil((last - now) / 1000))
return 1
`)

// GateAcquire admits one request to site under r, or refuses it, in one round trip
// (primitives.Gate). It takes no request id: go-redis resending it after a lost reply
// costs the site one more unit of budget.
func (b *Backend) GateAcquire(ctx context.Context, site string, r primitives.Rate) (primitives.GatePass, error) {
	if err := primitives.CheckGate(site, r); err != nil {
		return primitives.GatePass{}, err
	}
	var token string
	if r.Concurrency > 0 {
		token = primitives.NewToken()
	}
	ctx, cancel := b.call(ctx)
	defer cancel()
	var v any
	var err error
	if r.Concurrency > 0 {
		keys := []string{gateTimesKey(site), gateHeldKey(site)}
		v, err = gateAcquireCmd.Run(ctx, b.client, keys, max(us(r.Interval()), 1), us(r.Tolerance()), r.Concurrency, us(r.Hold), token).Result()
	} else {
		v, err = gateAcquireCmd.Run(ctx, b.client, []string{gateTimesKey(site)}, max(us(r.Interval()), 1), us(r.Tolerance())).Result()
	}
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
//	KEYS[1] -> fleet:gate:{site}:times  STRING tat, closed, held (µs, '<ddd'); PX to the later of tat and closed
//	ARGV[1] -> d in µs, > 0
//
// Output: the µs until the site opens.
var gateCloseCmd = goredis.NewScript(luaGate + `
local now = now_us()
local tat, closed, held = get_times()
closed = math.max(closed, now + tonumber(ARGV[1]))
set_times(tat, closed, held, now)
return closed - now
`)

// GateClose closes site for d from now, unless it is closed longer already, and returns
// when it opens (primitives.Gate), by the local clock: the start of the call plus what
// Redis says is left.
func (b *Backend) GateClose(ctx context.Context, site string, d time.Duration) (time.Time, error) {
	if err := primitives.CheckGateClose(site, d); err != nil {
		return time.Time{}, err
	}
	ctx, cancel := b.call(ctx)
	defer cancel()
	v, err := gateCloseCmd.Run(ctx, b.client, []string{gateTimesKey(site)}, us(d)).Result()
	if err != nil {
		return time.Time{}, b.scriptFail(ctx, "gate close", site, err)
	}
	left, err := replyInt("gate close", v)
	if err != nil {
		return time.Time{}, err
	}
	return opensAt(left), nil
}

// gateStateCmd reads a site's state, changing nothing.
//
//	KEYS[1] -> fleet:gate:{site}:times  STRING tat, closed, held (µs, '<ddd')
//	KEYS[2] -> fleet:gate:{site}:held   ZSET token -> hold end µs
//
// Output: {µs until it opens (<= 0: open), places held, µs by which tat is ahead of now
// (<= 0: idle)}.
var gateStateCmd = goredis.NewScript(luaGate + `
local now = now_us()
local tat, closed = get_times()
local held = redis.call('ZCOUNT', KEYS[2], '(' .. string.format('%.0f', now), '+inf')
return {closed - now, held, tat - now}
`)

// GateState reports site's state under r (primitives.Gate).
func (b *Backend) GateState(ctx context.Context, site string, r primitives.Rate) (primitives.GateState, error) {
	if err := primitives.CheckGate(site, r); err != nil {
		return primitives.GateState{}, err
	}
	ctx, cancel := b.call(ctx)
	defer cancel()
	v, err := gateStateCmd.Run(ctx, b.client, []string{gateTimesKey(site), gateHeldKey(site)}).Result()
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
		st.ClosedUntil = opensAt(closed)
	}
	return st, nil
}

// opensAt is when a closure that the backend's clock saw left µs from its end opens,
// by this machine's clock: read once the reply is in, so that it is late by the reply's
// way back, never early by the request's way there (a caller that waits until it is
// admitted; a loaded machine's round trip once made it over 100 ms early).
func opensAt(left int64) time.Time { return time.Now().Add(time.Duration(left) * time.Microsecond) }

// us is d in whole microseconds, rounded up, as the gate's scripts count.
func us(d time.Duration) int64 { return int64((d + time.Microsecond - 1) / time.Microsecond) }
