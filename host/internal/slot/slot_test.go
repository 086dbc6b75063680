package slot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/hostfn"
	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/primitives/memory"
)

// fakeGuest answers each call with what its script returns.
type fakeGuest struct {
	handle func(ctx context.Context, in abi.HandleInput) ([]byte, error)
	closed *atomic.Int64
}

func (g *fakeGuest) Handle(ctx context.Context, input []byte) ([]byte, error) {
	var in abi.HandleInput
	if err := json.Unmarshal(input, &in); err != nil {
		return nil, err
	}
	return g.handle(ctx, in)
}

func (g *fakeGuest) Tick(ctx context.Context, input []byte) ([]byte, error) {
	return g.handle(ctx, abi.HandleInput{})
}

func (g *fakeGuest) Close(context.Context) error {
	g.closed.Add(1)
	return nil
}

func result(r abi.HandleResult) []byte {
	b, _ := json.Marshal(r)
	return b
}

type harness struct {
	t      *testing.T
	b      primitives.Backend
	made   atomic.Int64
	closed atomic.Int64
	mu     sync.Mutex
	events []slotstate.Event
	params Params
	handle func(ctx context.Context, in abi.HandleInput) ([]byte, error)
}

func newHarness(t *testing.T, handle func(ctx context.Context, in abi.HandleInput) ([]byte, error)) *harness {
	testutil.CheckGoroutines(t)
	b := memory.New(memory.Options{})
	t.Cleanup(func() { b.Close() })
	h := &harness{t: t, b: b, handle: handle}
	h.params = Params{
		Name: "fake/0", Mode: abi.ModeBatch, Queue: "q", Backend: b,
		MaxAttempts: 3, Poll: time.Millisecond,
		CallTimeout: time.Minute, RetryDelay: time.Millisecond,
		BackoffMin: time.Millisecond, BackoffMax: 4 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Observe: func(e slotstate.Event) {
			h.mu.Lock()
			h.events = append(h.events, e)
			h.mu.Unlock()
		},
		NewGuest: func(context.Context) (Guest, error) {
			h.made.Add(1)
			return &fakeGuest{handle: h.handle, closed: &h.closed}, nil
		},
	}
	return h
}

// start runs the slot, with a Pump of its own as the host gives each plugin, until soft
// ends; done is closed when both have returned.
func (h *harness) start(soft, hard context.Context) (done <-chan struct{}) {
	p := h.params
	pumpCtx, stopPump := context.WithCancel(context.Background())
	p.Pump = NewPump(pumpCtx, p.Backend, p.Queue, time.Minute, p.MaxAttempts)
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		defer stopPump()
		New(p).Run(soft, hard)
	}()
	return ran
}

// run runs the slot until until() holds, then stops it (soft), waiting for Run.
func (h *harness) run(until func() bool) {
	h.t.Helper()
	soft, stop := context.WithCancel(context.Background())
	hard, cut := context.WithCancel(context.Background())
	defer cut()
	done := h.start(soft, hard)
	deadline := time.Now().Add(30 * time.Second)
	for !until() {
		if time.Now().After(deadline) {
			stop()
			<-done
			h.t.Fatal("timed out")
		}
		time.Sleep(time.Millisecond)
	}
	stop()
	<-done
}

// cutMidCall starts the slot and, once its call is under way (started is closed),
// drains it and cuts the drain at once, as a drain deadline that has passed does; it
// returns when Run has.
func (h *harness) cutMidCall(started <-chan struct{}) {
	soft, stop := context.WithCancel(context.Background())
	hard, cut := context.WithCancel(context.Background())
	done := h.start(soft, hard)
	<-started
	stop()
	cut()
	<-done
}

func (h *harness) finished() []slotstate.Iteration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return finished(h.events)
}

// finished is the iterations that events say finished, in order.
func finished(events []slotstate.Event) []slotstate.Iteration {
	var out []slotstate.Iteration
	for _, e := range events {
		if e.Kind == slotstate.Finished {
			out = append(out, *e.Iteration)
		}
	}
	return out
}

