package memory

import (
	"sync"
	"testing"
	"time"
)

// fakeClock is a primitives.Clock that moves only when told to.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// newFake returns a Backend on a fake clock.
func newFake(t testing.TB) (*Backend, *fakeClock) {
	clk := newFakeClock()
	b := New(Options{Clock: clk})
	t.Cleanup(func() { _ = b.Close() })
	return b, clk
}
