package memory

import (
	"context"
	"fmt"

	"github.com/fleethost/fleet/primitives"
)

func checkCounter(name string) error { return primitives.CheckName("counter", name) }

// CounterIncr implements primitives.Counter. An update that would overflow int64 is
// ErrLimit and changes nothing, as Redis' INCRBY refuses it. The first update of a name
// is counted against q, or refused past it, under the same lock as the update.
func (b *Backend) CounterIncr(ctx context.Context, name string, delta int64, q primitives.NameQuota) (int64, error) {
	if err := checkCounter(name); err != nil {
		return 0, err
	}
	rq, err := requestOf(ctx, "counter incr", name, delta)
	if err != nil {
		return 0, err
	}
	if err := b.check(); err != nil {
		return 0, err
	}
	b.countersMu.Lock()
	defer b.countersMu.Unlock()
	now, root := b.clock.Now(), primitives.KVRoot(name)
	if n, ok, err := replay[int64](&b.counterReplays, now, "counter incr", root, rq); ok || err != nil {
		return n, err
	}
	v, ok := b.counters[name]
	if !ok {
		if err := b.counterNames.charge("counter", name, q); err != nil {
			return 0, err
		}
	}
	n := v + delta
	if (delta > 0 && n < v) || (delta < 0 && n > v) {
		return 0, fmt.Errorf("%w: counter %q at %d would overflow adding %d", primitives.ErrLimit, name, v, delta)
	}
	b.counters[name] = n
	b.counterReplays.remember(now, root, rq, n)
	return n, nil
}

// CounterGet implements primitives.Counter.
func (b *Backend) CounterGet(ctx context.Context, name string) (int64, error) {
	if err := checkCounter(name); err != nil {
		return 0, err
	}
	if err := b.check(); err != nil {
		return 0, err
	}
	b.countersMu.RLock()
	defer b.countersMu.RUnlock()
	return b.counters[name], nil
}
