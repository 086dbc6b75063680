package testutil

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/fleethost/fleet/primitives"
)

// CheckGoroutines fails the test if, once it has cleaned up, more goroutines are alive
// than when it started (after a settle period: wazero, net/http and the runtime end
// theirs lazily). Call it first, so that its cleanup runs last.
func CheckGoroutines(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			n := runtime.NumGoroutine()
			if n <= before {
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				t.Errorf("goroutines: %d alive after the test, %d before\n%s", n, before, buf)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// QueueStats reads a queue's counts from b, failing the test on an error.
func QueueStats(tb testing.TB, b primitives.Backend, queue string) primitives.QueueStats {
	tb.Helper()
	s, err := b.QueueStats(context.Background(), queue)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// Counter reads a counter from b, failing the test on an error.
func Counter(tb testing.TB, b primitives.Backend, name string) int64 {
	tb.Helper()
	v, err := b.CounterGet(context.Background(), name)
	if err != nil {
		tb.Fatal(err)
	}
	return v
}