func (h *harness) push(payload string) {
	if _, _, err := h.b.QueuePush(context.Background(), "q", []byte(payload), primitives.QueuePushOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) stats() primitives.QueueStats {
	s, err := h.b.QueueStats(context.Background(), "q")
	if err != nil {
		h.t.Fatal(err)
	}
	return s
}

func TestOutcomes(t *testing.T) {
	tests := []struct {
		name     string
		answer   func(in abi.HandleInput) ([]byte, error)
		outcomes []slotstate.Outcome // per claim, MaxAttempts 3
		phases   []slotstate.Phase
		stats    primitives.QueueStats
	}{
		{"done", func(abi.HandleInput) ([]byte, error) { return result(abi.HandleResult{Outcome: abi.OutcomeDone}), nil },
			[]slotstate.Outcome{slotstate.Done}, []slotstate.Phase{slotstate.Handle, slotstate.Ack}, primitives.QueueStats{}},
		{"retry", func(abi.HandleInput) ([]byte, error) {
			return result(abi.HandleResult{Outcome: abi.OutcomeRetry, RetryAfterMs: 1}), nil
		}, // a retry refunds its attempt: twice MaxAttempts hand-backs, and the task still waits
			[]slotstate.Outcome{slotstate.Retried, slotstate.Retried, slotstate.Retried, slotstate.Retried, slotstate.Retried, slotstate.Retried},
			[]slotstate.Phase{slotstate.Handle, slotstate.Release}, primitives.QueueStats{Depth: 1}},
		{"fail", func(abi.HandleInput) ([]byte, error) {
			return result(abi.HandleResult{Outcome: abi.OutcomeFail, Reason: "nope"}), nil
		}, []slotstate.Outcome{slotstate.Failed, slotstate.Failed, slotstate.Parked}, []slotstate.Phase{slotstate.Handle, slotstate.Release}, primitives.QueueStats{Parked: 1}},
		{"park", func(abi.HandleInput) ([]byte, error) {
			return result(abi.HandleResult{Outcome: abi.OutcomePark, Reason: "gone"}), nil
		}, []slotstate.Outcome{slotstate.Parked}, []slotstate.Phase{slotstate.Handle, slotstate.Release}, primitives.QueueStats{Parked: 1}},
		{"trap", func(abi.HandleInput) ([]byte, error) { return nil, errors.New("wasm error: unreachable") },
			[]slotstate.Outcome{slotstate.Died, slotstate.Died, slotstate.Died}, []slotstate.Phase{slotstate.Handle, slotstate.Release}, primitives.QueueStats{Parked: 1}},
		{"garbage", func(abi.HandleInput) ([]byte, error) { return []byte("garbage"), nil },
			[]slotstate.Outcome{slotstate.Died, slotstate.Died, slotstate.Died}, []slotstate.Phase{slotstate.Handle, slotstate.Release}, primitives.QueueStats{Parked: 1}},
		{"host panic", func(abi.HandleInput) ([]byte, error) { panic("boom") },
			[]slotstate.Outcome{slotstate.Died, slotstate.Died, slotstate.Died}, []slotstate.Phase{slotstate.Handle, slotstate.Release}, primitives.QueueStats{Parked: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, func(_ context.Context, in abi.HandleInput) ([]byte, error) { return tt.answer(in) })
			h.push(`{"x":1}`)
			// A task that never parks (retry) goes on being claimed: look at the first ones.
			h.run(func() bool { return len(h.finished()) >= len(tt.outcomes) && h.stats().InFlight == 0 })
			fin := h.finished()
			if len(fin) > len(tt.outcomes) && tt.stats.Parked != 0 {
				t.Errorf("%d iterations, want %d: a parked task was claimed again", len(fin), len(tt.outcomes))
			}
			for i, it := range fin[:len(tt.outcomes)] {
				if it.Outcome != tt.outcomes[i] {
					t.Errorf("attempt %d outcome = %s, want %s (%+v)", i+1, it.Outcome, tt.outcomes[i], it)
				}
				if len(it.Phases) != len(tt.phases) || it.Phases[1] != tt.phases[1] {
					t.Errorf("attempt %d phases = %v, want %v", i+1, it.Phases, tt.phases)
				}
			}
			s := h.stats()
			s.Delayed = 0 // whether a short retry's delay has passed depends on when the run stopped
			if s != tt.stats {
				t.Errorf("stats = %+v, want %+v", s, tt.stats)
			}
			if tt.outcomes[0] == slotstate.Died {
				if n := h.made.Load(); n < int64(len(tt.outcomes)) {
					t.Errorf("instances made = %d, want a fresh one per attempt after a death", n)
				}
			}
			if made, closed := h.made.Load(), h.closed.Load(); made != closed {
				t.Errorf("instances made %d, closed %d", made, closed)
			}
		})
	}
}

