package primitivestest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleethost/fleet/primitives"
)

var lockTests = []subtest{
	{"OneHolderAtATime", testLockHammer},
	{"Grant", testLockGrant},
	{"ReleaseOnlyByHolder", testLockReleaseOnlyByHolder},
	{"StaleHolderCannotRelease", testLockStaleHolder},
	{"ExpiresIfHolderDies", testLockExpires},
	{"WaitZeroFailsAtOnce", testLockWaitZero},
	{"WaitRetriesUntilReleased", testLockWaitSucceeds},
	{"WaitGivesUpAtDeadline", testLockWaitTimesOut},
	{"FencesIncrease", testLockFences},
}

func acquire(t *testing.T, b primitives.Backend, name string, hold, wait time.Duration) (primitives.Grant, bool) {
	t.Helper()
	g, ok, err := b.LockAcquire(t.Context(), name, hold, wait)
	noErr(t, fmt.Sprintf("LockAcquire(%q, %v, %v)", name, hold, wait), err)
	if ok && g.Token == "" {
		t.Fatalf("LockAcquire(%q) granted an empty token", name)
	}
	return g, ok
}

func mustAcquire(t *testing.T, b primitives.Backend, name string, hold time.Duration) primitives.Grant {
	t.Helper()
	g, ok := acquire(t, b, name, hold, 0)
	if !ok {
		t.Fatalf("LockAcquire(%q) = not granted, want granted", name)
	}
	return g
}

func wantHeld(t *testing.T, b primitives.Backend, name string) {
	t.Helper()
	if g, ok := acquire(t, b, name, time.Minute, 0); ok {
		t.Errorf("LockAcquire(%q, wait 0) on a held lock was granted (fence %d)", name, g.Fence)
	}
}

func release(t *testing.T, b primitives.Backend, name, token string) bool {
	t.Helper()
	ok, err := b.LockRelease(t.Context(), name, token)
	noErr(t, fmt.Sprintf("LockRelease(%q)", name), err)
	return ok
}

func testLockHammer(t *testing.T, b primitives.Backend) {
	const holders, rounds = 20, 3
	var (
		inSection atomic.Int32
		// shared is incremented by a read, a pause and a write: without exclusion,
		// increments get lost. It is an atomic only because the race detector cannot see
		// the happens-before edge a remote lock gives.
		shared atomic.Int64
		mu     sync.Mutex
		fences []int64 // in the order of the critical sections
		mine   = make([][]int64, holders)
	)
	ctx := t.Context()
	Hammer(holders, func(i int) {
		for range rounds {
			g, ok, err := b.LockAcquire(ctx, "migration", 10*time.Second, 10*time.Second)
			if err != nil || !ok {
				t.Errorf("LockAcquire(wait 10s) = %v, %v; want granted", ok, err)
				return
			}
			if n := inSection.Add(1); n != 1 {
				t.Errorf("%d holders in the critical section at once", n)
			}
			v := shared.Load()
			time.Sleep(time.Millisecond)
			shared.Store(v + 1)
			mu.Lock()
			fences = append(fences, g.Fence)
			mu.Unlock()
			mine[i] = append(mine[i], g.Fence)
			inSection.Add(-1)
			if ok, err := b.LockRelease(ctx, "migration", g.Token); err != nil || !ok {
				t.Errorf("LockRelease by the holder = %v, %v; want true", ok, err)
			}
		}
	})
	if got := shared.Load(); got != holders*rounds {
		t.Errorf("shared counter = %d after %d critical sections, want %d (lost updates)", got, holders*rounds, holders*rounds)
	}
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Errorf("fences in critical-section order %v do not strictly increase at %d", fences, i)
			break
		}
	}
	for i, fs := range mine {
		for j := 1; j < len(fs); j++ {
			if fs[j] <= fs[j-1] {
				t.Errorf("holder %d got fences %v, want increasing", i, fs)
			}
		}
	}
}

func testLockGrant(t *testing.T, b primitives.Backend) {
	const hold = 10 * time.Second
	before := time.Now()
	g := mustAcquire(t, b, "l", hold)
	after := time.Now()
	timeIn(t, "Grant.Until", g.Until, before.Add(hold), after.Add(hold))
	wantHeld(t, b, "l")
	if !release(t, b, "l", g.Token) {
		t.Fatal("LockRelease by the holder = false, want true")
	}
	if release(t, b, "l", g.Token) {
		t.Error("LockRelease twice = true, want false")
	}
	if release(t, b, "never-held", "any-token") {
		t.Error("LockRelease(never held) = true, want false")
	}
	g2 := mustAcquire(t, b, "l", hold)
	if g2.Token == g.Token {
		t.Errorf("two grants have the same token %q", g.Token)
	}
	// Locks of other names are independent.
	mustAcquire(t, b, "other", hold)
}

