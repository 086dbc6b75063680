package memory

import (
	"errors"
	"math"
	"testing"

	"github.com/fleethost/fleet/primitives"
)

func TestCounterOverflow(t *testing.T) {
	b, _ := newFake(t)
	ctx := t.Context()
	if _, err := b.CounterIncr(ctx, "c", math.MaxInt64, primitives.NameQuota{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CounterIncr(ctx, "c", 1, primitives.NameQuota{}); !errors.Is(err, primitives.ErrLimit) {
		t.Errorf("CounterIncr past MaxInt64 = %v, want ErrLimit", err)
	}
	if n, _ := b.CounterGet(ctx, "c"); n != math.MaxInt64 {
		t.Errorf("CounterGet after a refused overflow = %d, want MaxInt64", n)
	}
	b.CounterIncr(ctx, "d", math.MinInt64, primitives.NameQuota{})
	if _, err := b.CounterIncr(ctx, "d", -1, primitives.NameQuota{}); !errors.Is(err, primitives.ErrLimit) {
		t.Errorf("CounterIncr past MinInt64 = %v, want ErrLimit", err)
	}
}
