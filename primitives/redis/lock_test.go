package redis

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/primitives/primitivestest"
)

func TestLockState(t *testing.T) {
	b, raw := setup(t)
	start := time.Now()
	l1, ok, err := b.LockAcquire(bg, "harvest:x", 5*time.Second, 0)
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
	if _, ok, err := b.LockAcquire(bg, "harvest:x", time.Second, 0); ok || err != nil {
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
	l2, ok, _ := b.LockAcquire(bg, "harvest:x", time.Second, 0)
	if !ok || l2.Fence <= l1.Fence || l2.Token == l1.Token {
		t.Fatalf("second lease = %+v, want a new token and a fence above %d", l2, l1.Fence)
	}
	if f := raw.Get(bg, lockFenceKey("harvest:x")).Val(); f != "2" {
		t.Errorf("GET fence = %q, want 2", f)
	}
}

func TestLockExpiresAndWait(t *testing.T) {
	b, _ := setup(t)
	l1, ok, _ := b.LockAcquire(bg, "l", 50*time.Millisecond, 0)
	if !ok {
		t.Fatal("LockAcquire = not ok")
	}
	// A waiter gets it once the hold runs out.
	l2, ok, err := b.LockAcquire(bg, "l", time.Minute, time.Second)
	if err != nil || !ok || l2.Fence <= l1.Fence {
		t.Fatalf("LockAcquire with wait = %+v, %v, %v, want acquired after the hold", l2, ok, err)
	}
	if released, _ := b.LockRelease(bg, "l", l1.Token); released {
		t.Fatalf("LockRelease by the expired holder = true, want false")
	}
	// A waiter that runs out of wait gets nothing.
	begin := time.Now()
	if _, ok, err := b.LockAcquire(bg, "l", time.Second, 60*time.Millisecond); ok || err != nil {
		t.Fatalf("LockAcquire of a held lock with wait = %v, %v, want not ok", ok, err)
	}
	if d := time.Since(begin); d < 60*time.Millisecond || d > time.Second {
		t.Errorf("waited %v, want about 60ms", d)
	}
	// A cancelled wait returns ctx's error and holds nothing.
	ctx, cancel := context.WithTimeout(bg, 30*time.Millisecond)
	defer cancel()
	if _, ok, err := b.LockAcquire(ctx, "l", time.Second, time.Minute); ok || !errors.Is(err, context.DeadlineExceeded) {
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
		if _, _, err := b.LockAcquire(bg, tt.lock, tt.hold, tt.wait); !errors.Is(err, primitives.ErrInvalid) {
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
			l, ok, err := b.LockAcquire(bg, "l", time.Minute, time.Second)
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
