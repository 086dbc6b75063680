package memory

import (
	"context"
	"time"

	"github.com/fleethost/fleet/primitives"
)

type kvKey struct{ namespace, key string }

// kvEntry is one stored value. Its fields are guarded by Backend.kvMu.
type kvEntry struct {
	k       kvKey
	value   []byte
	expires time.Time // zero when the key has no TTL
	node    node      // in Backend.kvTTL when expires is set
}

func (e *kvEntry) live(now time.Time) bool { return e.expires.IsZero() || now.Before(e.expires) }

// pruneKV drops the keys whose TTL has passed. Called with kvMu held for writing.
func (b *Backend) pruneKV(now time.Time) {
	for {
		e, ok := b.kvTTL.popDue(now)
		if !ok {
			return
		}
		delete(b.kv, e.k)
	}
}

// KVSet implements primitives.KV. It stores a copy of value; a set without ttl clears
// the key's previous TTL. Expired keys of every namespace are pruned first.
func (b *Backend) KVSet(ctx context.Context, namespace, key string, value []byte, ttl time.Duration) error {
	if err := primitives.CheckKV(namespace, key); err != nil {
		return err
	}
	if err := primitives.CheckTTL("ttl", ttl); err != nil {
		return err
	}
	if err := primitives.CheckValue("value", value); err != nil {
		return err
	}
	if err := b.check(); err != nil {
		return err
	}
	v := clone(value)
	if v == nil {
		v = []byte{} // a stored value is never nil, so that Get can tell it from absence
	}
	b.kvMu.Lock()
	defer b.kvMu.Unlock()
	now := b.clock.Now()
	b.pruneKV(now)
	k := kvKey{namespace, key}
	e := b.kv[k]
	if e == nil {
		e = &kvEntry{k: k}
		b.kv[k] = e
	}
	e.value = v
	if ttl > 0 {
		e.expires = now.Add(ttl)
		b.kvTTL.set(e, e.expires, 0)
	} else {
		e.expires = time.Time{}
		b.kvTTL.remove(e)
	}
	return nil
}

// KVGet implements primitives.KV. It returns a copy of the value.
func (b *Backend) KVGet(ctx context.Context, namespace, key string) ([]byte, bool, error) {
	if err := primitives.CheckKV(namespace, key); err != nil {
		return nil, false, err
	}
	if err := b.check(); err != nil {
		return nil, false, err
	}
	b.kvMu.RLock()
	defer b.kvMu.RUnlock()
	e := b.kv[kvKey{namespace, key}]
	if e == nil || !e.live(b.clock.Now()) {
		return nil, false, nil
	}
	return clone(e.value), true, nil
}

// KVDelete implements primitives.KV. An expired key did not exist.
func (b *Backend) KVDelete(ctx context.Context, namespace, key string) (bool, error) {
	if err := primitives.CheckKV(namespace, key); err != nil {
		return false, err
	}
	if err := b.check(); err != nil {
		return false, err
	}
	b.kvMu.Lock()
	defer b.kvMu.Unlock()
	k := kvKey{namespace, key}
	e := b.kv[k]
	if e == nil {
		return false, nil
	}
	delete(b.kv, k)
	b.kvTTL.remove(e)
	return e.live(b.clock.Now()), nil
}
