package native

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tetratelabs/wazero/api"
)

// stopFlag stops an instance's export call when the call's context ends: it sets the
// rewriter's stop global, which every loop header of the guest's code tests (rewrite.go),
// so the guest traps at its next loop header or countdown check. It is what
// WithCloseOnContextDone does, without its costs: wazero's check exits the compiled code
// to Go at every loop header (about 30 ns, and a Go guest takes a loop header at every
// taken jump), and it starts a goroutine per export call to watch the context. See
// host/RATIONALE.md, "What does the sandbox cost?".
//
// A call does not register on its context at once: a context.AfterFunc costs a call
// about 1.5 µs and seven allocations (the registration, and the children map and done
// channel of a context made for the call), more than a no-op call's whole cost, and
// nearly every call ends sooner than a millisecond. Instead arm starts the instance's
// one timer, for watchAfter or the deadline, whichever is sooner; a call still running
// when it fires is stopped there if its context has ended, and registers the AfterFunc
// if not. A call whose context ends in its first watchAfter is so stopped at most
// watchAfter late; one whose deadline passes, and one whose context ends later, at once.
//
// The global is set from the timer's or the AfterFunc's goroutine while the guest runs;
// the guest reads it with a plain load, as it reads any global. It is cleared when a call
// whose context ended after the guest returned comes back, so the instance stays usable.
type stopFlag struct {
	g api.MutableGlobal // the instance's stopGlobal

	timer  *time.Timer // runs watch; made at the first arm
	fireFn func()      // fire, bound once: a method value made per call is an allocation
	offFn  func()      // disarm, bound once for the same reason

	mu    sync.Mutex
	ctx   context.Context // the armed call's; nil when no call is armed
	after func() bool     // stops the armed call's AfterFunc; nil until watch registers it
	set   bool            // the global holds 1
}

// watchAfter is how long a call runs before it registers on its context (stopFlag).
const watchAfter = time.Millisecond

// errStopped wraps the error of a call that the stop global ended.
var errStopped = errors.New("the call was stopped at the end of its context")

// newStopFlag is the stopFlag of an instance whose stop global is g.
func newStopFlag(g api.MutableGlobal) *stopFlag {
	f := &stopFlag{g: g}
	f.fireFn, f.offFn = f.fire, f.disarm
	return f
}

// noDisarm is the disarm of a call that armed nothing.
func noDisarm() {}

// arm sets the global when ctx ends, until the returned disarm runs. The instance's
// goroutine arms each export call and disarms it when the call returns.
// A nil stopFlag (a module the rewriter did not rewrite, which runs under
// WithCloseOnContextDone) arms nothing. arm does not ask ctx for its Done channel,
// which a context made for the call makes on the first ask: a context that never ends
// costs a call only the timer's start and stop.
func (f *stopFlag) arm(ctx context.Context) (disarm func()) {
	if f == nil {
		return noDisarm
	}
	wait := watchAfter
	if d, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(d))
	}
	f.mu.Lock()
	f.ctx = ctx
	if f.timer == nil {
		f.timer = time.AfterFunc(wait, f.watch)
	} else {
		f.timer.Reset(wait)
	}
	f.mu.Unlock()
	return f.offFn
}

// watch is the timer's: the armed call, if one still runs, is stopped if its context has
// ended, and otherwise stopped when it ends.
func (f *stopFlag) watch() {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.ctx == nil: // the call returned as the timer fired
	case f.ctx.Err() != nil:
		f.stopLocked()
	case f.after == nil:
		f.after = context.AfterFunc(f.ctx, f.fireFn)
	}
}

// fire is the AfterFunc's. An AfterFunc of an earlier call that had begun as that call
// was disarmed can run during a later one: so it stops the armed call only if that
// call's own context has ended.
func (f *stopFlag) fire() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ctx != nil && f.ctx.Err() != nil {
		f.stopLocked()
	}
}

// stopLocked sets the global; f.mu is held.
func (f *stopFlag) stopLocked() {
	f.g.Set(1)
	f.set = true
}

// disarm ends the armed call's watch and clears the global if the call's context ended.
func (f *stopFlag) disarm() {
	f.mu.Lock()
	f.ctx = nil
	f.timer.Stop()
	after := f.after
	f.after = nil
	if f.set {
		f.g.Set(0)
		f.set = false
	}
	f.mu.Unlock()
	if after != nil {
		after()
	}
}

// wrap returns err, the error of a call under ctx, as the stop's when the stop global
// ended the call: errStopped and ctx's error wrap the guest's trap, so that
// errors.Is(err, context.DeadlineExceeded) tells a deadline as it does for a sleep cut by
// one.
func (f *stopFlag) wrap(ctx context.Context, err error) error {
	if f == nil || err == nil {
		return err
	}
	f.mu.Lock()
	set := f.set
	f.mu.Unlock()
	if !set {
		return err
	}
	return fmt.Errorf("%w (%w): %w", errStopped, ctx.Err(), err)
}
