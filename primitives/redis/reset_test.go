package redis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/primitives/primitivestest"
)

// resetOps is how many pushes, counter increments and ack+claims TestResetsApplyOnce
// makes of each.
const resetOps = 3000

// killConnections resets every client connection but its own (CLIENT KILL TYPE normal
// skips the caller) every 20–50 ms, as a proxy, NAT or failover would, until the test
// ends or the returned stop is called; stop returns how many connections it killed.
func killConnections(t *testing.T) (stop func() int64) {
	raw := srv.Client()
	done := make(chan struct{})
	var killed atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			n, err := raw.ClientKillByFilter(bg, "TYPE", "normal").Result()
			if err != nil {
				t.Errorf("CLIENT KILL TYPE normal = %v", err)
				return
			}
			killed.Add(n)
			// Pacing the fault, not waiting for an event.
			select {
			case <-done:
				return
			case <-time.After(time.Duration(20+rand.IntN(31)) * time.Millisecond):
			}
		}
	})
	var once sync.Once
	stop = func() int64 {
		once.Do(func() {
			close(done)
			wg.Wait()
			raw.Close()
		})
		return killed.Load()
	}
	t.Cleanup(func() { stop() })
	return stop
}

// untilAnswered calls f with ctx naming request id until it does not fail with
// ErrUnavailable, as a caller that retries a request does, and returns its error.
func untilAnswered(t *testing.T, id string, f func(ctx context.Context) error) error {
	ctx := primitives.WithRequest(bg, primitives.Request{ID: id})
	for {
		err := f(ctx)
		if !errors.Is(err, primitives.ErrUnavailable) {
			return err
		}
		if t.Context().Err() != nil {
			return err
		}
	}
}

// The fault: connections reset every 20–50 ms while 3,000 pushes, counter
// increments and ack+claims run. go-redis resends the commands whose reply was lost and
// a caller retries those that failed; each applies once: no task id is twice in the
// ready list, the counter is exact, and every task is claimed once and acked, none
// left in flight (orphaned until its lease ends).
func TestResetsApplyOnce(t *testing.T) {
	b, raw := setup(t)
	const workers = 8
	stop := killConnections(t)

	// Pushes with the ids the backend makes: only go-redis resends them. A push that
	// failed may have been applied, but none twice.
	var mu sync.Mutex
	pushed, failed := map[string]bool{}, 0
	primitivestest.Hammer(workers, func(w int) {
		for i := w; i < resetOps; i += workers {
			id, _, err := b.QueuePush(bg, "q", []byte(fmt.Sprint(i)), primitives.QueuePushOptions{})
			mu.Lock()
			if err != nil {
				failed++
			} else {
				pushed[id] = true
			}
			mu.Unlock()
			if err != nil && !errors.Is(err, primitives.ErrUnavailable) {
				t.Errorf("QueuePush = %v", err)
			}
		}
	})
	ready := raw.LRange(bg, queueReadyKey("q"), 0, -1).Val()
	seen := map[string]int{}
	for _, id := range ready {
		if seen[id]++; seen[id] == 2 {
			t.Errorf("task %s is twice in the ready list", id)
		}
	}
	for id := range pushed {
		if seen[id] != 1 {
			t.Errorf("pushed task %s is %d times in the ready list, want 1", id, seen[id])
		}
	}
	if len(ready) > resetOps || len(ready) < resetOps-failed {
		t.Errorf("ready list holds %d tasks after %d pushes of which %d failed", len(ready), resetOps, failed)
	}
	t.Logf("pushes: %d answered, %d failed after go-redis' resends", len(pushed), failed)

	// Ack+claims and counter increments, each retried by its caller under one request
	// id until answered.
	claimed := map[string]int{}
	var retried atomic.Int64
	primitivestest.Hammer(2*workers, func(w int) {
		if w%2 == 1 {
			for i := w / 2; i < resetOps; i += workers {
				err := untilAnswered(t, fmt.Sprint("incr-", i), func(ctx context.Context) error {
					_, err := b.CounterIncr(ctx, "done", 1, primitives.NameQuota{})
					return err
				})
				if err != nil {
					t.Errorf("CounterIncr = %v", err)
					return
				}
			}
			return
		}
		var acks []primitives.Ack
		for i := 0; ; i++ {
			var got []primitives.TaskLease
			var ackErrs []error
			tries := 0
			err := untilAnswered(t, fmt.Sprintf("batch-%d-%d", w, i), func(ctx context.Context) error {
				tries++
				var err error
				got, ackErrs, err = b.QueueAckClaim(ctx, "q", acks, 1, time.Minute, 0)
				return err
			})
			retried.Add(int64(tries - 1))
			if err != nil {
				t.Errorf("QueueAckClaim = %v", err)
				return
			}
			for j, err := range ackErrs {
				if err != nil {
					t.Errorf("ack of %s = %v, want nil", acks[j].ID, err)
				}
			}
			if len(got) == 0 {
				return
			}
			mu.Lock()
			claimed[got[0].ID]++
			mu.Unlock()
			acks = []primitives.Ack{{ID: got[0].ID, Token: got[0].Token}}
		}
	})
	killed := stop()
	if killed == 0 {
		t.Fatal("no connection was killed: the test proved nothing")
	}
	if n, err := b.CounterGet(bg, "done"); err != nil || n != resetOps {
		t.Errorf("counter = %d, %v after %d increments, want exactly %d", n, err, resetOps, resetOps)
	}
	if len(claimed) != len(ready) {
		t.Errorf("claimed %d distinct tasks, want the %d ready", len(claimed), len(ready))
	}
	for id, n := range claimed {
		if n != 1 {
			t.Errorf("task %s claimed %d times, want once", id, n)
		}
	}
	if st, err := b.QueueStats(bg, "q"); err != nil || st != (primitives.QueueStats{}) {
		t.Errorf("QueueStats after the drain = %+v, %v, want empty: a claim was orphaned", st, err)
	}
	t.Logf("%d connections killed; %d ack+claims retried by their caller", killed, retried.Load())
}
