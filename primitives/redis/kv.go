package redis

import (
	"context"
	"errors"
	"time"

	"github.com/fleethost/fleet/primitives"
	goredis "github.com/redis/go-redis/v9"
)

// KVSet stores value under (namespace, key): SET, with PX ttl when ttl > 0. ttl 0
// means no expiry (and clears an earlier TTL).
func (b *Backend) KVSet(ctx context.Context, namespace, key string, value []byte, ttl time.Duration) error {
	if err := primitives.CheckKV(namespace, key); err != nil {
		return err
	}
	if err := primitives.CheckValue("value", value); err != nil {
		return err
	}
	if err := primitives.CheckTTL("ttl", ttl); err != nil {
		return err
	}
	ctx, cancel := b.call(ctx)
	defer cancel()
	// Whole milliseconds, rounded up: go-redis sends PX for them.
	err := b.client.Set(ctx, kvKey(namespace, key), value, roundMs(ttl)).Err()
	return b.fail(ctx, "kv set", namespace, err)
}

// KVGet returns the value under (namespace, key); ok is false when it is absent or
// expired.
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

// KVDelete removes (namespace, key) and reports whether it existed.
func (b *Backend) KVDelete(ctx context.Context, namespace, key string) (bool, error) {
	if err := primitives.CheckKV(namespace, key); err != nil {
		return false, err
	}
	ctx, cancel := b.call(ctx)
	defer cancel()
	n, err := b.client.Del(ctx, kvKey(namespace, key)).Result()
	if err != nil {
		return false, b.fail(ctx, "kv delete", namespace, err)
	}
	return n > 0, nil
}
