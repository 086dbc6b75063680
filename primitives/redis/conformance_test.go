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

// TestConformanceCluster runs the whole suite on a real 3-master Redis Cluster, so that
// every script's keys, declared or derived from a declared prefix, are proven to be
// served by one node.
func TestConformanceCluster(t *testing.T) {
	primitivestest.Run(t, func(t *testing.T) primitives.Backend {
		b, _ := clusterSetup(t)
		return b
	})
}

// TestUnavailable points backends at a server that was killed: every operation fails
// with ErrUnavailable, quickly.
func TestUnavailable(t *testing.T) {
	r := testutil.NewRedis(t)
	r.Stop()
	primitivestest.RunUnavailable(t, opener(r.URL()))
}

// opener opens a fresh Backend on url for each subtest, closed when it ends.
func opener(url string) func(t *testing.T) primitives.Backend {
	return func(t *testing.T) primitives.Backend {
		b, err := Open(url, Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
}

// The same random operation sequences against the memory backend and Redis agree step
// by step, quotas and caps included.
func TestDifferential(t *testing.T) {
	for seed := range uint64(3) {
		primitivestest.RunDifferential(t, memory.New(memory.Options{}), newBackend(t), seed, 1500)
	}
}

// TestUnavailableCluster is TestUnavailable on a redis+cluster:// URL whose seeds are all
// dead: the cluster client's errors (no node answers CLUSTER SLOTS) are ErrUnavailable too.
func TestUnavailableCluster(t *testing.T) {
	var addrs []string
	for range 3 {
		r := testutil.NewRedis(t)
		r.Stop()
		addrs = append(addrs, r.Addr)
	}
	url := "redis+cluster://" + addrs[0] + "?addr=" + addrs[1] + "&addr=" + addrs[2]
	primitivestest.RunUnavailable(t, opener(url))
}
