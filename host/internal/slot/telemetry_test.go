package slot

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/slotstate"
)

// TestParked: Parked says whether the release parked the task, whatever the outcome: a
// death that spends the budget stays dead (it drives the backoff) with Parked set, so
// that telemetry can say the task is waiting for the operator.
func TestParked(t *testing.T) {
	tests := []struct {
		name   string
		answer func() ([]byte, error)
		want   []slotstate.Iteration // Outcome and Parked, per attempt; MaxAttempts 3
	}{
		{"done", func() ([]byte, error) { return result(abi.HandleResult{Outcome: abi.OutcomeDone}), nil },
			[]slotstate.Iteration{{Outcome: slotstate.Done}}},
		{"retry", func() ([]byte, error) {
			return result(abi.HandleResult{Outcome: abi.OutcomeRetry, RetryAfterMs: 1}), nil
		},
			// A retry refunds its attempt: never parked, however often.
			[]slotstate.Iteration{{Outcome: slotstate.Retried}, {Outcome: slotstate.Retried}, {Outcome: slotstate.Retried}, {Outcome: slotstate.Retried}}},
		{"trap", func() ([]byte, error) { return nil, errors.New("wasm error: unreachable") },
			[]slotstate.Iteration{{Outcome: slotstate.Died}, {Outcome: slotstate.Died}, {Outcome: slotstate.Died, Parked: true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, func(context.Context, abi.HandleInput) ([]byte, error) { return tt.answer() })
			h.push(`{}`)
			// A task that never parks (retry) goes on being claimed: look at the first ones.
			h.run(func() bool { return len(h.finished()) >= len(tt.want) && h.stats().InFlight == 0 })
			for i, it := range h.finished()[:len(tt.want)] {
				if it.Outcome != tt.want[i].Outcome || it.Parked != tt.want[i].Parked {
					t.Errorf("attempt %d = %s parked %v, want %s parked %v", i+1, it.Outcome, it.Parked, tt.want[i].Outcome, tt.want[i].Parked)
				}
			}
		})
	}
}

// TestPausedRefreshes: a paused slot says draining on every poll, as an idle one says
// idle, so that the presence it feeds never goes stale by more than a poll.
func TestPausedRefreshes(t *testing.T) {
	h := newHarness(t, func(context.Context, abi.HandleInput) ([]byte, error) {
		return result(abi.HandleResult{Outcome: abi.OutcomeDone}), nil
	})
	var paused atomic.Bool
	paused.Store(true)
	h.params.Paused = paused.Load
	draining := func() int {
		h.mu.Lock()
		defer h.mu.Unlock()
		n := 0
		for _, e := range h.events {
			if e.Kind == slotstate.Paused {
				n++
			}
		}
		return n
	}
	h.run(func() bool { return draining() >= 3 })
}
