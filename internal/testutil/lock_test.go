package testutil

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

// TestLockExcludesAnotherOpen holds lock to exclusion across opens of the file, which is
// what excludes another test binary: flock's lock belongs to an open file, not a process.
func TestLockExcludesAnotherOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	unlock, err := lock(path)
	if err != nil {
		t.Fatal(err)
	}
	other, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := syscall.Flock(int(other.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("flock of another open while locked = %v, want EWOULDBLOCK", err)
	}
	unlock()
	if err := syscall.Flock(int(other.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatalf("flock of another open after unlock = %v, want nil", err)
	}
}

// TestCachedBuildsOnce: callers that want one product at once build it once, and each
// gets it.
func TestCachedBuildsOnce(t *testing.T) {
	out := filepath.Join(t.TempDir(), "kind", "guest.wasm")
	var builds atomic.Int32
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			errs[i] = cachedErr(out, func(tmp string) error {
				builds.Add(1)
				return os.WriteFile(tmp, []byte("\x00asm"), 0o644)
			})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("cachedErr #%d = %v, want nil", i, err)
		}
	}
	if n := builds.Load(); n != 1 {
		t.Errorf("builds = %d, want 1", n)
	}
	if b, err := os.ReadFile(out); err != nil || string(b) != "\x00asm" {
		t.Errorf("ReadFile(out) = %q, %v; want the build", b, err)
	}
}
