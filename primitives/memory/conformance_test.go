package memory_test

import (
	"testing"

	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/primitives/memory"
	"github.com/fleethost/fleet/primitives/primitivestest"
)

func newBackend(t *testing.T) primitives.Backend {
	b := memory.New(memory.Options{})
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func TestConformance(t *testing.T) {
	primitivestest.Run(t, newBackend)
}

// A closed memory backend stands in for one whose server is down.
func TestConformanceUnavailable(t *testing.T) {
	primitivestest.RunUnavailable(t, func(t *testing.T) primitives.Backend {
		b := newBackend(t)
		_ = b.Close()
		return b
	})
}

// Two memory backends must agree step for step; the Redis backend's tests run the same
// sequences against memory and Redis.
func TestDifferential(t *testing.T) {
	for seed := range uint64(5) {
		primitivestest.RunDifferential(t, newBackend(t), newBackend(t), seed, 3000)
	}
}
