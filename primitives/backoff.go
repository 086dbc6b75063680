package primitives

import (
	"context"
	"math/rand/v2"
	"time"
)

// Clock tells the time. Backends take one so that lease logic can be tested with a
// simulated clock; real-TTL tests prove expiry end to end.
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// Backoff is an exponential backoff with jitter: the nth wait (n from 1) is at most
// Base × Factor^(n-1), capped at Max, and drawn uniformly from the upper half of that
// bound, [d/2, d], so that the waiters a failure made at one instant do not come back at
// one instant. Factor 1 waits about Base each time.
type Backoff struct {
	Base   time.Duration // the first wait's bound; > 0
	Factor float64       // how much each wait's bound grows; >= 1
	Max    time.Duration // the most any wait is; >= Base
}

// Bound is the nth wait's bound before jitter (n < 1 counts as 1): Base × Factor^(n-1),
// at most Max.
func (b Backoff) Bound(n int) time.Duration {
	d := float64(b.Base)
	for i := 1; i < n && d < float64(b.Max); i++ {
		d *= b.Factor
	}
	return time.Duration(min(d, float64(b.Max)))
}

// Wait is the nth wait: Bound(n) with jitter, in [Bound(n)/2, Bound(n)].
func (b Backoff) Wait(n int) time.Duration {
	d := b.Bound(n)
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// acquireBackoff is how RetryAcquire waits between tries.
var acquireBackoff = Backoff{Base: 5 * time.Millisecond, Factor: 2, Max: 250 * time.Millisecond}

// RetryAcquire calls try until it succeeds, fails, or wait has passed, sleeping between
// attempts with jittered exponential backoff (acquireBackoff: from 5ms, doubling, capped
// at 250ms, each sleep drawn uniformly from [d/2, d] and never past the deadline). wait 0
// means exactly one try. Every backend's LockAcquire uses it, so that the waiting policy
// is one piece of code. A cancelled ctx ends the wait with ctx.Err() and leaves nothing
// held.
func RetryAcquire(ctx context.Context, wait time.Duration, try func(context.Context) (bool, error)) (bool, error) {
	deadline := time.Now().Add(wait)
	for n := 1; ; n++ {
		ok, err := try(ctx)
		if ok || err != nil {
			return ok, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false, nil
		}
		t := time.NewTimer(min(acquireBackoff.Wait(n), left))
		select {
		case <-ctx.Done():
			t.Stop()
			return false, ctx.Err()
		case <-t.C:
		}
	}
}
