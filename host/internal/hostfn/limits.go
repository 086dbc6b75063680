package hostfn

import (
	"context"

	"github.com/fleethost/fleet/abi"
)

// The defaults of Limits: the one place they are written. The host applies them when it
// resolves a plugin's grant; host.Grant's doc lines and docs/operators.md's grants fields name
// them.
const (
	// DefaultMaxHostCalls is the host calls one guest call (a task, a tick) may make. The
	// example plugins make 1 to 10 per task (the cookie harvester: config_get, lock,
	// pool_list, http, pool_put, unlock, counter_incr); 1000 leaves two orders of
	// magnitude for a plugin that loops over a page of results, and stops a guest that
	// spins on the backend from making hundreds of thousands of round trips per call.
	DefaultMaxHostCalls = 1000
	// DefaultMaxReply is the largest reply envelope a host call produces, in bytes. It
	// holds the largest default HTTP response (a 4 MiB body is ~5.4 MiB in base64, plus
	// up to 1 MiB of headers), and caps what the host keeps for reply_fetch.
	DefaultMaxReply = 8 << 20
	// DefaultMaxPoolList is the largest limit a pool_list may ask for.
	DefaultMaxPoolList = 1000

	// MaxReplyCeiling is the largest MaxReply a grant may set: a reply's length crosses
	// the wire as an i32, and a guest's memory is at most 4 GiB.
	MaxReplyCeiling = 1 << 30

	// poolListDefault is the limit of a pool_list that names none (the guest SDK's doc
	// says 100), or MaxPoolList if that is smaller.
	poolListDefault = 100
)

// Limits are the caps on what one plugin's guest may send across the boundary and have
// sent back, from the plugin's resolved grant (every default filled in: a zero cap
// refuses every call it bounds). Immutable once the Grantee is made.
type Limits struct {
	// MaxPayload caps each payload, KV value, tags object and HTTP body a guest sends, in
	// bytes; 0 admits no payload.
	MaxPayload int
	// MaxHostCalls caps the host calls of one guest call (a task's fleet_handle, a
	// fleet_tick, an instance's _initialize); past it, every call answers LimitExceeded
	// until that guest call ends. reply_fetch is part of the call it fetches for and is
	// not counted.
	MaxHostCalls int
	// MaxReply caps one host call's reply envelope, in bytes; a larger reply is not kept
	// and the call answers LimitExceeded naming both sizes.
	MaxReply int
	// MaxPoolList caps the limit a pool_list may ask for: a larger one is a ValueError
	// (the guest asked for more than it may have, so it is told rather than silently
	// given less). A pool_list with no limit gets min(100, MaxPoolList).
	MaxPoolList int
}

// spend takes one host call from the budget of the guest call in flight, or refuses it
// once the budget is spent. The first refusal of each guest call is logged, rate-limited
// with the plugin's other refusals.
func (c *Core) spend(ctx context.Context, caller *Caller, op abi.Op) *abi.Error {
	limit := caller.Plugin.Limits.MaxHostCalls
	if caller.calls < limit {
		caller.calls++
		return nil
	}
	if caller.calls == limit {
		caller.calls++ // log once per guest call
		c.refused(ctx, caller, "host: host-call budget spent; every call answers LimitExceeded until this guest call ends",
			"op", string(op), "limit", limit)
	}
	return abi.Errorf(abi.LimitExceeded, "plugin %q has made the %d host calls one guest call may make (max_host_calls in the grants file)",
		caller.Plugin.Type, limit)
}

// checkReply refuses a reply envelope over the plugin's MaxReply.
func checkReply(caller *Caller, op abi.Op, reply []byte) *abi.Error {
	if limit := caller.Plugin.Limits.MaxReply; len(reply) > limit {
		return abi.Errorf(abi.LimitExceeded, "the reply of %s is %d bytes, limit %d (max_reply in the grants file)", op, len(reply), limit)
	}
	return nil
}
