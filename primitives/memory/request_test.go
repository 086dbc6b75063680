package memory

import (
	"testing"
	"time"

	"github.com/fleethost/fleet/primitives"
)

// A request named without a Keep is remembered primitives.DefaultRequestKeep, and its
// record goes once that has passed: the next write under the id is a new one.
func TestRequestDefaultKeep(t *testing.T) {
	b, clk := newFake(t)
	ctx := primitives.WithRequest(t.Context(), primitives.Request{ID: "submit-1"})
	first, _, err := b.QueuePush(ctx, "q", []byte("x"), primitives.QueuePushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(primitives.DefaultRequestKeep - time.Millisecond)
	if id, _, _ := b.QueuePush(ctx, "q", []byte("x"), primitives.QueuePushOptions{}); id != first {
		t.Fatalf("QueuePush just within the keep = %s, want the first %s", id, first)
	}
	clk.Advance(time.Millisecond)
	if id, _, _ := b.QueuePush(ctx, "q", []byte("x"), primitives.QueuePushOptions{}); id == first {
		t.Fatalf("QueuePush once the keep passed = the first id %s, want a new task", id)
	}
	q := b.getQueue("q", false)
	q.mu.Lock()
	defer q.mu.Unlock()
	if n := len(q.replays.m); n != 1 {
		t.Errorf("the queue keeps %d records, want 1: the expired one is dropped", n)
	}
}
