package slot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tetratelabs/wazero/sys"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/primitives/memory"
	fleetredis "github.com/fleethost/fleet/primitives/redis"
)

// fleet runs slots of one queue "q" in a synctest bubble, each on a backend of its own
// choosing and with a Pump of its own, as each host has one, and records when each call
// began and ended by the bubble's clock, which moves only when every goroutine waits:
// the times are exact, and a test of leases minutes long takes no time.
type fleet struct {
	t      *testing.T
	b      primitives.Backend // the store every slot reaches, one way or another
	lease  time.Duration
	wg     sync.WaitGroup
	mu     sync.Mutex
	calls  []leaseCall
	events []slotstate.Event
}

// leaseCall is one guest call as the fleet saw it.
type leaseCall struct {
	slot       string
	task       string
	began, end time.Time
}

func newFleet(t *testing.T, lease time.Duration) *fleet {
	b := memory.New(memory.Options{})
	t.Cleanup(func() { b.Close() })
	return &fleet{t: t, b: b, lease: lease}
}

// slot starts a slot named name on backend (f.b, or a view of it) running handle, until
// ctx ends (soft and hard at once).
func (f *fleet) slot(ctx context.Context, name string, backend primitives.Queue, handle func(ctx context.Context, in abi.HandleInput) ([]byte, error)) {
	pumpCtx, stopPump := context.WithCancel(context.WithoutCancel(ctx))
	pump := NewPump(pumpCtx, backend, "q", f.lease, 3)
	p := Params{
		Name: name, Mode: abi.ModeBatch, Queue: "q", Backend: backend, Pump: pump,
		MaxAttempts: 3, Poll: 10 * time.Millisecond, CallTimeout: time.Hour, RetryDelay: time.Millisecond,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Observe: func(e slotstate.Event) {
			f.mu.Lock()
			f.events = append(f.events, e)
			f.mu.Unlock()
		},
		NewGuest: func(context.Context) (Guest, error) {
			return &fakeGuest{closed: new(atomic.Int64), handle: func(ctx context.Context, in abi.HandleInput) ([]byte, error) {
				c := leaseCall{slot: name, task: in.Task.ID, began: time.Now()}
				out, err := handle(ctx, in)
				c.end = time.Now()
				f.mu.Lock()
				f.calls = append(f.calls, c)
				f.mu.Unlock()
				return out, err
			}}, nil
		},
	}
	f.wg.Go(func() {
		defer stopPump()
		New(p).Run(ctx, ctx)
	})
}

func (f *fleet) push() string {
	id, _, err := f.b.QueuePush(context.Background(), "q", []byte(`{}`), primitives.QueuePushOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return id
}

func (f *fleet) finished() []slotstate.Iteration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return finished(f.events)
}

// overlaps lists the pairs of calls on one task by two slots that ran at once.
func (f *fleet) overlaps() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for i, a := range f.calls {
		for _, b := range f.calls[i+1:] {
			if a.task == b.task && a.slot != b.slot && a.began.Before(b.end) && b.began.Before(a.end) {
				out = append(out, fmt.Sprintf("%s [%v, %v] and %s [%v, %v]", a.slot, a.began, a.end, b.slot, b.began, b.end))
			}
		}
	}
	return out
}

// TestLongCallKeepsItsTask: a call that runs twenty leases keeps its task, renewed
// under it, while another slot polls the queue all along: the task runs once, and is
// acked by the slot that ran it. Without the renewals the poller would claim it once
// the first lease ran out.
func TestLongCallKeepsItsTask(t *testing.T) {
	testutil.CheckGoroutines(t)
	synctest.Test(t, func(t *testing.T) {
		const lease = time.Second
		f := newFleet(t, lease)
		ctx, stop := context.WithCancel(context.Background())
		work := func(ctx context.Context, in abi.HandleInput) ([]byte, error) {
			if !sleep(ctx, 20*lease) {
				return nil, ctx.Err()
			}
			return result(abi.HandleResult{Outcome: abi.OutcomeDone}), nil
		}
		f.push()
		f.slot(ctx, "a/0", f.b, work)
		synctest.Wait() // a holds the task, its call asleep
		f.slot(ctx, "b/0", f.b, work)
		for len(f.finished()) == 0 {
			time.Sleep(lease)
		}
		stop()
		f.wg.Wait()
		if st := testutil.QueueStats(t, f.b, "q"); st != (primitives.QueueStats{}) {
			t.Errorf("queue = %+v, want empty: the task acked", st)
		}
		if n := len(f.calls); n != 1 {
			t.Errorf("%d calls, want 1: a second slot claimed the task while its call ran (%+v)", n, f.calls)
		}
		if fin := f.finished(); len(fin) != 1 || fin[0].Outcome != slotstate.Done {
			t.Errorf("iterations = %+v, want one checkpoint", fin)
		}
	})
}

