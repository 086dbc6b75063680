package hostfn

import (
	"sync"
	"time"
)

// The rates of the per-plugin log limiters (NewGrantee): a burst at once, then one line per
// interval. 10 lines a second per plugin and kind is enough to see what a plugin does;
// a flood is told by the "suppressed" counts.
const (
	logEvery, logBurst       = 100 * time.Millisecond, 50 // the log op
	eventEvery, eventBurst   = 100 * time.Millisecond, 20 // a task's or guest call's lines: parked, died...
	outputEvery, outputBurst = 100 * time.Millisecond, 20 // a guest's stdout and stderr lines
	denyEvery, denyBurst     = time.Second, 5             // refused calls (host/RATIONALE.md, "What may a plugin touch?")
)

// Limiter lets through a burst of events and then one per interval, counting what it
// drops so that the next line can say so. It is the rate limit of every log line a guest
// can cause (STYLE 30). Safe for concurrent use.
type Limiter struct {
	every time.Duration // immutable
	burst float64       // immutable

	mu      sync.Mutex
	tokens  float64   // guarded by mu
	last    time.Time // guarded by mu
	dropped int       // guarded by mu
}

// NewEventLimiter is the limiter of the lines a plugin's guests cause outside a host
// call (Plugin.Events).
func NewEventLimiter() *Limiter { return NewLimiter(eventEvery, eventBurst) }

// NewLimiter allows burst events at once and one more per every.
func NewLimiter(every time.Duration, burst int) *Limiter {
	return &Limiter{every: every, burst: float64(burst), tokens: float64(burst)}
}

// Allow reports whether an event may pass now and, when it may, how many were dropped
// since the last one that passed.
func (l *Limiter) Allow() (ok bool, dropped int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if !l.last.IsZero() {
		l.tokens += float64(now.Sub(l.last)) / float64(l.every)
		if l.tokens > l.burst {
			l.tokens = l.burst
		}
	}
	l.last = now
	if l.tokens < 1 {
		l.dropped++
		return false, 0
	}
	l.tokens--
	dropped, l.dropped = l.dropped, 0
	return true, dropped
}
