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

// CounterIncr adds delta (negative to decrement) to counter name with INCRBY and
// returns the new value. No update is lost, whatever the concurrency. An update that
// would overflow int64 is ErrLimit and changes nothing, as on every backend: INCRBY
// refuses it with "ERR increment or decrement would overflow".
func (b *Backend) CounterIncr(ctx context.Context, name string, delta int64) (int64, error) {
	return b.CounterIncrWithin(ctx, name, delta, primitives.NameQuota{})
}

// counterIncrWithinCmd creates a counter only within its owner's quota of names, then
// adds to it. A new counter starts at 0, so its INCRBY cannot overflow: a refused
// overflow never follows a charge.
//
//	KEYS[1] -> fleet:counter:{root}[name]            STRING integer
//	KEYS[2] -> fleet:counter:{root}:names:<owner>    STRING integer, the names it created
//	ARGV[1] -> delta
//	ARGV[2] -> the quota of names (0: none)
//
// Output: {1, value}; {0} past the quota, nothing written.
var counterIncrWithinCmd = goredis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then
  local max = tonumber(ARGV[2])
  if max > 0 and tonumber(redis.call('GET', KEYS[2]) or '0') >= max then return {0} end
  redis.call('INCR', KEYS[2])
end
return {1, redis.call('INCRBY', KEYS[1], ARGV[1])}
`)

// CounterIncrWithin is CounterIncr that counts a new name against q in the same
// script as the update (primitives.Counter). Without an owner it is one INCRBY.
func (b *Backend) CounterIncrWithin(ctx context.Context, name string, delta int64, q primitives.NameQuota) (int64, error) {
	if err := primitives.CheckName("counter", name); err != nil {
		return 0, err
	}
	ctx, cancel := b.call(ctx)
	defer cancel()
	var n int64
	var err error
	if q.Owner == "" {
		n, err = b.client.IncrBy(ctx, counterKey(name), delta).Result()
	} else {
		n, err = b.counterIncrWithin(ctx, name, delta, q)
	}
	if err != nil && strings.Contains(err.Error(), "would overflow") {
		return 0, fmt.Errorf("%w: redis: counter %q would overflow adding %d", primitives.ErrLimit, name, delta)
	}
	if err != nil && !errors.Is(err, primitives.ErrLimit) {
		return 0, b.fail(ctx, "counter incr", name, err)
	}
	return n, err
}

func (b *Backend) counterIncrWithin(ctx context.Context, name string, delta int64, q primitives.NameQuota) (int64, error) {
	keys := []string{counterKey(name), counterNamesKey(name, q.Owner)}
	v, err := counterIncrWithinCmd.Run(ctx, b.client, keys, delta, q.Max).Slice()
	if err != nil {
		return 0, err
	}
	if len(v) == 1 {
		return 0, primitives.NamesExceeded("counter", q, primitives.KVRoot(name))
	}
	n, ok := v[1].(int64)
	if len(v) != 2 || !ok {
		return 0, replyError("counter incr", v)
	}
	return n, nil
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