// TestHandleInput: the guest gets the task as the abi describes it.
func TestHandleInput(t *testing.T) {
	var got []abi.HandleInput
	var mu sync.Mutex
	h := newHarness(t, func(_ context.Context, in abi.HandleInput) ([]byte, error) {
		mu.Lock()
		got = append(got, in)
		mu.Unlock()
		if in.Task.Attempts == 1 {
			return result(abi.HandleResult{Outcome: abi.OutcomeFail, Reason: "first"}), nil
		}
		return result(abi.HandleResult{Outcome: abi.OutcomeDone}), nil
	})
	h.push(`{"x":1}`)
	h.run(func() bool { return len(h.finished()) == 2 })
	if len(got) != 2 || string(got[0].Task.Payload) != `{"x":1}` || got[1].Task.Attempts != 2 ||
		got[1].Task.LastError != "first" || got[1].Iteration != 2 || got[0].Task.EnqueuedAtMs == 0 {
		t.Errorf("inputs = %+v", got)
	}
}

// TestRetryRefundsAttempt: a retry gives its attempt back, a fail or a death spends it;
// so a task that alternates retry and fail (or death) parks at the third fail of
// MaxAttempts 3, not the third claim, and the guest sees Attempts count only those spent.
func TestRetryRefundsAttempt(t *testing.T) {
	tests := []struct {
		name   string
		spend  func() ([]byte, error) // the answer that spends the attempt
		spent  slotstate.Outcome      // its outcome while under the budget
		parked slotstate.Iteration    // the last claim's outcome
	}{
		{"fail", func() ([]byte, error) { return result(abi.HandleResult{Outcome: abi.OutcomeFail, Reason: "nope"}), nil },
			slotstate.Failed, slotstate.Iteration{Outcome: slotstate.Parked, Parked: true}},
		{"dead", func() ([]byte, error) { return nil, errors.New("wasm error: unreachable") },
			slotstate.Died, slotstate.Iteration{Outcome: slotstate.Died, Parked: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var (
				mu       sync.Mutex
				attempts []int
			)
			h := newHarness(t, func(_ context.Context, in abi.HandleInput) ([]byte, error) {
				mu.Lock()
				attempts = append(attempts, in.Task.Attempts)
				mu.Unlock()
				if in.Iteration%2 == 1 {
					return result(abi.HandleResult{Outcome: abi.OutcomeRetry, RetryAfterMs: 1}), nil
				}
				return tt.spend()
			})
			h.push(`{}`)
			h.run(func() bool { return len(h.finished()) == 6 && h.stats().InFlight == 0 })
			want := []slotstate.Iteration{
				{Outcome: slotstate.Retried}, {Outcome: tt.spent},
				{Outcome: slotstate.Retried}, {Outcome: tt.spent},
				{Outcome: slotstate.Retried}, tt.parked,
			}
			for i, it := range h.finished() {
				if it.Outcome != want[i].Outcome || it.Parked != want[i].Parked {
					t.Errorf("claim %d = %s parked %v, want %s parked %v", i+1, it.Outcome, it.Parked, want[i].Outcome, want[i].Parked)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if wantAttempts := []int{1, 1, 2, 2, 3, 3}; !slices.Equal(attempts, wantAttempts) {
				t.Errorf("Task.Attempts per claim = %v, want %v (a retry refunds its attempt)", attempts, wantAttempts)
			}
			if s := h.stats(); s != (primitives.QueueStats{Parked: 1}) {
				t.Errorf("stats = %+v, want the task parked", s)
			}
		})
	}
}

// TestDeadlineKills: a call past CallTimeout is dead with a reason that says so.
func TestDeadlineKills(t *testing.T) {
	h := newHarness(t, func(ctx context.Context, in abi.HandleInput) ([]byte, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	h.params.CallTimeout = 5 * time.Millisecond
	h.params.MaxAttempts = 1
	h.push(`{}`)
	h.run(func() bool { return len(h.finished()) == 1 })
	if it := h.finished()[0]; it.Outcome != slotstate.Died || it.Death != slotstate.DeathDeadline || it.Reason != "guest died: call ran past its 5ms deadline: context deadline exceeded" {
		t.Errorf("iteration = %+v", it)
	}
}

// TestDeathReasons: why an instance died is the Guest's *Died, the slot's own contexts,
// a panic or a malformed result; an error of any other type is a trap, whatever it says
// or wraps.
func TestDeathReasons(t *testing.T) {
	tests := []struct {
		name   string
		handle func(ctx context.Context, in abi.HandleInput) ([]byte, error)
		want   slotstate.Death
	}{
		{"died", func(context.Context, abi.HandleInput) ([]byte, error) {
			return nil, fmt.Errorf("wrapped: %w", &Died{Death: slotstate.DeathExit, Err: errors.New("exit_code(3)")})
		}, slotstate.DeathExit},
		{"untyped", func(context.Context, abi.HandleInput) ([]byte, error) {
			return nil, errors.New("wasm error: unreachable\n\tcall_ran_past_its_deadline() out_of_memory()")
		}, slotstate.DeathTrap},
		{"deadline error before the deadline", func(context.Context, abi.HandleInput) ([]byte, error) {
			return nil, context.DeadlineExceeded
		}, slotstate.DeathTrap},
		{"panic", func(context.Context, abi.HandleInput) ([]byte, error) { panic("boom") }, slotstate.DeathHostPanic},
		{"garbage", func(context.Context, abi.HandleInput) ([]byte, error) { return []byte("garbage"), nil }, slotstate.DeathBadResult},
		{"negative retry", func(context.Context, abi.HandleInput) ([]byte, error) {
			return []byte(`{"outcome":"retry","retry_after_ms":9223372036854775807}`), nil
		}, slotstate.DeathBadResult},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, tt.handle)
			h.params.MaxAttempts = 1
			h.push(`{}`)
			h.run(func() bool { return len(h.finished()) == 1 })
			if it := h.finished()[0]; it.Outcome != slotstate.Died || it.Death != tt.want {
				t.Errorf("iteration = %+v, want dead of %s", it, tt.want)
			}
		})
	}
}

// TestBackoff: consecutive deaths wait longer, capped; a success resets.
func TestBackoff(t *testing.T) {
	s := New(Params{BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond})
	for deaths, want := range map[int]time.Duration{1: 10 * time.Millisecond, 2: 20 * time.Millisecond, 3: 40 * time.Millisecond, 4: 50 * time.Millisecond, 10: 50 * time.Millisecond} {
		s.deaths = deaths
		if got := s.backoff(); got != want {
			t.Errorf("backoff after %d deaths = %v, want %v", deaths, got, want)
		}
	}
}

// TestNewGuestFails: a slot that cannot make an instance keeps trying and claims nothing.
func TestNewGuestFails(t *testing.T) {
	h := newHarness(t, nil)
	var tries atomic.Int64
	h.params.NewGuest = func(context.Context) (Guest, error) {
		tries.Add(1)
		return nil, errors.New("no")
	}
	h.push(`{}`)
	h.run(func() bool { return tries.Load() >= 3 })
	if s := h.stats(); s.Depth != 1 {
		t.Errorf("stats = %+v, want the task untouched", s)
	}
}

// goneGuest is a fakeGuest whose instance dies while idle once gone is set.
type goneGuest struct {
	fakeGuest
	gone *atomic.Bool
}

func (g *goneGuest) Gone() bool { return g.gone.Load() }

// TestGoneGuestReplaced: an instance that died while no call ran (Gone) is replaced
// before the slot's next iteration: no task's attempt is spent on it, and its
// iterations all run on live instances.
func TestGoneGuestReplaced(t *testing.T) {
	var calls atomic.Int64
	h := newHarness(t, func(context.Context, abi.HandleInput) ([]byte, error) {
		calls.Add(1)
		return result(abi.HandleResult{Outcome: abi.OutcomeDone}), nil
	})
	var dead []*atomic.Bool
	var mu sync.Mutex
	h.params.NewGuest = func(context.Context) (Guest, error) {
		h.made.Add(1)
		gone := &atomic.Bool{}
		mu.Lock()
		dead = append(dead, gone)
		mu.Unlock()
		return &goneGuest{fakeGuest: fakeGuest{handle: func(ctx context.Context, in abi.HandleInput) ([]byte, error) {
			if gone.Load() {
				return nil, &Died{Death: slotstate.DeathWorker, Err: errors.New("its worker died")}
			}
			gone.Store(true) // each instance dies, idle, after its first task
			return h.handle(ctx, in)
		}, closed: &h.closed}, gone: gone}, nil
	}
	for range 3 {
		h.push(`{}`)
	}
	h.run(func() bool { return len(h.finished()) >= 3 })
	for _, it := range h.finished() {
		if it.Outcome != slotstate.Done {
			t.Fatalf("iteration = %s (%s), want done: a gone instance was called", it.Outcome, it.Reason)
		}
	}
	if n := h.made.Load(); n < 3 {
		t.Errorf("instances made = %d, want one per task (3)", n)
	}
}

// TestDrainCut: hard ending mid-call releases the task at once with its attempt
// refunded, so it never parks, even at MaxAttempts 1.
func TestDrainCut(t *testing.T) {
	started := make(chan struct{})
	h := newHarness(t, func(ctx context.Context, in abi.HandleInput) ([]byte, error) {
		close(started)
		<-ctx.Done()
		return nil, ctx.Err()
	})
	h.params.MaxAttempts = 1
	h.push(`{}`)
	h.cutMidCall(started)
	if s := h.stats(); s != (primitives.QueueStats{Depth: 1}) {
		t.Errorf("stats = %+v, want the task back and not parked", s)
	}
	if fin := h.finished(); len(fin) != 1 || fin[0].Outcome != slotstate.Cut || fin[0].Parked || fin[0].Death != slotstate.DeathDrain {
		t.Errorf("iterations = %+v, want one cut, its instance dead of the drain", fin)
	}
	c, ok, err := h.b.QueueClaim(context.Background(), "q", time.Minute, 1)
	if err != nil || !ok || c.Attempts != 1 || c.LastError != "host draining: call cut at the drain deadline" {
		t.Errorf("QueueClaim after the cut = %+v, %v, %v; want attempt 1 (the cut one refunded) with the drain's reason", c, ok, err)
	}
}

// TestDrainCutCallThatReturns: a call whose host calls the drain cuts, and which
// returns a failure of its own (as a guest does with the error a cut host call gives
// it), ends cut too: its task goes back at once, refunded, not delayed as a failure.
func TestDrainCutCallThatReturns(t *testing.T) {
	started := make(chan struct{})
	h := newHarness(t, func(ctx context.Context, in abi.HandleInput) ([]byte, error) {
		close(started)
		<-ctx.Done()
		return result(abi.HandleResult{Outcome: abi.OutcomeFail, Reason: "lock_acquire: " + ctx.Err().Error()}), nil
	})
	h.params.MaxAttempts = 1
	h.push(`{}`)
	h.cutMidCall(started)
	if s := h.stats(); s != (primitives.QueueStats{Depth: 1}) {
		t.Errorf("stats = %+v, want the task back, neither delayed nor parked", s)
	}
	if fin := h.finished(); len(fin) != 1 || fin[0].Outcome != slotstate.Cut || fin[0].Death != slotstate.DeathDrain {
		t.Errorf("iterations = %+v, want one cut by the drain", fin)
	}
}

// TestDrainCutTick: a tick the drain cuts mid-call ends cut, not died: its instance
// died of the drain, which is no fault of the plugin's.
func TestDrainCutTick(t *testing.T) {
	started := make(chan struct{})
	h := newHarness(t, func(ctx context.Context, in abi.HandleInput) ([]byte, error) {
		close(started)
		<-ctx.Done()
		return nil, ctx.Err()
	})
	h.params.Mode, h.params.Queue = abi.ModeLoop, ""
	h.cutMidCall(started)
	if fin := h.finished(); len(fin) != 1 || fin[0].Outcome != slotstate.Cut || fin[0].Death != slotstate.DeathDrain {
		t.Errorf("ticks = %+v, want one cut, its instance dead of the drain", fin)
	}
}

// TestPaused: a paused slot drains and claims nothing.
func TestPaused(t *testing.T) {
	h := newHarness(t, func(context.Context, abi.HandleInput) ([]byte, error) {
		return result(abi.HandleResult{Outcome: abi.OutcomeDone}), nil
	})
	var paused atomic.Bool
	paused.Store(true)
	h.params.Paused = paused.Load
	h.push(`{}`)
	h.run(func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.events) > 0 && h.events[0].Kind == slotstate.Paused
	})
	if s := h.stats(); s.Depth != 1 {
		t.Errorf("a paused slot claimed: %+v", s)
	}
}

