package slot

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/primitives/memory"
)

// TestFailBacksOff: a failed attempt, and a death, hand the task back delayed by the
// backoff of the attempts it made: on a backend whose clock stands still while the slot
// runs, the task is not claimable before half its bound has passed and is once the
// bound has, and its next attempt's bound is Factor times the first's.
func TestFailBacksOff(t *testing.T) {
	for _, tt := range []struct {
		name    string
		answer  func() ([]byte, error)
		outcome slotstate.Outcome
	}{
		{"fail", func() ([]byte, error) { return result(abi.HandleResult{Outcome: abi.OutcomeFail, Reason: "nope"}), nil }, slotstate.Failed},
		{"trap", func() ([]byte, error) { return nil, errors.New("wasm error: unreachable") }, slotstate.Died},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clk := testutil.NewClock()
			h := newHarness(t, func(context.Context, abi.HandleInput) ([]byte, error) { return tt.answer() })
			b := memory.New(memory.Options{Clock: clk})
			t.Cleanup(func() { b.Close() })
			h.b, h.params.Backend = b, b
			h.params.MaxAttempts = 5
			h.params.Backoff = primitives.Backoff{Base: time.Hour, Factor: 3, Max: 100 * time.Hour}
			h.push(`{}`)
			for attempt, bound := range []time.Duration{time.Hour, 3 * time.Hour} {
				h.run(func() bool { return len(h.finished()) == attempt+1 && h.stats().InFlight == 0 })
				if s := h.stats(); s.Depth != 1 {
					t.Fatalf("after attempt %d: stats %+v, want the task waiting", attempt+1, s)
				}
				// The iteration says the backoff the task waits, inline with its outcome.
				if it := h.finished()[attempt]; it.Backoff < bound/2 || it.Backoff > bound || it.Outcome != tt.outcome {
					t.Fatalf("attempt %d = %s backoff %v, want %s with a backoff in [%v, %v]", attempt+1, it.Outcome, it.Backoff, tt.outcome, bound/2, bound)
				}
				clk.Advance(bound/2 - time.Millisecond)
				if c, ok, err := b.QueueClaim(context.Background(), "q", time.Minute, 0); err != nil || ok {
					t.Fatalf("claim %v before half the bound %v after attempt %d = %+v %v %v, want nothing", bound/2, bound, attempt+1, c, ok, err)
				}
				clk.Advance(bound/2 + time.Millisecond)
			}
			h.run(func() bool { return len(h.finished()) == 3 })
			if fin := h.finished(); fin[2].Parked {
				t.Errorf("third attempt parked at MaxAttempts 5: %+v", fin[2])
			}
		})
	}
}

// TestFailedDelay: the delay of a failed attempt is Backoff.Wait of the attempts made, in
// the upper half of its bound, and at most Max.
func TestFailedDelay(t *testing.T) {
	s := New(Params{Backoff: primitives.Backoff{Base: time.Second, Factor: 2, Max: 5 * time.Minute}, MaxAttempts: 5})
	for attempts, bound := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second, 10: 5 * time.Minute, 100: 5 * time.Minute} {
		for range 20 {
			r := s.failed(claim{TaskLease: primitives.TaskLease{Task: primitives.Task{Attempts: attempts}}}, "x")
			if r.Delay < bound/2 || r.Delay > bound || r.MaxAttempts != 5 || r.Refund {
				t.Fatalf("failed at attempt %d = %+v, want a delay in [%v, %v] spending the attempt", attempts, r, bound/2, bound)
			}
		}
	}
}

// TestParkNow: park parks the task at its first attempt, with the guest's reason, however
// many attempts are left, and says the plugin parked it.
func TestParkNow(t *testing.T) {
	h := newHarness(t, func(context.Context, abi.HandleInput) ([]byte, error) {
		return result(abi.HandleResult{Outcome: abi.OutcomePark, Reason: "the page is gone"}), nil
	})
	h.params.MaxAttempts = 10
	h.push(`{}`)
	h.run(func() bool { return h.stats().Parked == 1 })
	fin := h.finished()
	if len(fin) != 1 || fin[0].Outcome != slotstate.Parked || !fin[0].Parked || !fin[0].ParkedByPlugin || fin[0].Reason != "the page is gone" {
		t.Fatalf("iterations = %+v, want one, parked by the guest with its reason", fin)
	}
	ps, err := h.b.QueueParked(context.Background(), "q", 0)
	if err != nil || len(ps) != 1 || ps[0].LastError != "the page is gone" || ps[0].Attempts != 1 {
		t.Fatalf("parked = %+v, %v; want the task at attempt 1 with the guest's reason", ps, err)
	}
}

// TestHandBackAlert: a task handed back again and again counts its hand-backs, and each
// hand-back past HandBackAlert says so; a fail is no hand-back.
func TestHandBackAlert(t *testing.T) {
	var (
		mu   sync.Mutex
		seen []int // the hand-backs each call's input says
	)
	h := newHarness(t, func(_ context.Context, in abi.HandleInput) ([]byte, error) {
		mu.Lock()
		seen = append(seen, in.Task.HandBacks)
		mu.Unlock()
		if in.Iteration == 3 {
			return result(abi.HandleResult{Outcome: abi.OutcomeFail, Reason: "once"}), nil
		}
		return result(abi.HandleResult{Outcome: abi.OutcomeRetry, RetryAfterMs: 1}), nil
	})
	h.params.HandBackAlert = 3
	h.push(`{}`)
	h.run(func() bool { return len(h.finished()) >= 6 })
	want := []struct {
		handBacks int
		over      bool
	}{{1, false}, {2, false}, {0, false}, {3, false}, {4, true}, {5, true}}
	for i, it := range h.finished()[:6] {
		if it.HandBacks != want[i].handBacks || it.OverAlert != want[i].over {
			t.Errorf("iteration %d: hand-backs %d over %v, want %d %v", i+1, it.HandBacks, it.OverAlert, want[i].handBacks, want[i].over)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []int{0, 1, 2, 2, 3, 4}; !slices.Equal(seen[:6], want) {
		t.Errorf("the guest saw hand-backs %v, want %v", seen[:6], want)
	}
}
