package memory

import (
	"context"
	"time"

	"github.com/fleethost/fleet/primitives"
)

// lockState is one lock name. Its fields are guarded by Backend.locksMu. It outlives its
// holders, so that the fence never goes back.
type lockState struct {
	token string    // of the holder; "" when free
	until time.Time // end of the holder's lease
	fence int64     // of the last lease
}

func checkLock(name string) error { return primitives.CheckName("lock", name) }

// LockAcquire implements primitives.Lock. With wait > 0 it polls through
// primitives.RetryAcquire, in real time whatever the Clock.
func (b *Backend) LockAcquire(ctx context.Context, name string, hold, wait time.Duration) (primitives.LockLease, bool, error) {
	return b.LockAcquireWithin(ctx, name, hold, wait, primitives.NameQuota{})
}

// LockAcquireWithin implements primitives.Lock: the first lease of a name is counted
// against q, or refused past it, under the same lock as the lease.
func (b *Backend) LockAcquireWithin(ctx context.Context, name string, hold, wait time.Duration, q primitives.NameQuota) (primitives.LockLease, bool, error) {
	if err := checkLock(name); err != nil {
		return primitives.LockLease{}, false, err
	}
	if err := primitives.CheckPositive("hold", hold); err != nil {
		return primitives.LockLease{}, false, err
	}
	if err := primitives.CheckTTL("wait", wait); err != nil {
		return primitives.LockLease{}, false, err
	}
	rq, err := requestOf(ctx, "lock acquire", name, hold)
	if err != nil {
		return primitives.LockLease{}, false, err
	}
	var l primitives.LockLease
	ok, err := primitives.RetryAcquire(ctx, wait, func(context.Context) (bool, error) {
		if err := b.check(); err != nil {
			return false, err
		}
		var ok bool
		var err error
		l, ok, err = b.tryLock(name, hold, q, rq)
		return ok, err
	})
	if !ok || err != nil {
		return primitives.LockLease{}, false, err
	}
	return l, true, nil
}

// tryLock is one try of LockAcquireWithin: a lease once per request rq, whose repeat
// returns the first lease.
func (b *Backend) tryLock(name string, hold time.Duration, q primitives.NameQuota, rq *request) (primitives.LockLease, bool, error) {
	b.locksMu.Lock()
	defer b.locksMu.Unlock()
	now, root := b.clock.Now(), primitives.KVRoot(name)
	if l, ok, err := replay[primitives.LockLease](&b.lockReplays, now, "lock acquire", root, rq); ok || err != nil {
		return l, ok, err
	}
	st := b.locks[name]
	if st == nil {
		if err := b.lockNames.charge("lock", name, q); err != nil {
			return primitives.LockLease{}, false, err
		}
		st = &lockState{}
		b.locks[name] = st
	}
	if st.token != "" && now.Before(st.until) {
		return primitives.LockLease{}, false, nil
	}
	st.fence++
	st.token, st.until = primitives.NewToken(), now.Add(hold)
	l := primitives.LockLease{Lease: primitives.Lease{Token: st.token, Until: st.until}, Fence: st.fence}
	b.lockReplays.remember(now, root, rq, l)
	return l, true, nil
}

// LockRelease implements primitives.Lock.
func (b *Backend) LockRelease(ctx context.Context, name, token string) (bool, error) {
	if err := checkLock(name); err != nil {
		return false, err
	}
	rq, err := requestOf(ctx, "lock release", name, token)
	if err != nil {
		return false, err
	}
	if err := b.check(); err != nil {
		return false, err
	}
	b.locksMu.Lock()
	defer b.locksMu.Unlock()
	now, root := b.clock.Now(), primitives.KVRoot(name)
	if _, ok, err := replay[struct{}](&b.lockReplays, now, "lock release", root, rq); ok || err != nil {
		return ok, err
	}
	st := b.locks[name]
	if st == nil || st.token == "" || st.token != token || !now.Before(st.until) {
		return false, nil
	}
	st.token, st.until = "", time.Time{}
	b.lockReplays.remember(now, root, rq, struct{}{})
	return true, nil
}
