package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/fleethost/fleet/primitives"
	goredis "github.com/redis/go-redis/v9"
)

// counterIncrCmd adds to a counter once per request (luaOnce), creating it only within
// its owner's quota of names when there is an owner. A new counter starts at 0, so its
// INCRBY cannot overflow: a refused overflow never follows a charge.
//
//	KEYS[1]    -> fleet:counter:{root}[name]            STRING integer
//	KEYS[2]    -> fleet:counter:{root}:req:<id>         the request's record
//	KEYS[3]    -> fleet:counter:{root}:names:<owner>    STRING integer, the names it created (optional)
//	ARGV[1]    -> delta
//	ARGV[2]    -> the quota of names (0: none)
//	ARGV[3..5] -> the request (luaOnce)
//
// Output: {1, value}: the value after this update, or after the request's first, as
// the counter's decimal text (GET after the INCRBY: Lua holds INCRBY's integer reply as
// a double, which rounds a value past 2^53 and overflows MaxInt64 into MinInt64); {0}
// past the quota, nothing written.
var counterIncrCmd = goredis.NewScript(luaOnce + `
local prev = replay(KEYS[2])
if prev then return {1, prev[2]} end
if KEYS[3] and redis.call('EXISTS', KEYS[1]) == 0 then
  local max = tonumber(ARGV[2])
  if max > 0 and tonumber(redis.call('GET', KEYS[3]) or '0') >= max then return {0} end
  redis.call('INCR', KEYS[3])
end
redis.call('INCRBY', KEYS[1], ARGV[1])
local n = redis.call('GET', KEYS[1])
remember(KEYS[2], n)
return {1, n}
`)

// CounterIncr adds delta (negative to decrement) to counter name and returns the new
// value. No update is lost, whatever the concurrency, and a request adds once. A new
// name counts against q in the same script as the update (primitives.Counter). An update
// that would overflow int64 is ErrLimit and changes nothing, as on every backend: INCRBY
// refuses it with "ERR increment or decrement would overflow".
func (b *Backend) CounterIncr(ctx context.Context, name string, delta int64, q primitives.NameQuota) (int64, error) {
	if err := primitives.CheckName("counter", name); err != nil {
		return 0, err
	}
	req, err := b.request(ctx, "counter incr", name, delta)
	if err != nil {
		return 0, err
	}
	keys := []string{counterKey(name), counterRequestKey(name, req.id)}
	if q.Owner != "" {
		keys = append(keys, counterNamesKey(name, q.Owner))
	}
	ctx, cancel := b.call(ctx)
	defer cancel()
	v, err := counterIncrCmd.Run(ctx, b.client, keys, req.args(delta, q.Max)...).Slice()
	switch {
	case err != nil && strings.Contains(err.Error(), "would overflow"):
		return 0, fmt.Errorf("%w: redis: counter %q would overflow adding %d", primitives.ErrLimit, name, delta)
	case err != nil:
		return 0, b.scriptFail(ctx, "counter incr", name, err)
	case len(v) == 1:
		return 0, primitives.NamesExceeded("counter", q, primitives.KVRoot(name))
	}
	if len(v) != 2 {
		return 0, replyError("counter incr", v)
	}
	switch n := v[1].(type) {
	case string:
		if i, err := strconv.ParseInt(n, 10, 64); err == nil {
			return i, nil
		}
	case int64: // the record of a request replayed from a host that kept the integer
		return n, nil
	}
	return 0, replyError("counter incr", v)
}

// CounterGet returns the value of counter name; 0 for a counter never touched.
func (b *Backend) CounterGet(ctx context.Context, name string) (int64, error) {
	if err := primitives.CheckName("counter", name); err != nil {
		return 0, err
	}
	ctx, cancel := b.call(ctx)
	defer cancel()
	s, err := b.client.Get(ctx, counterKey(name)).Result()
	if errors.Is(err, goredis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, b.fail(ctx, "counter get", name, err)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("redis: counter get %q: not an integer: %q", name, s)
	}
	return n, nil
}
