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

// RetryAcquire calls try until it succeeds, fails, or wait has passed, sleeping between
// attempts with jittered exponential backoff (from 5ms, doubling, capped at 250ms, each
// sleep drawn uniformly from [d/2, d) and never past the deadline). wait 0 means exactly
// one try. Every backend's LockAcquire uses it, so that the waiting policy is one piece of
// code. A cancelled ctx ends the wait with ctx.Err() and leaves nothing held.
func RetryAcquire(ctx context.Context, wait time.Duration, try func(context.Context) (bool, error)) (bool, error) {
	deadline := time.Now().Add(wait)
	d := 5 * time.Millisecond
	for {
		ok, err := try(ctx)
		if ok || err != nil {
			return ok, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false, nil
		}
		sleep := d/2 + rand.N(d/2)
		if sleep > left {
			sleep = left
		}
		t := time.NewTimer(sleep)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, ctx.Err()
		case <-t.C:
		}
		if d < 250*time.Millisecond {
			d *= 2
		}
	}
}
