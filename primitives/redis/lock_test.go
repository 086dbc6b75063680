package redis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/primitives/primitivestest"
)

func TestLockState(t *testing.T) {
	b, raw := setup(t)
	start := time.Now()
	l1, ok, err := b.LockAcquire(bg, "harvest:x", 5*time.Second, 0, primitives.NameQuota{})
	if err != nil || !ok {
		t.Fatalf("LockAcquire = %v, %v", ok, err)
	}
	if l1.Token == "" || l1.Fence < 1 || l1.Until.Before(start.Add(5*time.Second)) || l1.Until.After(time.Now().Add(5*time.Second)) {
		t.Fatalf("LockAcquire = %+v, want a token, a fence and start+5s", l1)
	}
	if v := raw.Get(bg, lockKey("harvest:x")).Val(); v != l1.Token {
		t.Errorf("GET lock = %q, want the token %q", v, l1.Token)
	}
	if ttl := raw.PTTL(bg, lockKey("harvest:x")).Val(); ttl <= 4*time.Second || ttl > 5*time.Second {
		t.Errorf("PTTL lock = %v, want about 5s", ttl)
	}
	if _, ok, err := b.LockAcquire(bg, "harvest:x", time.Second, 0, primitives.NameQuota{}); ok || err != nil {
		t.Fatalf("LockAcquire of a held lock = %v, %v, want not ok", ok, err)
	}
	if released, err := b.LockRelease(bg, "harvest:x", "not-mine"); released || err != nil {
		t.Fatalf("LockRelease(wrong token) = %v, %v, want false", released, err)
	}
	if released, err := b.LockRelease(bg, "harvest:x", l1.Token); !released || err != nil {
		t.Fatalf("LockRelease = %v, %v, want true", released, err)
	}
	if raw.Exists(bg, lockKey("harvest:x")).Val() != 0 {
		t.Errorf("lock key still exists after release")
	}
	if released, _ := b.LockRelease(bg, "harvest:x", l1.Token); released {
		t.Fatalf("LockRelease twice = true, want false")
	}
	l2, ok, _ := b.LockAcquire(bg, "harvest:x", time.Second, 0, primitives.NameQuota{})
	if !ok || l2.Fence <= l1.Fence || l2.Token == l1.Token {
		t.Fatalf("second lease = %+v, want a new token and a fence above %d", l2, l1.Fence)
	}
	if f, _ := raw.Get(bg, lockFenceKey("harvest:x")).Int64(); f != l2.Fence || l2.Fence != l1.Fence+1 {
		t.Errorf("GET fence = %d after fences %d, %d; want the root's sequence at the last", f, l1.Fence, l2.Fence)
	}
	// The root's first fence is Redis's clock in µs: above any per-name sequence of the
	// layout before, and above what a lost sequence had drawn.
	if now := time.Now().UnixMicro(); l1.Fence < start.UnixMicro()-int64(time.Minute/time.Microsecond) || l1.Fence > now+int64(time.Minute/time.Microsecond) {
		t.Errorf("first fence of a root = %d, want Redis's clock in µs (about %d)", l1.Fence, now)
	}
}

// A lock keeps no key past its hold: after thousands of distinct names, released or
// expired, with and without an owner, only the root's fence sequence remains, and the
// owner's ledger is emptied of them.
func TestLockKeepsNothingPastItsHold(t *testing.T) {
	b, raw := setup(t)
	owned := primitives.NameQuota{Owner: "worker"}
	for i := range 2000 {
		name := fmt.Sprintf("worker:hold:%d", i)
		hold, q := time.Minute, primitives.NameQuota{}
		if i%2 == 0 {
			hold, q = 20*time.Millisecond, owned // left to expire
		}
		l, ok, err := b.LockAcquire(bg, name, hold, 0, q)
		if err != nil || !ok {
			t.Fatalf("LockAcquire(%s) = %v, %v", name, ok, err)
		}
		if i%2 == 1 {
			if released, err := b.LockRelease(bg, name, l.Token); !released || err != nil {
				t.Fatalf("LockRelease(%s) = %v, %v", name, released, err)
			}
		}
	}
	fence, ledger := lockFenceKey("worker:x"), lockHeldKey("worker:x", "worker")
	testutil.WaitFor(t, 10*time.Second, "every hold ended", func() bool {
		return len(stateKeys(t, raw, "fleet:lock:*")) == 2
	})
	// Each owned acquire drops the ended holds first: what is left ended since the last.
	if n := raw.ZCard(bg, ledger).Val(); n < 1 || n > 1000 {
		t.Errorf("ZCARD ledger before the next owned acquire = %d, want 1..1000 (the holds ended since the last owned acquire)", n)
	}
	l, ok, err := b.LockAcquire(bg, "worker:last", time.Minute, 0, owned)
	if err != nil || !ok {
		t.Fatalf("LockAcquire(worker:last) = %v, %v", ok, err)
	}
	if members := raw.ZRange(bg, ledger, 0, -1).Val(); len(members) != 1 || members[0] != "worker:last" {
		t.Errorf("ledger after an owned acquire = %v, want only worker:last (the ended holds pruned)", members)
	}
	b.LockRelease(bg, "worker:last", l.Token)
	if keys := stateKeys(t, raw, "fleet:lock:*"); len(keys) != 1 || keys[0] != fence {
		t.Errorf("keys after 2,001 locks released or expired = %v, want only %s", keys, fence)
	}
}

