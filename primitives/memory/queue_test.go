package memory

import (
	"fmt"
	"testing"
	"time"

	"github.com/fleethost/fleet/primitives"
)

func TestQueueLeaseBoundaryAndParking(t *testing.T) {
	b, clk := newFake(t)
	ctx := t.Context()
	id, _, _ := b.QueuePush(ctx, "q", []byte(`1`), primitives.QueuePushOptions{})
	enq := clk.Now()
	clk.Advance(time.Second)
	for attempt := 1; attempt <= 3; attempt++ {
		c, ok, err := b.QueueClaim(ctx, "q", 10*time.Second, 3)
		if err != nil || !ok || c.ID != id || c.Attempts != attempt || !c.EnqueuedAt.Equal(enq) {
			t.Fatalf("claim %d = %+v, %v, %v; want %q attempt %d enqueued %v", attempt, c, ok, err, id, attempt, enq)
		}
		if attempt > 1 && c.LastError != leaseExpired {
			t.Errorf("claim %d LastError = %q, want %q", attempt, c.LastError, leaseExpired)
		}
		if !c.Until.Equal(clk.Now().Add(10 * time.Second)) {
			t.Errorf("claim %d Until = %v, want now+10s", attempt, c.Until)
		}
		clk.Advance(10*time.Second - time.Nanosecond)
		if _, ok, _ := b.QueueClaim(ctx, "q", time.Second, 3); ok {
			t.Fatalf("claim %d: the task was claimable 1ns before its lease ended", attempt)
		}
		if st, _ := b.QueueStats(ctx, "q"); st != (primitives.QueueStats{InFlight: 1}) {
			t.Errorf("QueueStats in the lease = %+v, want 1 in flight", st)
		}
		clk.Advance(time.Nanosecond)
		// An ended lease counts as waiting before any claim reaps it.
		if st, _ := b.QueueStats(ctx, "q"); st != (primitives.QueueStats{Depth: 1}) {
			t.Errorf("QueueStats when the lease ended = %+v, want depth 1", st)
		}
	}
	if c, ok, _ := b.QueueClaim(ctx, "q", time.Second, 3); ok {
		t.Fatalf("claim after 3 expired leases = %+v, want the task parked", c)
	}
	ps, _ := b.QueueParked(ctx, "q", 0)
	if len(ps) != 1 || ps[0].ID != id || ps[0].LastError != leaseExpired || ps[0].Attempts != 3 {
		t.Fatalf("QueueParked = %+v, want %q parked with %q after 3 attempts", ps, id, leaseExpired)
	}
}

func TestQueueNoMaxAttemptsNeverParks(t *testing.T) {
	b, clk := newFake(t)
	ctx := t.Context()
	b.QueuePush(ctx, "q", []byte(`1`), primitives.QueuePushOptions{})
	for attempt := 1; attempt <= 20; attempt++ {
		c, ok, _ := b.QueueClaim(ctx, "q", time.Second, 0)
		if !ok || c.Attempts != attempt {
			t.Fatalf("claim %d = %+v, %v", attempt, c, ok)
		}
		if attempt%2 == 0 {
			clk.Advance(time.Second)
		} else if parked, _ := b.QueueRelease(ctx, "q", c.ID, c.Token, primitives.Retry{Reason: "again"}); parked {
			t.Fatalf("release %d parked with MaxAttempts 0", attempt)
		}
	}
}

// TestQueueRefundFloor: a refund never takes attempts below 0 (nothing in the API holds
// a task at 0 attempts, so the test sets it).
func TestQueueRefundFloor(t *testing.T) {
	b, _ := newFake(t)
	ctx := t.Context()
	id, _, _ := b.QueuePush(ctx, "q", []byte(`1`), primitives.QueuePushOptions{})
	c, _, _ := b.QueueClaim(ctx, "q", time.Minute, 1)
	q := b.getQueue("q", false)
	q.mu.Lock()
	q.tasks[id].attempts = 0
	q.mu.Unlock()
	if parked, err := b.QueueRelease(ctx, "q", c.ID, c.Token, primitives.Retry{MaxAttempts: 1, Refund: true}); parked || err != nil {
		t.Fatalf("refunded QueueRelease = %v, %v; want back in the queue", parked, err)
	}
	c, _, _ = b.QueueClaim(ctx, "q", time.Minute, 1)
	if c.Attempts != 1 {
		t.Errorf("QueueClaim after refunding at 0 attempts = attempts %d, want 1", c.Attempts)
	}
}

