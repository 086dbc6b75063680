package testutil

import (
	"testing"
	"time"
)

// WaitFor polls cond until it holds, failing the test once limit has passed: it asserts
// that something happens, never how fast, so limit is generous.
func WaitFor(tb testing.TB, limit time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