// TestLoopTicks: loop mode ticks and maps outcomes without a queue.
func TestLoopTicks(t *testing.T) {
	var n atomic.Int64
	h := newHarness(t, func(context.Context, abi.HandleInput) ([]byte, error) {
		switch n.Add(1) {
		case 1:
			return result(abi.HandleResult{Outcome: abi.OutcomeRetry, RetryAfterMs: 1}), nil
		case 2:
			return nil, errors.New("trap")
		}
		return result(abi.HandleResult{Outcome: abi.OutcomeDone}), nil
	})
	h.params.Mode, h.params.Queue = abi.ModeLoop, ""
	h.run(func() bool { return len(h.finished()) >= 4 })
	fin := h.finished()
	want := []slotstate.Outcome{slotstate.Retried, slotstate.Died, slotstate.Done, slotstate.Done}
	for i, w := range want {
		if fin[i].Outcome != w {
			t.Errorf("tick %d = %s, want %s", i+1, fin[i].Outcome, w)
		}
	}
}

// flaky is a queue that fails every call with ErrUnavailable while down.
type flaky struct {
	primitives.Queue
	down  atomic.Bool
	fails atomic.Int64
}

func (f *flaky) QueueAckClaim(ctx context.Context, queue string, acks []primitives.Ack, n int, lease time.Duration, maxAttempts int) ([]primitives.TaskLease, []error, error) {
	if f.down.Load() {
		f.fails.Add(1)
		return nil, nil, primitives.ErrUnavailable
	}
	return f.Queue.QueueAckClaim(ctx, queue, acks, n, lease, maxAttempts)
}

