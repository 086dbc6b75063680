package primitives

import (
	"testing"
	"time"
)

// TestBackoff: the nth bound is Base × Factor^(n-1) up to Max, and each wait lies in the
// upper half of its bound.
func TestBackoff(t *testing.T) {
	b := Backoff{Base: time.Second, Factor: 2, Max: 5 * time.Minute}
	for n, want := range map[int]time.Duration{0: time.Second, 1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second, 9: 256 * time.Second, 10: 5 * time.Minute, 1000: 5 * time.Minute} {
		if got := b.Bound(n); got != want {
			t.Errorf("Bound(%d) = %v, want %v", n, got, want)
		}
		for range 100 {
			if w := b.Wait(n); w < want/2 || w > want {
				t.Fatalf("Wait(%d) = %v, want within [%v, %v]", n, w, want/2, want)
			}
		}
	}
	if got := (Backoff{Base: time.Second, Factor: 1, Max: time.Minute}).Bound(50); got != time.Second {
		t.Errorf("Factor 1: Bound(50) = %v, want the base", got)
	}
	if got := (Backoff{}).Wait(3); got != 0 {
		t.Errorf("the zero Backoff waits %v, want 0", got)
	}
}
