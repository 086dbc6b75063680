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
	{"Lease", testLockLease},
	{"ReleaseOnlyByHolder", testLockReleaseOnlyByHolder},
	{"StaleHolderCannotRelease", testLockStaleHolder},
	{"ExpiresIfHolderDies", testLockExpires},
	{"WaitZeroFailsAtOnce", testLockWaitZero},
	{"WaitRetriesUntilReleased", testLockWaitSucceeds},
	{"WaitGivesUpAtDeadline", testLockWaitTimesOut},
	{"FencesIncrease", testLockFences},
	{"ShowNamesHolderFenceAndDeadline", testLockShow},
}

func acquire(t *testing.T, b primitives.Backend, name string, hold, wait time.Duration) (primitives.LockLease, bool) {
	t.Helper()
	l, ok, err := b.LockAcquire(t.Context(), name, hold, wait, primitives.NameQuota{})
	noErr(t, fmt.Sprintf("LockAcquire(%q, %v, %v)", name, hold, wait), err)
	if ok && l.Token == "" {
		t.Fatalf("LockAcquire(%q) leased an empty token", name)
	}
	return l, ok
}

func mustAcquire(t *testing.T, b primitives.Backend, name string, hold time.Duration) primitives.LockLease {
	t.Helper()
	l, ok := acquire(t, b, name, hold, 0)
	if !ok {
		t.Fatalf("LockAcquire(%q) = not acquired, want acquired", name)
	}
	return l
}