func TestLockExpiresAndWait(t *testing.T) {
	b, _ := setup(t)
	l1, ok, _ := b.LockAcquire(bg, "l", 50*time.Millisecond, 0, primitives.NameQuota{})
	if !ok {
		t.Fatal("LockAcquire = not ok")
	}
	// A waiter gets it once the hold runs out.
	l2, ok, err := b.LockAcquire(bg, "l", time.Minute, time.Second, primitives.NameQuota{})
	if err != nil || !ok || l2.Fence <= l1.Fence {
		t.Fatalf("LockAcquire with wait = %+v, %v, %v, want acquired after the hold", l2, ok, err)
	}
	if released, _ := b.LockRelease(bg, "l", l1.Token); released {
		t.Fatalf("LockRelease by the expired holder = true, want false")
	}
	// A waiter that runs out of wait gets nothing.
	begin := time.Now()
	if _, ok, err := b.LockAcquire(bg, "l", time.Second, 60*time.Millisecond, primitives.NameQuota{}); ok || err != nil {
		t.Fatalf("LockAcquire of a held lock with wait = %v, %v, want not ok", ok, err)
	}
	if d := time.Since(begin); d < 60*time.Millisecond || d > time.Second {
		t.Errorf("waited %v, want about 60ms", d)
	}
	// A cancelled wait returns ctx's error and holds nothing.
	ctx, cancel := context.WithTimeout(bg, 30*time.Millisecond)
	defer cancel()
	if _, ok, err := b.LockAcquire(ctx, "l", time.Second, time.Minute, primitives.NameQuota{}); ok || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("LockAcquire with a cancelled ctx = %v, %v, want DeadlineExceeded", ok, err)
	}
}

func TestLockValidation(t *testing.T) {
	b, raw := setup(t)
	for _, tt := range []struct {
		name       string
		lock       string
		hold, wait time.Duration
	}{
		{"bad name", "a}b", time.Second, 0},
		{"zero hold", "l", 0, 0},
		{"negative wait", "l", time.Second, -1},
	} {
		if _, _, err := b.LockAcquire(bg, tt.lock, tt.hold, tt.wait, primitives.NameQuota{}); !errors.Is(err, primitives.ErrInvalid) {
			t.Errorf("%s: LockAcquire = %v, want ErrInvalid", tt.name, err)
		}
	}
	if n := raw.DBSize(bg).Val(); n != 0 {
		t.Fatalf("DBSIZE = %d, want 0", n)
	}
}

// Hammer: P goroutines race for one lock; at most one holds it at any moment, and
// fences never repeat.
func TestLockHammer(t *testing.T) {
	b, _ := setup(t)
	var holders atomic.Int32
	var mu sync.Mutex
	fences := map[int64]bool{}
	primitivestest.Hammer(8, func(int) {
		for range 20 {
			l, ok, err := b.LockAcquire(bg, "l", time.Minute, time.Second, primitives.NameQuota{})
			if err != nil || !ok {
				t.Errorf("LockAcquire = %v, %v", ok, err)
				return
			}
			if n := holders.Add(1); n != 1 {
				t.Errorf("%d holders at once", n)
			}
			mu.Lock()
			if fences[l.Fence] {
				t.Errorf("fence %d leased twice", l.Fence)
			}
			fences[l.Fence] = true
			mu.Unlock()
			holders.Add(-1)
			if ok, err := b.LockRelease(bg, "l", l.Token); !ok || err != nil {
				t.Errorf("LockRelease = %v, %v", ok, err)
			}
		}
	})
	if len(fences) != 160 {
		t.Fatalf("%d leases, want 160", len(fences))
	}
}
