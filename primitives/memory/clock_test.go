package memory

import (
	"testing"

	"github.com/fleethost/fleet/internal/testutil"
)

// newFake returns a Backend on a fake clock.
func newFake(t testing.TB) (*Backend, *testutil.Clock) {
	clk := testutil.NewClock()
	b := New(Options{Clock: clk})
	t.Cleanup(func() { _ = b.Close() })
	return b, clk
}