// countingHandler counts log records.
type countingHandler struct {
	slog.Handler
	n *atomic.Int64
}

func (c countingHandler) Handle(ctx context.Context, r slog.Record) error {
	c.n.Add(1)
	return nil
}

// TestBackendDown: claims failing while the backend is down are logged once per interval,
// and the slot goes on working when it is back.
func TestBackendDown(t *testing.T) {
	h := newHarness(t, func(context.Context, abi.HandleInput) ([]byte, error) {
		return result(abi.HandleResult{Outcome: abi.OutcomeDone}), nil
	})
	q := &flaky{Queue: h.b}
	q.down.Store(true)
	var lines atomic.Int64
	h.params.Backend = q
	h.params.Log = slog.New(countingHandler{slog.NewTextHandler(io.Discard, nil), &lines})
	h.push(`{}`)
	h.run(func() bool {
		if q.fails.Load() >= 50 {
			q.down.Store(false)
		}
		return len(h.finished()) == 1
	})
	if n := lines.Load(); n != 1 {
		t.Errorf("%d failed claims logged %d lines, want 1", q.fails.Load(), n)
	}
	if s := h.stats(); s != (primitives.QueueStats{}) {
		t.Errorf("stats = %+v, want the task done once the backend is back", s)
	}
}

// claimCounter counts the QueueAckClaim calls a slot's pump makes, and their acks.
type claimCounter struct {
	primitives.Backend
	calls, acks atomic.Int64
}

