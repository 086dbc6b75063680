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
	fence int64     // of the last grant
}

func checkLock(name string) error { return primitives.CheckName("lock", name) }

// LockAcquire implements primitives.Lock. With wait > 0 it polls through
// primitives.RetryAcquire, in real time whatever the Clock.
func (b *Backend) LockAcquire(ctx context.Context, name string, hold, wait time.Duration) (primitives.Grant, bool, error) {
	return b.LockAcquireWithin(ctx, name, hold, wait, primitives.NameQuota{})
}

// LockAcquireWithin implements primitives.Lock: the first grant of a name is counted
// against q, or refused past it, under the same lock as the grant.
func (b *Backend) LockAcquireWithin(ctx context.Context, name string, hold, wait time.Duration, q primitives.NameQuota) (primitives.Grant, bool, error) {
	if err := checkLock(name); err != nil {
		return primitives.Grant{}, false, err
	}
	if err := primitives.CheckPositive("hold", hold); err != nil {
		return primitives.Grant{}, false, err
	}
	if err := primitives.CheckTTL("wait", wait); err != nil {
		return primitives.Grant{}, false, err
	}
	rq, err := requestOf(ctx, "lock acquire", name, hold)
	if err != nil {
		return primitives.Grant{}, false, err
	}
	var g primitives.Grant
	ok, err := primitives.RetryAcquire(ctx, wait, func(context.Context) (bool, error) {
		if err := b.check(); err != nil {
			return false, err
		}
		var ok bool
		var err error
		g, ok, err = b.tryLock(name, hold, q, rq)
		return ok, err
	})
	if !ok || err != nil {
		return primitives.Grant{}, false, err
	}
	return g, true, nil
}

// tryLock is one try of LockAcquireWithin: a grant once per request rq, whose repeat
// returns the first grant.
func (b *Backend) tryLock(name string, hold time.Duration, q primitives.NameQuota, rq *request) (primitives.Grant, bool, error) {
	b.locksMu.Lock()
	defer b.locksMu.Unlock()
	now, root := b.clock.Now(), primitives.KVRoot(name)
	if g, ok, err := replay[primitives.Grant](&b.lockReplays, now, "lock acquire", root, rq); ok || err != nil {
		return g, ok, err
	}
	st := b.locks[name]
	if st == nil {
		if err := b.lockNames.charge("lock", name, q); err != nil {
			return primitives.Grant{}, false, err
		}
		st = &lockState{}
		b.locks[name] = st
	}
	if st.token != "" && now.Before(st.until) {
		return primitives.Grant{}, false, nil
	}
	st.fence++
	st.token, st.until = primitives.NewToken(), now.Add(hold)
	g := primitives.Grant{Token: st.token, Fence: st.fence, Until: st.until}
	b.lockReplays.remember(now, root, rq, g)
	return g, true, nil
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
