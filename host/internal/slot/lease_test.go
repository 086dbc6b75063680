package slot

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetratelabs/wazero/sys"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/internal/testutil"
)

// TestCallEndsBeforeItsLease: whatever CallTimeout says, a call's deadline is LeaseMargin
// before its task's lease ends, counted from before the claim was sent, so that the call
// is cut, and its task released by its own token, while no other slot can claim it.
func TestCallEndsBeforeItsLease(t *testing.T) {
	const lease, margin = 400 * time.Millisecond, 150 * time.Millisecond
	type call struct {
		entered, deadline time.Time
		hasDeadline       bool
	}
	var mu sync.Mutex
	var calls []call
	h := newHarness(t, func(ctx context.Context, in abi.HandleInput) ([]byte, error) {
		c := call{entered: time.Now()}
		c.deadline, c.hasDeadline = ctx.Deadline()
		mu.Lock()
		calls = append(calls, c)
		mu.Unlock()
		<-ctx.Done() // a guest that only the deadline stops
		return nil, ctx.Err()
	})
	h.params.CallTimeout = time.Hour
	h.params.LeaseMargin = margin
	h.params.MaxAttempts = 2
	h.push(`{}`)

	pump := NewPump(h.params.Backend, h.params.Queue, lease, h.params.MaxAttempts)
	p := h.params
	p.Pump = pump
	soft, stop := context.WithCancel(context.Background())
	pumpCtx, stopPump := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { pump.Run(pumpCtx) })
	wg.Go(func() {
		New(p).Run(soft, context.Background())
		stopPump()
	})
	testutil.WaitFor(t, 30*time.Second, "two iterations", func() bool { return len(h.finished()) >= 2 })
	stop()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	for i, c := range calls {
		// The claim was sent before the call began: its lease ends no sooner than
		// entered + lease, so the deadline must be no later than entered + lease - margin.
		if !c.hasDeadline || c.deadline.After(c.entered.Add(lease-margin)) {
			t.Errorf("call %d: deadline %v after it began, want at most %v (the lease %v less the margin %v), not the call timeout",
				i, c.deadline.Sub(c.entered), lease-margin, lease, margin)
		}
	}
	for i, it := range h.finished() {
		if it.Outcome != slotstate.Dead || !strings.Contains(it.Reason, "deadline") {
			t.Errorf("iteration %d = %+v, want dead at its deadline", i, it)
		}
		// Parked on the second death: the release went through with the claim's token,
		// before the lease ran out (a release after it fails and parks nothing).
		if want := i == 1; it.Parked != want {
			t.Errorf("iteration %d parked = %v, want %v: the release of a cut call must beat its lease", i, it.Parked, want)
		}
	}
}

// TestOnlyTheDeadlineIsADeadline: a guest whose call fails with wazero's deadline exit
// error before its deadline (proc_exit with that exit code) has not run past its
// deadline, and the slot does not say it has.
func TestOnlyTheDeadlineIsADeadline(t *testing.T) {
	h := newHarness(t, func(ctx context.Context, in abi.HandleInput) ([]byte, error) {
		return nil, sys.NewExitError(sys.ExitCodeDeadlineExceeded)
	})
	h.params.MaxAttempts = 1
	h.push(`{}`)
	h.run(func() bool { return len(h.finished()) == 1 })
	if it := h.finished()[0]; it.Outcome != slotstate.Dead || strings.Contains(it.Reason, "ran past its") {
		t.Errorf("iteration = %+v, want dead, not past its deadline", it)
	}
}