func testLockReleaseOnlyByHolder(t *testing.T, b primitives.Backend) {
	g := mustAcquire(t, b, "l", time.Minute)
	if release(t, b, "l", "not-the-token") {
		t.Error("LockRelease(wrong token) = true, want false")
	}
	if release(t, b, "l", "") {
		t.Error("LockRelease(empty token) = true, want false")
	}
	wantHeld(t, b, "l")
	if !release(t, b, "l", g.Token) {
		t.Error("LockRelease(holder) = false, want true")
	}
	mustAcquire(t, b, "l", time.Minute)
}

func testLockStaleHolder(t *testing.T, b primitives.Backend) {
	const hold = 150 * time.Millisecond
	stale := mustAcquire(t, b, "l", hold)
	sleep(t, hold+150*time.Millisecond)
	fresh := mustAcquire(t, b, "l", time.Minute)
	if release(t, b, "l", stale.Token) {
		t.Error("LockRelease by a holder whose lease ended and was re-granted = true, want false")
	}
	wantHeld(t, b, "l")
	if !release(t, b, "l", fresh.Token) {
		t.Error("LockRelease(new holder) = false, want true")
	}
	// A lease that ended and was not re-granted cannot be released either.
	g := mustAcquire(t, b, "m", hold)
	sleep(t, hold+150*time.Millisecond)
	if release(t, b, "m", g.Token) {
		t.Error("LockRelease after the lease ended = true, want false")
	}
}

func testLockExpires(t *testing.T, b primitives.Backend) {
	const hold = 150 * time.Millisecond
	start := time.Now()
	mustAcquire(t, b, "l", hold) // and the holder dies
	if _, ok := acquire(t, b, "l", time.Minute, 0); ok && time.Since(start) < hold/2 {
		t.Error("LockAcquire on a held lock was granted before its lease ended")
	}
	sleep(t, hold+150*time.Millisecond)
	mustAcquire(t, b, "l", time.Minute)
}

func testLockWaitZero(t *testing.T, b primitives.Backend) {
	mustAcquire(t, b, "l", time.Minute)
	start := time.Now()
	_, ok := acquire(t, b, "l", time.Minute, 0)
	if took := time.Since(start); took > 50*time.Millisecond {
		t.Errorf("LockAcquire(wait 0) on a held lock took %v, want at once (<50ms)", took)
	}
	if ok {
		t.Error("LockAcquire(wait 0) on a held lock was granted")
	}
}

func testLockWaitSucceeds(t *testing.T, b primitives.Backend) {
	const after, wait = 100 * time.Millisecond, 500 * time.Millisecond
	g := mustAcquire(t, b, "l", time.Minute)
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(after)
		if ok, err := b.LockRelease(t.Context(), "l", g.Token); err != nil || !ok {
			t.Errorf("LockRelease(holder) = %v, %v; want true", ok, err)
		}
	}()
	g2, ok := acquire(t, b, "l", time.Minute, wait)
	took := time.Since(start)
	<-done
	if !ok {
		t.Fatalf("LockAcquire(wait %v) with the holder releasing after %v was not granted (took %v)", wait, after, took)
	}
	if took < after {
		t.Errorf("LockAcquire(wait) was granted after %v, before the holder released at %v", took, after)
	}
	if g2.Fence <= g.Fence {
		t.Errorf("fence after waiting = %d, want > %d", g2.Fence, g.Fence)
	}
}

func testLockWaitTimesOut(t *testing.T, b primitives.Backend) {
	const wait = 300 * time.Millisecond
	mustAcquire(t, b, "l", time.Minute)
	start := time.Now()
	_, ok := acquire(t, b, "l", time.Minute, wait)
	took := time.Since(start)
	if ok {
		t.Fatal("LockAcquire(wait) on a lock held throughout was granted")
	}
	if took < wait {
		t.Errorf("LockAcquire(wait %v) gave up after %v, before its deadline", wait, took)
	}
	if took > wait+time.Second {
		t.Errorf("LockAcquire(wait %v) gave up after %v, long past its deadline", wait, took)
	}
}

func testLockFences(t *testing.T, b primitives.Backend) {
	const hold = 150 * time.Millisecond
	var fences []int64
	g := mustAcquire(t, b, "l", time.Minute)
	fences = append(fences, g.Fence)
	release(t, b, "l", g.Token)
	g = mustAcquire(t, b, "l", hold)
	fences = append(fences, g.Fence)
	sleep(t, hold+150*time.Millisecond) // expires, never released
	g = mustAcquire(t, b, "l", time.Minute)
	fences = append(fences, g.Fence)
	release(t, b, "l", g.Token)
	g = mustAcquire(t, b, "l", time.Minute)
	fences = append(fences, g.Fence)
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Errorf("fences across release and expiry = %v, want strictly increasing", fences)
			break
		}
	}
}