func (c *claimCounter) QueueAckClaim(ctx context.Context, queue string, acks []primitives.Ack, n int, lease time.Duration, maxAttempts int) ([]primitives.TaskLease, []error, error) {
	c.calls.Add(1)
	c.acks.Add(int64(len(acks)))
	return c.Backend.QueueAckClaim(ctx, queue, acks, n, lease, maxAttempts)
}

// TestAckClaimsNext: a busy slot acks each task and claims the next in one call, so a
// run of tasks costs one backend round trip per task, plus the first claim.
func TestAckClaimsNext(t *testing.T) {
	h := newHarness(t, func(context.Context, abi.HandleInput) ([]byte, error) {
		return result(abi.HandleResult{Outcome: abi.OutcomeDone}), nil
	})
	counter := &claimCounter{Backend: h.b}
	h.params.Backend = counter
	for range 5 {
		h.push(`{}`)
	}
	var callsAtFifth int64
	h.params.Observe = func(e slotstate.Event) {
		if e.Kind == slotstate.Finished && e.N == 5 {
			callsAtFifth = counter.calls.Load()
		}
		h.mu.Lock()
		h.events = append(h.events, e)
		h.mu.Unlock()
	}
	h.run(func() bool { return len(h.finished()) == 5 })
	if s := h.stats(); s != (primitives.QueueStats{}) {
		t.Errorf("stats = %+v, want every task acked", s)
	}
	// The first claim finds task 1; each of the 5 acks claims the next (the fifth finds
	// nothing), and the slot polls with plain claims from then on.
	if callsAtFifth != 6 || counter.acks.Load() != 5 {
		t.Errorf("after 5 tasks: %d QueueAckClaim calls carrying %d acks, want 6 and 5", callsAtFifth, counter.acks.Load())
	}
	for i, it := range h.finished() {
		if it.Outcome != slotstate.Done {
			t.Errorf("iteration %d = %+v, want a checkpoint", i, it)
		}
	}
}

