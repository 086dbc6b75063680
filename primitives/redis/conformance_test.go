package redis

import (
	"testing"

	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/primitives/memory"
	"github.com/fleethost/fleet/primitives/primitivestest"
)

// newBackend is the suite's fresh, empty backend: FLUSHALL on the shared server.
func newBackend(t *testing.T) primitives.Backend {
	b, _ := setup(t)
	return b
}

func TestConformance(t *testing.T) {
	primitivestest.Run(t, newBackend)
}

// TestUnavailable points backends at a server that was killed: every operation fails
// with ErrUnavailable, quickly.
func TestUnavailable(t *testing.T) {
	r := testutil.NewRedis(t)
	r.Stop()
	primitivestest.RunUnavailable(t, func(t *testing.T) primitives.Backend {
		b, err := Open(r.URL(), Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	})
}

// The same random operation sequences against the memory backend and Redis agree step
// by step, quotas and caps included.
func TestDifferential(t *testing.T) {
	for seed := range uint64(3) {
		primitivestest.RunDifferential(t, memory.New(memory.Options{}), newBackend(t), seed, 1500)
	}
}
