package testutil

import (
	"sync"
	"time"
)

// Clock is a primitives.Clock that moves only when told to, for the lease and delay
// arithmetic of a memory backend (memory.Options.Clock) under test. Safe for concurrent
// use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock at a fixed instant.
func NewClock() *Clock { return &Clock{now: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
