package primitivestest

import (
	"testing"

	"github.com/fleethost/fleet/primitives"
)

var counterTests = []subtest{
	{"NoLostUpdates", testCounterHammer},
	{"IncrDecr", testCounterIncrDecr},
	{"UntouchedIsZero", testCounterUntouched},
}

func testCounterHammer(t *testing.T, b primitives.Backend) {
	const workers, incrs = 10, 100
	ctx := t.Context()
	Hammer(workers, func(int) {
		for range incrs {
			if _, err := b.CounterIncr(ctx, "inflight", 1, primitives.NameQuota{}); err != nil {
				t.Errorf("CounterIncr = %v, want nil", err)
				return
			}
		}
	})
	n, err := b.CounterGet(ctx, "inflight")
	noErr(t, "CounterGet", err)
	if n != workers*incrs {
		t.Errorf("CounterGet after %d×%d increments = %d, want %d", workers, incrs, n, workers*incrs)
	}
}

func testCounterIncrDecr(t *testing.T, b primitives.Backend) {
	steps := []struct {
		delta, want int64
	}{
		{1, 1}, {1, 2}, {-1, 1}, {7, 8}, {-10, -2}, {0, -2}, {1 << 40, 1<<40 - 2},
	}
	for _, s := range steps {
		got, err := b.CounterIncr(t.Context(), "c", s.delta, primitives.NameQuota{})
		noErr(t, "CounterIncr", err)
		if got != s.want {
			t.Errorf("CounterIncr(%d) = %d, want %d", s.delta, got, s.want)
		}
	}
	got, err := b.CounterGet(t.Context(), "c")
	noErr(t, "CounterGet", err)
	if want := int64(1<<40 - 2); got != want {
		t.Errorf("CounterGet = %d, want %d", got, want)
	}
	if got, _ := b.CounterGet(t.Context(), "c2"); got != 0 {
		t.Errorf("CounterGet(other counter) = %d, want 0", got)
	}
}

func testCounterUntouched(t *testing.T, b primitives.Backend) {
	got, err := b.CounterGet(t.Context(), "never-touched")
	noErr(t, "CounterGet", err)
	if got != 0 {
		t.Errorf("CounterGet(untouched) = %d, want 0", got)
	}
	got, err = b.CounterIncr(t.Context(), "fresh", -3, primitives.NameQuota{})
	noErr(t, "CounterIncr", err)
	if got != -3 {
		t.Errorf("CounterIncr(untouched, -3) = %d, want -3", got)
	}
}
