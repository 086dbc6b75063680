package fleettest

import (
	"testing"

	"github.com/fleethost/fleet/abi/abitest"
)

// TestABIConformance holds the fake host to abitest, the suite that the host's dispatch
// passes on the memory and the Redis backend (host/internal/hostfn): the pool, lease,
// expiry, KV, lock, counter and submit semantics a plugin's unit test sees are the
// host's.
func TestABIConformance(t *testing.T) {
	abitest.Run(t, func(t *testing.T) abitest.Serve { return New(t).w.Serve })
}