func wantHeld(t *testing.T, b primitives.Backend, name string) {
	t.Helper()
	if l, ok := acquire(t, b, name, time.Minute, 0); ok {
		t.Errorf("LockAcquire(%q, wait 0) on a held lock was acquired (fence %d)", name, l.Fence)
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
			l, ok, err := b.LockAcquire(ctx, "migration", 10*time.Second, 10*time.Second, primitives.NameQuota{})
			if err != nil || !ok {
				t.Errorf("LockAcquire(wait 10s) = %v, %v; want acquired", ok, err)
				return
			}
			if n := inSection.Add(1); n != 1 {
				t.Errorf("%d holders in the critical section at once", n)
			}
			v := shared.Load()
			time.Sleep(time.Millisecond)
			shared.Store(v + 1)
			mu.Lock()
			fences = append(fences, l.Fence)
			mu.Unlock()
			mine[i] = append(mine[i], l.Fence)
			inSection.Add(-1)
			if ok, err := b.LockRelease(ctx, "migration", l.Token); err != nil || !ok {
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

func testLockLease(t *testing.T, b primitives.Backend) {
	const hold = 10 * time.Second
	before := time.Now()
	l := mustAcquire(t, b, "l", hold)
	after := time.Now()
	timeIn(t, "LockLease.Until", l.Until, before.Add(hold), after.Add(hold))
	wantHeld(t, b, "l")
	if !release(t, b, "l", l.Token) {
		t.Fatal("LockRelease by the holder = false, want true")
	}
	if release(t, b, "l", l.Token) {
		t.Error("LockRelease twice = true, want false")
	}
	if release(t, b, "never-held", "any-token") {
		t.Error("LockRelease(never held) = true, want false")
	}
	l2 := mustAcquire(t, b, "l", hold)
	if l2.Token == l.Token {
		t.Errorf("two leases have the same token %q", l.Token)
	}
	// Locks of other names are independent.
	mustAcquire(t, b, "other", hold)
}

func testLockReleaseOnlyByHolder(t *testing.T, b primitives.Backend) {
	l := mustAcquire(t, b, "l", time.Minute)
	if release(t, b, "l", "not-the-token") {
		t.Error("LockRelease(wrong token) = true, want false")
	}
	if release(t, b, "l", "") {
		t.Error("LockRelease(empty token) = true, want false")
	}
	wantHeld(t, b, "l")
	if !release(t, b, "l", l.Token) {
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
		t.Error("LockRelease by a holder whose lease ended and was leased again = true, want false")
	}
	wantHeld(t, b, "l")
	if !release(t, b, "l", fresh.Token) {
		t.Error("LockRelease(new holder) = false, want true")
	}
	// A lease that ended and was not leased again cannot be released either.
	l := mustAcquire(t, b, "m", hold)
	sleep(t, hold+150*time.Millisecond)
	if release(t, b, "m", l.Token) {
		t.Error("LockRelease after the lease ended = true, want false")
	}
}

func testLockExpires(t *testing.T, b primitives.Backend) {
	const hold = 150 * time.Millisecond
	start := time.Now()
	mustAcquire(t, b, "l", hold) // and the holder dies
	if _, ok := acquire(t, b, "l", time.Minute, 0); ok && time.Since(start) < hold/2 {
		t.Error("LockAcquire on a held lock was acquired before its lease ended")
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
		t.Error("LockAcquire(wait 0) on a held lock was acquired")
	}
}

func testLockWaitSucceeds(t *testing.T, b primitives.Backend) {
	const after, wait = 100 * time.Millisecond, 500 * time.Millisecond
	l := mustAcquire(t, b, "l", time.Minute)
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(after)
		if ok, err := b.LockRelease(t.Context(), "l", l.Token); err != nil || !ok {
			t.Errorf("LockRelease(holder) = %v, %v; want true", ok, err)
		}
	}()
	l2, ok := acquire(t, b, "l", time.Minute, wait)
	took := time.Since(start)
	<-done
	if !ok {
		t.Fatalf("LockAcquire(wait %v) with the holder releasing after %v was not acquired (took %v)", wait, after, took)
	}
	if took < after {
		t.Errorf("LockAcquire(wait) was acquired after %v, before the holder released at %v", took, after)
	}
	if l2.Fence <= l.Fence {
		t.Errorf("fence after waiting = %d, want > %d", l2.Fence, l.Fence)
	}
}

func testLockWaitTimesOut(t *testing.T, b primitives.Backend) {
	const wait = 300 * time.Millisecond
	mustAcquire(t, b, "l", time.Minute)
	start := time.Now()
	_, ok := acquire(t, b, "l", time.Minute, wait)
	took := time.Since(start)
	if ok {
		t.Fatal("LockAcquire(wait) on a lock held throughout was acquired")
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
	l := mustAcquire(t, b, "l", time.Minute)
	fences = append(fences, l.Fence)
	release(t, b, "l", l.Token)
	l = mustAcquire(t, b, "l", hold)
	fences = append(fences, l.Fence)
	sleep(t, hold+150*time.Millisecond) // expires, never released
	l = mustAcquire(t, b, "l", time.Minute)
	fences = append(fences, l.Fence)
	release(t, b, "l", l.Token)
	l = mustAcquire(t, b, "l", time.Minute)
	fences = append(fences, l.Fence)
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Errorf("fences across release and expiry = %v, want strictly increasing", fences)
			break
		}
	}
}

// testLockShow: LockShow reads a held lock's owner, fence and deadline, and nothing of
// a free, released or expired one.
func testLockShow(t *testing.T, b primitives.Backend) {
	show := func(name string) (primitives.LockHolder, bool) {
		t.Helper()
		h, ok, err := b.LockShow(t.Context(), name)
		noErr(t, fmt.Sprintf("LockShow(%q)", name), err)
		return h, ok
	}
	if h, ok := show("scraper:l"); ok {
		t.Errorf("LockShow(never held) = %+v, want free", h)
	}
	before := time.Now()
	l, ok, err := b.LockAcquire(t.Context(), "scraper:l", time.Minute, 0, primitives.NameQuota{Owner: "scraper", Max: 5})
	noErr(t, "LockAcquire", err)
	if !ok {
		t.Fatal("LockAcquire(free lock) = not acquired")
	}
	h, ok := show("scraper:l")
	if !ok || h.Owner != "scraper" || h.Fence != l.Fence {
		t.Errorf("LockShow(held) = %+v, %v; want owner scraper, fence %d", h, ok, l.Fence)
	}
	timeIn(t, "LockShow's until", h.Until, before.Add(time.Minute), time.Now().Add(time.Minute))
	if !release(t, b, "scraper:l", l.Token) {
		t.Fatal("LockRelease(holder) = not released")
	}
	if h, ok := show("scraper:l"); ok {
		t.Errorf("LockShow(released) = %+v, want free", h)
	}

	const hold = 150 * time.Millisecond
	l = mustAcquire(t, b, "l", hold)
	if h, ok := show("l"); !ok || h.Owner != "" || h.Fence != l.Fence {
		t.Errorf("LockShow(held, no owner) = %+v, %v; want no owner, fence %d", h, ok, l.Fence)
	}
	sleep(t, hold+150*time.Millisecond)
	if h, ok := show("l"); ok {
		t.Errorf("LockShow(hold ended) = %+v, want free", h)
	}
}
