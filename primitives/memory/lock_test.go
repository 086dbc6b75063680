package memory

import (
	"fmt"
	"testing"
	"time"

	"github.com/fleethost/fleet/primitives"
)

func TestLockLeaseBoundaryAndFence(t *testing.T) {
	b, clk := newFake(t)
	ctx := t.Context()
	l1, ok, err := b.LockAcquire(ctx, "l", 10*time.Second, 0, primitives.NameQuota{})
	if err != nil || !ok || l1.Fence != 1 {
		t.Fatalf("LockAcquire = %+v, %v, %v; want fence 1", l1, ok, err)
	}
	if want := clk.Now().Add(10 * time.Second); !l1.Until.Equal(want) {
		t.Errorf("LockLease.Until = %v, want %v", l1.Until, want)
	}
	clk.Advance(10*time.Second - time.Nanosecond)
	if _, ok, _ := b.LockAcquire(ctx, "l", time.Second, 0, primitives.NameQuota{}); ok {
		t.Fatal("LockAcquire 1ns before the lease ends was acquired")
	}
	clk.Advance(time.Nanosecond)
	if released, _ := b.LockRelease(ctx, "l", l1.Token); released {
		t.Error("LockRelease when the lease ended = true, want false")
	}
	l2, ok, _ := b.LockAcquire(ctx, "l", 10*time.Second, 0, primitives.NameQuota{})
	if !ok || l2.Fence != 2 {
		t.Fatalf("LockAcquire when the lease ended = %+v, %v; want fence 2", l2, ok)
	}
	if released, _ := b.LockRelease(ctx, "l", l1.Token); released {
		t.Error("LockRelease by the expired holder = true, want false")
	}
	if released, _ := b.LockRelease(ctx, "l", l2.Token); !released {
		t.Error("LockRelease by the holder = false, want true")
	}
	l3, ok, _ := b.LockAcquire(ctx, "l", time.Second, 0, primitives.NameQuota{})
	if !ok || l3.Fence != 3 {
		t.Errorf("LockAcquire after release = %+v, %v; want fence 3", l3, ok)
	}
	// A root's locks draw from its one sequence; each root has its own.
	if l, ok, _ := b.LockAcquire(ctx, "l:sub", time.Second, 0, primitives.NameQuota{}); !ok || l.Fence != 4 {
		t.Errorf("LockAcquire(l:sub) = %+v, %v; want fence 4, the next of root l", l, ok)
	}
	if l, ok, _ := b.LockAcquire(ctx, "other", time.Second, 0, primitives.NameQuota{}); !ok || l.Fence != 1 {
		t.Errorf("LockAcquire(other) = %+v, %v; want fence 1", l, ok)
	}
}

// A lock keeps nothing past its hold: released or expired, it is gone from the
// Backend once the next acquire has run, and its owner's count with it.
func TestLockKeepsNothingPastItsHold(t *testing.T) {
	b, clk := newFake(t)
	ctx := t.Context()
	q := primitives.NameQuota{Owner: "a", Max: 1000}
	for i := range 1000 {
		l, ok, err := b.LockAcquire(ctx, fmt.Sprintf("a:%d", i), time.Second, 0, q)
		if err != nil || !ok {
			t.Fatalf("LockAcquire #%d = %v, %v", i, ok, err)
		}
		if i%2 == 0 {
			b.LockRelease(ctx, fmt.Sprintf("a:%d", i), l.Token)
		}
	}
	clk.Advance(time.Second)
	l, ok, err := b.LockAcquire(ctx, "a:last", time.Second, 0, q)
	if err != nil || !ok {
		t.Fatalf("LockAcquire(a:last) = %v, %v", ok, err)
	}
	b.LockRelease(ctx, "a:last", l.Token)
	if len(b.locks) != 0 || b.lockTTL.size() != 0 || len(b.locksHeld) != 0 || len(b.lockFences) != 1 {
		t.Errorf("after 1,001 locks released or expired: %d locks, %d deadlines, %d owners' counts, %d fence sequences; want 0, 0, 0, 1",
			len(b.locks), b.lockTTL.size(), len(b.locksHeld), len(b.lockFences))
	}
}

func TestLockTokensAreUnique(t *testing.T) {
	b, _ := newFake(t)
	seen := map[string]bool{}
	for range 1000 {
		l, ok, _ := b.LockAcquire(t.Context(), "l", time.Second, 0, primitives.NameQuota{})
		if !ok || len(l.Token) != 32 || seen[l.Token] {
			t.Fatalf("LockAcquire = %+v, %v; want a fresh 32-hex-digit token", l, ok)
		}
		seen[l.Token] = true
		b.LockRelease(t.Context(), "l", l.Token)
	}
}
