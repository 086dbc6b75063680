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
	if err := primitives.CheckName("counter", name); err != nil {
		return 0, err
	}
	ctx, cancel := b.call(ctx)
	defer cancel()
	n, err := b.client.IncrBy(ctx, counterKey(name), delta).Result()
	if err != nil && strings.Contains(err.Error(), "would overflow") {
		return 0, fmt.Errorf("%w: redis: counter %q would overflow adding %d", primitives.ErrLimit, name, delta)
	}
	if err != nil {
		return 0, b.fail(ctx, "counter incr", name, err)
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
