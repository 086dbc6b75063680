package hostfn

import (
	"context"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/primitives"
)

func (c *Core) lockName(ctx context.Context, caller *Caller, op abi.Op, name string) *abi.Error {
	if e := checkName("lock", name); e != nil {
		return e
	}
	if reserved(name) || !caller.Plugin.Access.Locks.Match(name) {
		return c.deny(ctx, caller, op, "lock", name)
	}
	return nil
}

// lockAcquire: lock_acquire. The wait is bounded by the guest call's deadline too. A
// lease counts against the plugin's quota of locks held in its root (Quota) until it is
// released or its hold ends; past it the call is LimitExceeded and takes nothing.
//
//	request:  {"name": "scraper:harvest", "hold_ms": 30000, "wait_ms": 2000}
//	reply:    {"acquired": true, "token": "...", "fence": 7, "until_ms": 1700000000000}
func (c *Core) lockAcquire(ctx context.Context, caller *Caller, req []byte) (any, *abi.Error) {
	var r abi.LockAcquireRequest
	if e := decode(req, &r); e != nil {
		return nil, e
	}
	if e := c.lockName(ctx, caller, abi.OpLockAcquire, r.Name); e != nil {
		return nil, e
	}
	hold, e := holdMs(r.HoldMs)
	if e != nil {
		return nil, e
	}
	wait, e := abi.Millis("wait_ms", r.WaitMs)
	if e != nil {
		return nil, e
	}
	q := primitives.NameQuota{Owner: caller.Plugin.Type, Max: caller.Plugin.Quota.LockNames}
	l, ok, err := c.backend.LockAcquire(ctx, r.Name, hold, wait, q)
	if err != nil {
		return nil, quotaError(err, lockFields)
	}
	if !ok {
		return abi.LockAcquireReply{Acquired: false}, nil
	}
	return abi.LockAcquireReply{Acquired: true, Token: l.Token, Fence: l.Fence, UntilMs: l.Until.UnixMilli()}, nil
}

// lockRelease: lock_release.
//
//	request:  {"name": "scraper:harvest", "token": "..."}
//	reply:    {"released": true}
func (c *Core) lockRelease(ctx context.Context, caller *Caller, req []byte) (any, *abi.Error) {
	var r abi.LockReleaseRequest
	if e := decode(req, &r); e != nil {
		return nil, e
	}
	if e := c.lockName(ctx, caller, abi.OpLockRelease, r.Name); e != nil {
		return nil, e
	}
	released, err := c.backend.LockRelease(ctx, r.Name, r.Token)
	if err != nil {
		return nil, fromBackend(err)
	}
	return abi.LockReleaseReply{Released: released}, nil
}