func TestQueueDelayBoundary(t *testing.T) {
	b, clk := newFake(t)
	ctx := t.Context()
	b.QueuePush(ctx, "q", []byte(`1`), primitives.QueuePushOptions{})
	c, _, _ := b.QueueClaim(ctx, "q", time.Minute, 0)
	b.QueueRelease(ctx, "q", c.ID, c.Token, primitives.Retry{Reason: "later", Delay: 5 * time.Second})
	clk.Advance(5*time.Second - time.Nanosecond)
	if _, ok, _ := b.QueueClaim(ctx, "q", time.Minute, 0); ok {
		t.Fatal("task claimable 1ns before its delay passed")
	}
	if st, _ := b.QueueStats(ctx, "q"); st != (primitives.QueueStats{Depth: 1, Delayed: 1}) {
		t.Errorf("QueueStats of a delayed task = %+v, want depth 1, delayed 1", st)
	}
	clk.Advance(time.Nanosecond)
	if st, _ := b.QueueStats(ctx, "q"); st != (primitives.QueueStats{Depth: 1}) {
		t.Errorf("QueueStats when the delay passed = %+v, want depth 1, delayed 0", st)
	}
	if c, ok, _ := b.QueueClaim(ctx, "q", time.Minute, 0); !ok || c.Attempts != 2 || c.LastError != "later" {
		t.Fatalf("claim when the delay passed = %+v, %v; want attempt 2 with error later", c, ok)
	}
}

// TestQueueReadyOrder checks that tasks are claimed in the order they became ready,
// whether pushed, released, delayed or dropped by an ended lease.
func TestQueueReadyOrder(t *testing.T) {
	b, clk := newFake(t)
	ctx := t.Context()
	ids := map[string]string{}
	for _, name := range []string{"lease3s", "delay2s", "delay4s", "lease1s"} {
		ids[name], _, _ = b.QueuePush(ctx, "q", []byte(`"`+name+`"`), primitives.QueuePushOptions{})
	}
	claim := func(lease time.Duration) primitives.TaskLease {
		t.Helper()
		c, ok, err := b.QueueClaim(ctx, "q", lease, 0)
		if !ok || err != nil {
			t.Fatalf("QueueClaim = %v, %v", ok, err)
		}
		return c
	}
	claim(3 * time.Second) // lease3s
	c := claim(time.Minute)
	b.QueueRelease(ctx, "q", c.ID, c.Token, primitives.Retry{Delay: 2 * time.Second})
	c = claim(time.Minute)
	b.QueueRelease(ctx, "q", c.ID, c.Token, primitives.Retry{Delay: 4 * time.Second})
	claim(time.Second) // lease1s
	pushed, _, _ := b.QueuePush(ctx, "q", []byte(`"pushed"`), primitives.QueuePushOptions{})
	clk.Advance(10 * time.Second)
	want := []string{pushed, ids["lease1s"], ids["delay2s"], ids["lease3s"], ids["delay4s"]}
	for i, w := range want {
		if c := claim(time.Minute); c.ID != w {
			t.Errorf("claim %d = %s, want %q", i, c.Payload, w)
		}
	}
}

func TestQueueFIFOCompacts(t *testing.T) {
	b, _ := newFake(t)
	ctx := t.Context()
	next := 0
	for round := range 50 {
		for i := range 37 {
			b.QueuePush(ctx, "q", []byte(fmt.Sprint(round*37+i)), primitives.QueuePushOptions{})
		}
		for range 30 {
			c, ok, _ := b.QueueClaim(ctx, "q", time.Minute, 0)
			if !ok || string(c.Payload) != fmt.Sprint(next) {
				t.Fatalf("claim = %s, want %d", c.Payload, next)
			}
			b.QueueAck(ctx, "q", c.ID, c.Token)
			next++
		}
	}
	q := b.getQueue("q", false)
	q.mu.Lock()
	defer q.mu.Unlock()
	if n := q.ready.len(); n != 50*7 {
		t.Errorf("ready = %d, want %d", n, 50*7)
	}
	if cap(q.ready.s) > 4*50*7 {
		t.Errorf("ready holds a slice of cap %d for %d tasks: not compacted", cap(q.ready.s), q.ready.len())
	}
	if len(q.tasks) != 50*7 {
		t.Errorf("tasks = %d, want %d (acked tasks dropped)", len(q.tasks), 50*7)
	}
}
