package ctxwatch

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleethost/fleet/internal/testutil"
)

// counted is a Watch whose stop and clear count their runs.
type counted struct {
	*Watch
	stops, clears atomic.Int32
}

func newCounted() *counted {
	c := &counted{}
	c.Watch = New(func() { c.stops.Add(1) }, func() { c.clears.Add(1) })
	return c
}

// state reads the armed call's context and registration under the lock.
func (c *counted) state() (armed, registered bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ctx != nil, c.after != nil
}

// A call whose context ends while it is armed is stopped, once, whether the end finds it
// before its registration (the timer's watch sees the context ended) or after (its
// AfterFunc); its disarm clears the stop, and the next call starts unstopped.
func TestStopsOnCancel(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ready func(armed, registered bool) bool // cancel once it holds
	}{
		{"armed", func(armed, _ bool) bool { return armed }},
		{"registered", func(_, registered bool) bool { return registered }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCounted()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			disarm := c.Arm(ctx)
			testutil.WaitFor(t, 10*time.Second, "the call "+tc.name, func() bool { return tc.ready(c.state()) })
			cancel()
			testutil.WaitFor(t, 10*time.Second, "the stop", c.Stopped)
			disarm()
			if s, cl := c.stops.Load(), c.clears.Load(); s != 1 || cl != 1 {
				t.Fatalf("stops, clears = %d, %d; want 1, 1", s, cl)
			}
			if c.Stopped() {
				t.Fatal("Stopped after disarm = true, want false")
			}
		})
	}
}

// A call that ends before its context is never stopped, registers nothing within After,
// and its context's end afterwards (with the registration's AfterFunc, had there been
// one) stops no later call.
func TestNoStopAfterDisarm(t *testing.T) {
	c := newCounted()
	ctx, cancel := context.WithCancel(context.Background())
	disarm := c.Arm(ctx)
	if _, registered := c.state(); registered {
		t.Fatal("registered at Arm, want only after After")
	}
	disarm()
	next := c.Arm(context.Background())
	cancel()
	c.watch()
	c.fire() // an AfterFunc of the first call that ran late
	if c.Stopped() || c.stops.Load() != 0 {
		t.Fatalf("a later call stopped by an earlier call's context: stops = %d", c.stops.Load())
	}
	next()
}

// A deadline sooner than After stops the call: the timer waits for the deadline, not for
// After.
func TestStopsAtAShortDeadline(t *testing.T) {
	c := newCounted()
	ctx, cancel := context.WithTimeout(context.Background(), After/10)
	defer cancel()
	disarm := c.Arm(ctx)
	defer disarm()
	testutil.WaitFor(t, 10*time.Second, "the stop", c.Stopped)
	if ctx.Err() == nil {
		t.Fatal("stopped before the deadline")
	}
}