// cutOff is a backend that one host reaches until cut is closed, and then no more: a
// host partitioned from the store, which to the rest of the fleet is a dead host.
type cutOff struct {
	primitives.Queue
	cut chan struct{}
}

func (c *cutOff) down() bool {
	select {
	case <-c.cut:
		return true
	default:
		return false
	}
}

func (c *cutOff) QueueExtend(ctx context.Context, queue, id, token string, lease time.Duration) (time.Time, error) {
	if c.down() {
		return time.Time{}, primitives.ErrUnavailable
	}
	return c.Queue.QueueExtend(ctx, queue, id, token, lease)
}

func (c *cutOff) QueueRelease(ctx context.Context, queue, id, token string, r primitives.Retry) (bool, error) {
	if c.down() {
		return false, primitives.ErrUnavailable
	}
	return c.Queue.QueueRelease(ctx, queue, id, token, r)
}

func (c *cutOff) QueueAckClaim(ctx context.Context, queue string, acks []primitives.Ack, n int, lease time.Duration, maxAttempts int) ([]primitives.TaskLease, []error, error) {
	if c.down() {
		return nil, nil, primitives.ErrUnavailable
	}
	return c.Queue.QueueAckClaim(ctx, queue, acks, n, lease, maxAttempts)
}

// TestLostHostsTaskBackWithinOneLease: a host cut off from the backend mid-call, as good
// as dead to the fleet, neither renews nor releases; its task comes back to another slot
// within one lease of the cut, and not before its own call has ended: the cut-off slot
// ends the call a quarter lease before the lease it could not renew runs out.
func TestLostHostsTaskBackWithinOneLease(t *testing.T) {
	testutil.CheckGoroutines(t)
	synctest.Test(t, func(t *testing.T) {
		const lease = 4 * time.Second
		f := newFleet(t, lease)
		ctx, stop := context.WithCancel(context.Background())
		block := func(ctx context.Context, in abi.HandleInput) ([]byte, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		done := func(ctx context.Context, in abi.HandleInput) ([]byte, error) {
			return result(abi.HandleResult{Outcome: abi.OutcomeDone}), nil
		}
		id := f.push()
		lost := &cutOff{Queue: f.b, cut: make(chan struct{})}
		f.slot(ctx, "lost/0", lost, block)
		synctest.Wait()
		time.Sleep(3 * lease) // renewed all along
		f.slot(ctx, "rest/0", f.b, done)
		synctest.Wait()
		cut := time.Now()
		close(lost.cut)
		for testutil.QueueStats(t, f.b, "q") != (primitives.QueueStats{}) {
			time.Sleep(10 * time.Millisecond)
		}
		stop()
		f.wg.Wait()

		if o := f.overlaps(); len(o) > 0 {
			t.Errorf("the task ran on two slots at once: %v", o)
		}
		if len(f.calls) != 2 || f.calls[0].slot != "lost/0" || f.calls[1].slot != "rest/0" || f.calls[1].task != id {
			t.Fatalf("calls = %+v, want the cut-off slot's, then the other's", f.calls)
		}
		if took := f.calls[1].began.Sub(cut); took > lease {
			t.Errorf("the task came back %v after its host was cut off, want within the lease %v", took, lease)
		}
		if ended := f.calls[0].end; ended.After(f.calls[1].began) || ended.Sub(cut) > lease-lease/4 {
			t.Errorf("the cut-off call ended %v after the cut, want at most %v: a quarter lease before the lease it could not renew", ended.Sub(cut), lease-lease/4)
		}
		fin := f.finished()
		if len(fin) == 0 || fin[0].Death != slotstate.DeathLease || !strings.Contains(fin[0].Reason, "could not be renewed") {
			t.Errorf("the cut-off slot's iteration = %+v, want dead, its lease not renewed", fin)
		}
	})
}

// TestLeaseLostIsNotAcked: a slot whose renewal finds its task held by another claim
// cuts the call and neither acks the task nor releases it: the task is the other
// claim's.
func TestLeaseLostIsNotAcked(t *testing.T) {
	testutil.CheckGoroutines(t)
	synctest.Test(t, func(t *testing.T) {
		const lease = time.Second
		f := newFleet(t, lease)
		ctx, stop := context.WithCancel(context.Background())
		f.push()
		seen := &claims{Queue: f.b}
		// The guest takes its task from under its own slot: it hands the task back with
		// the slot's token and claims it again, as another host would after a lease the
		// backend lost (a failover to a replica that missed the renewals).
		var other primitives.TaskLease
		f.slot(ctx, "a/0", seen, func(ctx context.Context, in abi.HandleInput) ([]byte, error) {
			mine := seen.of(in.Task.ID)
			if _, err := f.b.QueueRelease(ctx, "q", mine.ID, mine.Token, primitives.Retry{Refund: true}); err != nil {
				t.Errorf("QueueRelease = %v", err)
			}
			c, ok, err := f.b.QueueClaim(ctx, "q", time.Hour, 0)
			if err != nil || !ok {
				t.Errorf("QueueClaim = %v, %v, want the task again", ok, err)
			}
			other = c
			<-ctx.Done() // cut when the next renewal finds the lease lost
			return nil, ctx.Err()
		})
		for len(f.finished()) == 0 {
			time.Sleep(lease / 4)
		}
		stop()
		f.wg.Wait()
		fin := f.finished()[0]
		if fin.Outcome != slotstate.Died || fin.Death != slotstate.DeathLease || !strings.Contains(fin.Reason, "lost") {
			t.Errorf("iteration = %+v, want dead, its lease lost", fin)
		}
		if slices.Contains(fin.Phases, "ack") || slices.Contains(fin.Phases, "release") {
			t.Errorf("phases = %v, want neither ack nor release of a task another claim holds", fin.Phases)
		}
		if st := testutil.QueueStats(t, f.b, "q"); st != (primitives.QueueStats{InFlight: 1}) {
			t.Errorf("queue = %+v, want the task still the other claim's", st)
		}
		if err := f.b.QueueAck(context.Background(), "q", other.ID, other.Token); err != nil {
			t.Errorf("the other claim's ack = %v, want it still to hold the task", err)
		}
	})
}

// claims is a backend that keeps the tasks its slot claimed, so that a test can act on
// a claim with its token.
type claims struct {
	primitives.Queue
	mu      sync.Mutex
	claimed []primitives.TaskLease
}

func (c *claims) QueueAckClaim(ctx context.Context, queue string, acks []primitives.Ack, n int, lease time.Duration, maxAttempts int) ([]primitives.TaskLease, []error, error) {
	claimed, ackErrs, err := c.Queue.QueueAckClaim(ctx, queue, acks, n, lease, maxAttempts)
	c.mu.Lock()
	c.claimed = append(c.claimed, claimed...)
	c.mu.Unlock()
	return claimed, ackErrs, err
}

// of is the last claim of task id.
func (c *claims) of(id string) primitives.TaskLease {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(c.claimed) - 1; i >= 0; i-- {
		if c.claimed[i].ID == id {
			return c.claimed[i]
		}
	}
	return primitives.TaskLease{}
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
	if it := h.finished()[0]; it.Outcome != slotstate.Died || strings.Contains(it.Reason, "ran past its") {
		t.Errorf("iteration = %+v, want dead, not past its deadline", it)
	}
}

// TestSettledAfterAnOutage: a task whose call ends while the backend does not answer (a
// Redis stalled by CLIENT PAUSE, as one that restarts or fails over is) is acked, or
// handed back with its attempt refunded, once the backend answers again, within the
// lease: it is neither left in flight to expire nor run again.
func TestSettledAfterAnOutage(t *testing.T) {
	tests := []struct {
		name   string
		answer abi.HandleResult
		want   primitives.QueueStats
	}{
		{"ack", abi.HandleResult{Outcome: abi.OutcomeDone}, primitives.QueueStats{}},
		{"release", abi.HandleResult{Outcome: abi.OutcomeRetry, RetryAfterMs: 3_600_000}, primitives.QueueStats{Depth: 1, Delayed: 1}},
	}
	srv := testutil.NewRedis(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv.Flush(t)
			// The slot's backend gives up on a call after 100ms; the test's waits out the
			// pause, so that it sees what the slot left.
			b, err1 := fleetredis.Open(srv.URL(), fleetredis.Options{CallTimeout: 100 * time.Millisecond})
			view, err2 := fleetredis.Open(srv.URL(), fleetredis.Options{})
			if err := errors.Join(err1, err2); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close(); view.Close() })
			var calls atomic.Int64
			h := newHarness(t, func(ctx context.Context, in abi.HandleInput) ([]byte, error) {
				calls.Add(1)
				// The backend stops answering as the call ends: the slot's ack or release
				// meets a server that holds every command for the next 500ms.
				c := srv.Client()
				defer c.Close()
				if err := c.Do(ctx, "CLIENT", "PAUSE", 500, "ALL").Err(); err != nil {
					t.Errorf("CLIENT PAUSE = %v", err)
				}
				return result(tt.answer), nil
			})
			h.b, h.params.Backend = view, b
			h.push(`{}`)
			h.run(func() bool { return len(h.finished()) == 1 })
			if st := h.stats(); st != tt.want {
				t.Errorf("queue = %+v, want %+v: settled once the backend answered", st, tt.want)
			}
			if n := calls.Load(); n != 1 {
				t.Errorf("%d calls, want 1", n)
			}
		})
	}
}
