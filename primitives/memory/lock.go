package memory

import (
	"context"
	"time"

	"github.com/fleethost/fleet/primitives"
)

// lockState is one held lock. Its fields are guarded by Backend.locksMu. It lives in
// Backend.locks from its lease until its release or, once its hold has ended, the next
// acquire: a lock keeps nothing past its hold, since its fence comes from its root's
// sequence (Backend.lockFences).
type lockState struct {
	name  string    // immutable
	owner string    // immutable: the NameQuota.Owner it counts against, "" for none
	token string    // immutable: the holder's
	until time.Time // immutable: end of the holder's lease
	fence int64     // immutable: the lease's fencing token
	node  node      // in Backend.lockTTL
}

func checkLock(name string) error { return primitives.CheckName("lock", name) }

// LockAcquire implements primitives.Lock. With wait > 0 it polls through
// primitives.RetryAcquire, in real time whatever the Clock. The lease is counted against
// q, or refused past it, under the same lock as the lease.
func (b *Backend) LockAcquire(ctx context.Context, name string, hold, wait time.Duration, q primitives.NameQuota) (primitives.LockLease, bool, error) {
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

// tryLock is one try of LockAcquire: a lease once per request rq, whose repeat
// returns the first lease.
func (b *Backend) tryLock(name string, hold time.Duration, q primitives.NameQuota, rq *request) (primitives.LockLease, bool, error) {
	b.locksMu.Lock()
	defer b.locksMu.Unlock()
	now, root := b.clock.Now(), primitives.KVRoot(name)
	if l, ok, err := replay[primitives.LockLease](&b.lockReplays, now, "lock acquire", root, rq); ok || err != nil {
		return l, ok, err
	}
	for st, ok := b.lockTTL.popDue(now); ok; st, ok = b.lockTTL.popDue(now) {
		b.dropLock(st)
	}
	if b.locks[name] != nil {
		return primitives.LockLease{}, false, nil
	}
	held := kvLedger{root, q.Owner}
	if q.Owner != "" && q.Max > 0 && b.locksHeld[held] >= q.Max {
		return primitives.LockLease{}, false, primitives.NamesExceeded("lock", q, root)
	}
	st := &lockState{name: name, owner: q.Owner, token: primitives.NewToken(), until: now.Add(hold)}
	b.locks[name] = st
	b.lockTTL.push(st, st.until, 0)
	if q.Owner != "" {
		b.locksHeld[held]++
	}
	b.lockFences[root]++
	st.fence = b.lockFences[root]
	l := primitives.LockLease{Lease: primitives.Lease{Token: st.token, Until: st.until}, Fence: st.fence}
	b.lockReplays.remember(now, root, rq, l)
	return l, true, nil
}

// dropLock forgets a lock released or past its hold, and gives it back to its owner's
// quota. The caller holds locksMu and has taken st out of lockTTL.
func (b *Backend) dropLock(st *lockState) {
	delete(b.locks, st.name)
	if st.owner == "" {
		return
	}
	held := kvLedger{primitives.KVRoot(st.name), st.owner}
	if b.locksHeld[held]--; b.locksHeld[held] == 0 {
		delete(b.locksHeld, held)
	}
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
	if st == nil || st.token != token || !now.Before(st.until) {
		return false, nil
	}
	b.lockTTL.remove(st)
	b.dropLock(st)
	b.lockReplays.remember(now, root, rq, struct{}{})
	return true, nil
}

// LockShow implements primitives.Lock.
func (b *Backend) LockShow(ctx context.Context, name string) (primitives.LockHolder, bool, error) {
	if err := checkLock(name); err != nil {
		return primitives.LockHolder{}, false, err
	}
	if err := b.check(); err != nil {
		return primitives.LockHolder{}, false, err
	}
	b.locksMu.Lock()
	defer b.locksMu.Unlock()
	st := b.locks[name]
	if st == nil || !b.clock.Now().Before(st.until) {
		return primitives.LockHolder{}, false, nil
	}
	return primitives.LockHolder{Owner: st.owner, Fence: st.fence, Until: st.until}, true, nil
}
