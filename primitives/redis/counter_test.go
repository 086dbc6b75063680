package redis

import (
	"errors"
	"testing"

	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/primitives/primitivestest"
)

func TestCounter(t *testing.T) {
	b, raw := setup(t)
	if n, err := b.CounterGet(bg, "inflight"); n != 0 || err != nil {
		t.Fatalf("CounterGet(untouched) = %d, %v, want 0", n, err)
	}
	if n, _ := b.CounterIncr(bg, "inflight", 5, primitives.NameQuota{}); n != 5 {
		t.Fatalf("CounterIncr(5) = %d, want 5", n)
	}
	if n, _ := b.CounterIncr(bg, "inflight", -7, primitives.NameQuota{}); n != -2 {
		t.Fatalf("CounterIncr(-7) = %d, want -2", n)
	}
	if v := raw.Get(bg, counterKey("inflight")).Val(); v != "-2" {
		t.Fatalf("GET counter = %q, want -2", v)
	}
	if n, _ := b.CounterGet(bg, "inflight"); n != -2 {
		t.Fatalf("CounterGet = %d, want -2", n)
	}
	if _, err := b.CounterIncr(bg, "bad name", 1, primitives.NameQuota{}); !errors.Is(err, primitives.ErrInvalid) {
		t.Fatalf("CounterIncr(bad name) = %v, want ErrInvalid", err)
	}
	// A foreign value under the key is an error, not an outage.
	raw.Set(bg, counterKey("foreign"), "x", 0)
	if _, err := b.CounterGet(bg, "foreign"); err == nil || errors.Is(err, primitives.ErrUnavailable) {
		t.Fatalf("CounterGet(foreign value) = %v, want a plain error", err)
	}
	if _, err := b.CounterIncr(bg, "foreign", 1, primitives.NameQuota{}); err == nil || errors.Is(err, primitives.ErrUnavailable) {
		t.Fatalf("CounterIncr(foreign value) = %v, want a plain error", err)
	}
}

// 10 goroutines × 100 increments end at exactly 1000.
func TestCounterHammer(t *testing.T) {
	b, _ := setup(t)
	primitivestest.Hammer(10, func(int) {
		for range 100 {
			if _, err := b.CounterIncr(bg, "c", 1, primitives.NameQuota{}); err != nil {
				t.Error(err)
				return
			}
		}
	})
	if n, _ := b.CounterGet(bg, "c"); n != 1000 {
		t.Fatalf("CounterGet = %d, want 1000", n)
	}
}
