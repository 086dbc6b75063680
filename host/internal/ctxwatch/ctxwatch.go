// Package ctxwatch stops a call when its context ends, for the cost of a timer's start
// and stop when the call ends first, which nearly every call does.
//
// A context.AfterFunc costs a call about 1.5 µs and seven allocations (the registration,
// and the children map and done channel of a context made for the call), more than a
// no-op guest call's whole cost. A Watch instead starts its one timer at each Arm, for
// After or the context's deadline, whichever is sooner; a call still armed when it fires
// is stopped there if its context has ended, and registers the AfterFunc if not. A call
// whose context ends in its first After is so stopped at most After late; one whose
// deadline passes, and one whose context ends later, at once (host/RATIONALE.md, "What
// does the sandbox cost?").
package ctxwatch

import (
	"context"
	"sync"
	"time"
)

// After is how long an armed call runs before it registers on its context.
const After = time.Millisecond

// Watch watches the context of one call at a time: a guest instance's export call, from
// Arm until the disarm it returns.
type Watch struct {
	stop, clear func() // immutable; run with mu held

	timer  *time.Timer // runs watch; made at the first Arm
	fireFn func()      // fire, bound once: a method value made per call is an allocation
	offFn  func()      // disarm, bound once for the same reason

	mu      sync.Mutex
	ctx     context.Context // the armed call's; nil when no call is armed
	after   func() bool     // stops the armed call's AfterFunc; nil until watch registers it
	stopped bool            // stop ran for the armed call
}

// New is the Watch whose stop ends the armed call, once, when its context ends, and
// whose clear undoes the stop when that call is disarmed. Each runs with the Watch's
// lock held, from the timer's goroutine, the AfterFunc's or the disarm's caller.
func New(stop, clear func()) *Watch {
	w := &Watch{stop: stop, clear: clear}
	w.fireFn, w.offFn = w.fire, w.disarm
	return w
}

// Arm stops the call under ctx when ctx ends, until the returned disarm runs. Arm does
// not ask ctx for its Done channel, which a context made for the call makes on the first
// ask: a context that never ends costs a call only the timer's start and stop.
func (w *Watch) Arm(ctx context.Context) (disarm func()) {
	wait := After
	if d, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(d))
	}
	w.mu.Lock()
	w.ctx = ctx
	if w.timer == nil {
		w.timer = time.AfterFunc(wait, w.watch)
	} else {
		w.timer.Reset(wait)
	}
	w.mu.Unlock()
	return w.offFn
}

// Stopped reports whether stop ran for the armed call.
func (w *Watch) Stopped() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stopped
}

// watch is the timer's: the armed call, if one still runs, is stopped if its context has
// ended, and otherwise stopped when it ends.
func (w *Watch) watch() {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.ctx == nil: // the call returned as the timer fired
	case w.ctx.Err() != nil:
		w.stopLocked()
	case w.after == nil:
		w.after = context.AfterFunc(w.ctx, w.fireFn)
	}
}

// fire is the AfterFunc's. An AfterFunc of an earlier call that had begun as that call
// was disarmed can run during a later one: so it stops the armed call only if that
// call's own context has ended.
func (w *Watch) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ctx != nil && w.ctx.Err() != nil {
		w.stopLocked()
	}
}

func (w *Watch) stopLocked() {
	if !w.stopped {
		w.stopped = true
		w.stop()
	}
}

// disarm ends the armed call's watch, and clears its stop if it was stopped.
func (w *Watch) disarm() {
	w.mu.Lock()
	w.ctx = nil
	w.timer.Stop()
	after := w.after
	w.after = nil
	if w.stopped {
		w.clear()
		w.stopped = false
	}
	w.mu.Unlock()
	if after != nil {
		after()
	}
}
