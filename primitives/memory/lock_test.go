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
	g1, ok, err := b.LockAcquire(ctx, "l", 10*time.Second, 0)
	if err != nil || !ok || g1.Fence != 1 {
		t.Fatalf("LockAcquire = %+v, %v, %v; want fence 1", g1, ok, err)
	}
	if want := clk.Now().Add(10 * time.Second); !g1.Until.Equal(want) {
		t.Errorf("Grant.Until = %v, want %v", g1.Until, want)
	}
	clk.Advance(10*time.Second - time.Nanosecond)
	if _, ok, _ := b.LockAcquire(ctx, "l", time.Second, 0); ok {
		t.Fatal("LockAcquire 1ns before the lease ends was granted")
	}
	clk.Advance(time.Nanosecond)
	if released, _ := b.LockRelease(ctx, "l", g1.Token); released {
		t.Error("LockRelease when the lease ended = true, want false")
	}
	g2, ok, _ := b.LockAcquire(ctx, "l", 10*time.Second, 0)
	if !ok || g2.Fence != 2 {
		t.Fatalf("LockAcquire when the lease ended = %+v, %v; want fence 2", g2, ok)
	}
	if released, _ := b.LockRelease(ctx, "l", g1.Token); released {
		t.Error("LockRelease by the expired holder = true, want false")
	}
	if released, _ := b.LockRelease(ctx, "l", g2.Token); !released {
		t.Error("LockRelease by the holder = false, want true")
	}
	g3, ok, _ := b.LockAcquire(ctx, "l", time.Second, 0)
	if !ok || g3.Fence != 3 {
		t.Errorf("LockAcquire after release = %+v, %v; want fence 3", g3, ok)
	}
	// A root's locks draw from its one sequence; each root has its own.
	if g, ok, _ := b.LockAcquire(ctx, "l:sub", time.Second, 0); !ok || g.Fence != 4 {
		t.Errorf("LockAcquire(l:sub) = %+v, %v; want fence 4, the next of root l", g, ok)
	}
	if g, ok, _ := b.LockAcquire(ctx, "other", time.Second, 0); !ok || g.Fence != 1 {
		t.Errorf("LockAcquire(other) = %+v, %v; want fence 1", g, ok)
	}
}

// A lock keeps nothing past its hold: released or expired, it is gone from the
// Backend once the next acquire has run, and its owner's count with it.
func TestLockKeepsNothingPastItsHold(t *testing.T) {
	b, clk := newFake(t)
	ctx := t.Context()
	q := primitives.NameQuota{Owner: "a", Max: 1000}
	for i := range 1000 {
		g, ok, err := b.LockAcquireWithin(ctx, fmt.Sprintf("a:%d", i), time.Second, 0, q)
		if err != nil || !ok {
			t.Fatalf("LockAcquireWithin #%d = %v, %v", i, ok, err)
		}
		if i%2 == 0 {
			b.LockRelease(ctx, fmt.Sprintf("a:%d", i), g.Token)
		}
	}
	clk.Advance(time.Second)
	g, ok, err := b.LockAcquireWithin(ctx, "a:last", time.Second, 0, q)
	if err != nil || !ok {
		t.Fatalf("LockAcquireWithin(a:last) = %v, %v", ok, err)
	}
	b.LockRelease(ctx, "a:last", g.Token)
	if len(b.locks) != 0 || b.lockTTL.size() != 0 || len(b.locksHeld) != 0 || len(b.lockFences) != 1 {
		t.Errorf("after 1,001 locks released or expired: %d locks, %d deadlines, %d owners' counts, %d fence sequences; want 0, 0, 0, 1",
			len(b.locks), b.lockTTL.size(), len(b.locksHeld), len(b.lockFences))
	}
}

func TestLockTokensAreUnique(t *testing.T) {
	b, _ := newFake(t)
	seen := map[string]bool{}
	for range 1000 {
		g, ok, _ := b.LockAcquire(t.Context(), "l", time.Second, 0)
		if !ok || len(g.Token) != 32 || seen[g.Token] {
			t.Fatalf("LockAcquire = %+v, %v; want a fresh 32-hex-digit token", g, ok)
		}
		seen[g.Token] = true
		b.LockRelease(t.Context(), "l", g.Token)
	}
}
