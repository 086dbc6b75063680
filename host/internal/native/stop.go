package native

import (
	"context"
	"errors"
	"fmt"
	"sync"

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
// The global is set from context.AfterFunc's goroutine while the guest runs; the guest
// reads it with a plain load, as it reads any global. It is cleared when a call whose
// context ended after the guest returned comes back, so the instance stays usable.
type stopFlag struct {
	g api.MutableGlobal // the instance's stopGlobal

	mu   sync.Mutex
	call uint64 // counts arm calls; a stop of an earlier call finds it moved on
	set  bool   // the global holds 1
}

// errStopped wraps the error of a call that the stop global ended.
var errStopped = errors.New("the call was stopped at the end of its context")

// arm sets the global when ctx ends, until the returned disarm runs. The instance's
// goroutine arms each export call and disarms it when the call returns.
// A nil stopFlag (a module the rewriter did not rewrite, which runs under
// WithCloseOnContextDone) arms nothing.
func (f *stopFlag) arm(ctx context.Context) (disarm func()) {
	if f == nil || ctx.Done() == nil {
		return func() {}
	}
	f.mu.Lock()
	f.call++
	call := f.call
	f.mu.Unlock()
	stop := context.AfterFunc(ctx, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.call == call {
			f.g.Set(1)
			f.set = true
		}
	})
	return func() {
		if stop() {
			return // ctx did not end during the call
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		f.call++
		if f.set {
			f.g.Set(0)
			f.set = false
		}
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
