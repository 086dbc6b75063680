package native

import (
	"context"
	"errors"
	"fmt"

	"github.com/tetratelabs/wazero/api"

	"github.com/fleethost/fleet/host/internal/ctxwatch"
)

// stopFlag stops an instance's export call when the call's context ends: it sets the
// rewriter's stop global, which every loop header of the guest's code tests (rewrite.go),
// so the guest traps at its next loop header or countdown check. It is what
// WithCloseOnContextDone does, without its costs: wazero's check exits the compiled code
// to Go at every loop header (about 30 ns, and a Go guest takes a loop header at every
// taken jump), and it starts a goroutine per export call to watch the context. A call
// registers on its context only if it runs past ctxwatch.After. See host/RATIONALE.md,
// "What does the sandbox cost?".
//
// The global is set from the watch's goroutine while the guest runs; the guest reads it
// with a plain load, as it reads any global. It is cleared when a call whose context
// ended after the guest returned comes back, so the instance stays usable.
type stopFlag struct {
	g api.MutableGlobal // the instance's stopGlobal
	w *ctxwatch.Watch
}

// errStopped wraps the error of a call that the stop global ended.
var errStopped = errors.New("the call was stopped at the end of its context")

// newStopFlag is the stopFlag of an instance whose stop global is g.
func newStopFlag(g api.MutableGlobal) *stopFlag {
	return &stopFlag{g: g, w: ctxwatch.New(func() { g.Set(1) }, func() { g.Set(0) })}
}

// noDisarm is the disarm of a call that armed nothing.
func noDisarm() {}

// arm sets the global when ctx ends, until the returned disarm runs. The instance's
// goroutine arms each export call and disarms it when the call returns.
// A nil stopFlag (a module the rewriter did not rewrite, which runs under
// WithCloseOnContextDone) arms nothing.
func (f *stopFlag) arm(ctx context.Context) (disarm func()) {
	if f == nil {
		return noDisarm
	}
	return f.w.Arm(ctx)
}

// wrap returns err, the error of a call under ctx, as the stop's when the stop global
// ended the call: errStopped and ctx's error wrap the guest's trap, so that
// errors.Is(err, context.DeadlineExceeded) tells a deadline as it does for a sleep cut by
// one.
func (f *stopFlag) wrap(ctx context.Context, err error) error {
	if f == nil || err == nil {
		return err
	}
	if !f.w.Stopped() {
		return err
	}
	return fmt.Errorf("%w (%w): %w", errStopped, ctx.Err(), err)
}
