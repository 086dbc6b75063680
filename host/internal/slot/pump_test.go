package slot

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/primitives/memory"
)

// gatedQueue holds its first QueueAckClaim until open is closed, and counts the calls.
type gatedQueue struct {
	primitives.Queue
	open  chan struct{}
	calls atomic.Int64
	fail  error // returned by every call when set
}

func (g *gatedQueue) QueueAckClaim(ctx context.Context, queue string, acks []primitives.Ack, n int, lease time.Duration, maxAttempts int) ([]primitives.TaskLease, []error, error) {
	if g.calls.Add(1) == 1 {
		<-g.open
	}
	if g.fail != nil {
		return nil, nil, g.fail
	}
	return g.Queue.QueueAckClaim(ctx, queue, acks, n, lease, maxAttempts)
}

// TestPumpBatches: requests that arrive while a call is in flight go out together in the
// next call (at most primitives.MaxBatch to a call, the rest in the call after), and each
// gets its own task and its own ack result. It runs in a synctest bubble so that
// synctest.Wait says when the waiting requests are all blocked behind the gate: then
// exactly as many more calls as MaxBatch allows take them all.
func TestPumpBatches(t *testing.T) {
	testutil.CheckGoroutines(t)
	for _, tt := range []struct {
		waiting int
		calls   int64
	}{
		{10, 2},
		{primitives.MaxBatch + 5, 3},
	} {
		t.Run(fmt.Sprint(tt.waiting), func(t *testing.T) { pumpBatches(t, tt.waiting, tt.calls) })
	}
}

func pumpBatches(t *testing.T, waiting int, calls int64) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New(memory.Options{})
		defer b.Close()
		for range waiting + 1 {
			if _, _, err := b.QueuePush(t.Context(), "q", []byte(`{}`), primitives.QueuePushOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		g := &gatedQueue{Queue: b, open: make(chan struct{})}
		p := NewPump(t.Context(), g, "q", time.Minute, 3)

		first := make(chan PumpResult, 1)
		go func() { first <- p.Do(nil) }()
		synctest.Wait() // the first call is in flight, held at the gate
		if n := g.calls.Load(); n != 1 {
			t.Fatalf("%d backend calls after the first Do, want 1 held at the gate", n)
		}
		results := make(chan PumpResult, waiting)
		var asked sync.WaitGroup
		for i := range waiting {
			asked.Go(func() {
				ack := &primitives.Ack{ID: "no-such-task", Token: "t"}
				if i%2 == 0 {
					ack = nil
				}
				results <- p.Do(ack)
			})
		}
		synctest.Wait() // every request waits behind the gate
		close(g.open)
		asked.Wait()
		close(results)

		seen := map[string]bool{}
		r := <-first
		if r.Err != nil || !r.OK {
			t.Fatalf("first Do = %+v, want a task", r)
		}
		seen[r.Task.ID] = true
		acks := 0
		for r := range results {
			if r.Err != nil || !r.OK || seen[r.Task.ID] {
				t.Errorf("Do = %+v, want a task of its own", r)
			}
			seen[r.Task.ID] = true
			if r.AckErr != nil {
				acks++
				if !errors.Is(r.AckErr, primitives.ErrNotFound) {
					t.Errorf("ack of an unknown task: AckErr = %v, want ErrNotFound", r.AckErr)
				}
			}
		}
		if acks != waiting/2 {
			t.Errorf("%d requests got their ack's error, want %d", acks, waiting/2)
		}
		// One call held at the gate, then the waiting requests, MaxBatch to a call.
		if n := g.calls.Load(); n != calls {
			t.Errorf("%d backend calls for %d requests, want %d: one held at the gate, then the waiting ones batched", n, waiting+1, calls)
		}
	})
}

// TestPumpErrors: a failed batch is every request's Err; a stopped pump answers at once.
func TestPumpErrors(t *testing.T) {
	testutil.CheckGoroutines(t)
	b := memory.New(memory.Options{})
	t.Cleanup(func() { b.Close() })
	g := &gatedQueue{Queue: b, open: make(chan struct{}), fail: primitives.ErrUnavailable}
	close(g.open)
	ctx, stop := context.WithCancel(context.Background())
	p := NewPump(ctx, g, "q", time.Minute, 3)
	if r := p.Do(&primitives.Ack{ID: "x", Token: "t"}); !errors.Is(r.Err, primitives.ErrUnavailable) || r.OK {
		t.Errorf("Do on a failing backend = %+v, want Err ErrUnavailable", r)
	}
	stop()
	if r := p.Do(nil); !errors.Is(r.Err, ErrPumpStopped) {
		t.Errorf("Do after its context ended = %+v, want ErrPumpStopped", r)
	}
}
