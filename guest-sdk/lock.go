package fleet

import (
	"time"

	"github.com/fleethost/fleet/abi"
)

// LockLease is a fleet-wide lock that this caller holds until Release or until it
// expires.
type LockLease struct {
	Name  string
	Fence int64     // the fencing token: strictly increasing across all leases of Name
	Until time.Time // when the lock expires unless released first

	token string
}

// Lock takes the fleet-wide lock name for at most hold, waiting up to wait for it (0:
// give up at once when another holder has it). It returns nil, nil when the lock was not
// acquired — someone else is doing the work — and an error only when the call failed.
//
//	held, err := fleet.Lock("harvest:"+site, 30*time.Second, 0)
//	if err != nil { return fleet.Fail(err) }
//	if held == nil { return fleet.Done() } // another slot is on it
//	defer held.Release()
//
// Choose hold a little longer than the work: if the slot dies, the lock frees itself
// after hold. While the host waits, this guest is blocked.
func Lock(name string, hold, wait time.Duration) (*LockLease, error) {
	var reply abi.LockAcquireReply
	if err := send(abi.OpLockAcquire, abi.LockAcquireRequest{Name: name, HoldMs: millis(hold), WaitMs: millis(wait)}.AppendJSON, &reply); err != nil {
		return nil, err
	}
	if !reply.Acquired {
		return nil, nil
	}
	return &LockLease{Name: name, Fence: reply.Fence, Until: fromMillis(reply.UntilMs), token: reply.Token}, nil
}

// Release frees the lock. It returns false (not an error) when the lock had already
// expired, and maybe been leased since to another holder, whose lock it leaves alone.
func (l *LockLease) Release() (bool, error) {
	var reply abi.LockReleaseReply
	err := send(abi.OpLockRelease, abi.LockReleaseRequest{Name: l.Name, Token: l.token}.AppendJSON, &reply)
	return reply.Released, err
}
