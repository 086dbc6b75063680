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
	owner   string    // whose quota it counts against; "" for none
	cost    int64     // primitives.KVCost, counted in kvUsage[{root, owner}] when owner is set
}

// kvLedger names one owner's quota in one namespace root (primitives.KVQuota).
type kvLedger struct{ root, owner string }

// kvCount is what one owner holds in one root.
type kvCount struct {
	keys  int
	bytes int64
}

// release takes e out of its owner's count. Called with kvMu held for writing.
func (b *Backend) release(e *kvEntry) {
	if e.owner == "" {
		return
	}
	l := kvLedger{primitives.KVRoot(e.k.namespace), e.owner}
	c := b.kvUsage[l]
	c.keys--
	c.bytes -= e.cost
	if c.keys == 0 {
		delete(b.kvUsage, l)
	} else {
		b.kvUsage[l] = c
	}
	e.owner, e.cost = "", 0
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
		b.release(e)
	}
}

// KVSet implements primitives.KV. It stores a copy of value; a set without ttl clears
// the key's previous TTL. Expired keys of every namespace are pruned first, and the quota
// is checked and the key written under kvMu, so the count is exact.
func (b *Backend) KVSet(ctx context.Context, namespace, key string, value []byte, ttl time.Duration, q primitives.KVQuota) error {
	if q.Owner != "" {
		if err := primitives.CheckName("kv quota owner", q.Owner); err != nil {
			return err
		}
	}
	if err := primitives.CheckKV(namespace, key); err != nil {
		return err
	}
	if err := primitives.CheckTTL("ttl", ttl); err != nil {
		return err
	}
	if err := primitives.CheckValue("value", value); err != nil {
		return err
	}
	rq, err := requestOf(ctx, "kv set", namespace, key, value, ttl)
	if err != nil {
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
	now, root := b.clock.Now(), primitives.KVRoot(namespace)
	if _, ok, err := replay[struct{}](&b.kvReplays, now, "kv set", root, rq); ok || err != nil {
		return err
	}
	b.pruneKV(now)
	k := kvKey{namespace, key}
	e := b.kv[k]
	cost := primitives.KVCost(namespace, key, value)
	if q.Owner != "" {
		root := primitives.KVRoot(namespace)
		c := b.kvUsage[kvLedger{root, q.Owner}]
		if e != nil && e.owner == q.Owner {
			c.keys, c.bytes = c.keys-1, c.bytes-e.cost
		}
		c.keys, c.bytes = c.keys+1, c.bytes+cost
		if (q.MaxKeys > 0 && c.keys > q.MaxKeys) || (q.MaxBytes > 0 && c.bytes > q.MaxBytes) {
			return primitives.KVQuotaExceeded(q, root, c.keys, c.bytes)
		}
	}
	if e == nil {
		e = &kvEntry{k: k}
		b.kv[k] = e
	}
	b.release(e)
	if q.Owner != "" {
		l := kvLedger{primitives.KVRoot(namespace), q.Owner}
		c := b.kvUsage[l]
		b.kvUsage[l] = kvCount{c.keys + 1, c.bytes + cost}
		e.owner, e.cost = q.Owner, cost
	}
	e.value = v
	if ttl > 0 {
		e.expires = now.Add(ttl)
		b.kvTTL.set(e, e.expires, 0)
	} else {
		e.expires = time.Time{}
		b.kvTTL.remove(e)
	}
	b.kvReplays.remember(now, root, rq, struct{}{})
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
	rq, err := requestOf(ctx, "kv delete", namespace, key)
	if err != nil {
		return false, err
	}
	if err := b.check(); err != nil {
		return false, err
	}
	b.kvMu.Lock()
	defer b.kvMu.Unlock()
	now, root := b.clock.Now(), primitives.KVRoot(namespace)
	if _, ok, err := replay[struct{}](&b.kvReplays, now, "kv delete", root, rq); ok || err != nil {
		return ok, err
	}
	k := kvKey{namespace, key}
	e := b.kv[k]
	if e == nil {
		return false, nil
	}
	delete(b.kv, k)
	b.kvTTL.remove(e)
	b.release(e)
	if !e.live(now) {
		return false, nil
	}
	b.kvReplays.remember(now, root, rq, struct{}{})
	return true, nil
}
