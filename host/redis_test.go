package host_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/primitives"
)

// TestDrainRedis: on Redis, a drain cut hands the tasks in flight back, none parked.
func TestDrainRedis(t *testing.T) {
	r := newRedisRig(t)
	goGuest(t, r.dir, "goguest")
	r.cfg.DrainTimeout = 200 * time.Millisecond
	r.cfg.MaxAttempts = 1
	h, stop := r.start()
	submitN(t, h, 1, `{"op":"spin"}`)
	waitFor(t, "the slot mid-call", func() bool { return stats(t, r.backend, goQueue).InFlight == 1 })
	stop()
	if s := stats(t, r.backend, goQueue); s != (primitives.QueueStats{Depth: 1}) {
		t.Fatalf("stats = %+v, want the task back in the queue", s)
	}
}

// TestFleetContractConflictRedis: two hosts on one Redis disagree about a queue; the
// second is refused by what the first recorded.
func TestFleetContractConflictRedis(t *testing.T) {
	r := newRedisRig(t)
	dirA, dirB := t.TempDir(), t.TempDir()
	watPlugin(t, dirA, "done", "a", batchDescribe("a", "shared-q", `{"type":"object"}`))
	watPlugin(t, dirB, "done", "b", batchDescribe("b", "shared-q", `{"type":"array"}`))
	cfg := r.cfg
	cfg.PluginsDir = dirA
	ha, err := newHost(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ha.Close()
	cfg.PluginsDir = dirB
	if _, err := newHost(cfg); err == nil || !strings.Contains(err.Error(), "the fleet") || !strings.Contains(err.Error(), "/type") {
		t.Fatalf("host.New = %v, want a fleet contract conflict at /type", err)
	}
	v, ok, err := r.backend.KVGet(context.Background(), "fleet-contracts", "queue:shared-q")
	if err != nil || !ok || string(v) != `{"type":"object"}` {
		t.Errorf("recorded contract = %s, %v, %v; want the first host's canonical schema", v, ok, err)
	}
}