// TestPauseHandsBackClaimedNext: a task that an ack claimed for the next iteration goes
// back to the queue, its attempt refunded, when the slot is paused before starting it.
func TestPauseHandsBackClaimedNext(t *testing.T) {
	h := newHarness(t, func(context.Context, abi.HandleInput) ([]byte, error) {
		return result(abi.HandleResult{Outcome: abi.OutcomeDone}), nil
	})
	counter := &claimCounter{Backend: h.b}
	h.params.Backend = counter
	h.params.Paused = func() bool { return counter.acks.Load() > 0 } // paused right after the first ack
	h.push(`"first"`)
	h.push(`"second"`)
	// While the slot stays paused (and runs), the second task is back in the queue.
	h.run(func() bool { return len(h.finished()) == 1 && h.stats() == primitives.QueueStats{Depth: 1} })
	if fin := h.finished(); len(fin) != 1 {
		t.Fatalf("iterations = %+v, want only the first task worked", fin)
	}
	c, ok, err := h.b.QueueClaim(context.Background(), "q", time.Minute, 3)
	if err != nil || !ok || string(c.Payload) != `"second"` || c.Attempts != 1 {
		t.Errorf("QueueClaim after the pause = %+v, %v, %v; want the second task at attempt 1 (the unstarted claim refunded)", c, ok, err)
	}
}

// TestGuestCausedLinesRateLimited: a guest that fails or dies on every task causes lines
// (task parked, guest died) only as its plugin's Events limiter lets through: here a
// burst of 5 and no refill within the test, so 100 parked tasks write 5 lines.
func TestGuestCausedLinesRateLimited(t *testing.T) {
	var n atomic.Int64
	h := newHarness(t, func(context.Context, abi.HandleInput) ([]byte, error) {
		if n.Add(1)%2 == 0 {
			return nil, errors.New("wasm error: unreachable")
		}
		return result(abi.HandleResult{Outcome: abi.OutcomeFail, Reason: "every task fails"}), nil
	})
	logs := &testutil.LogBuffer{}
	h.params.Log = slog.New(slog.NewTextHandler(logs, nil))
	h.params.MaxAttempts = 1
	h.params.Events = hostfn.NewLimiter(time.Hour, 5)
	for range 100 {
		h.push(`{}`)
	}
	h.run(func() bool { return h.stats().Parked == 100 })
	text := logs.String()
	parked, died := strings.Count(text, "msg=\"slot: task parked"), strings.Count(text, "msg=\"slot: guest died")
	if parked+died != 5 || parked == 0 || died == 0 {
		t.Errorf("100 parked tasks (half of them deaths) logged %d parked and %d died lines, want 5 in all:\n%s", parked, died, text)
	}
	if !strings.Contains(text, "slot=fake/0") {
		t.Errorf("the lines do not name the slot:\n%s", text)
	}
}
