package host_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
)

// TestDrainRedis: on Redis, a drain cut hands the tasks in flight back, none parked.
func TestDrainRedis(t *testing.T) {
	r := newRedisRig(t)
	r.goGuest()
	r.cfg.DrainTimeout = 200 * time.Millisecond
	r.cfg.MaxAttempts = 1
	h, stop := r.start()
	submitN(t, h, 1, `{"op":"spin"}`)
	waitFor(t, "the slot mid-call", func() bool { return testutil.QueueStats(t, r.backend, goQueue).InFlight == 1 })
	stop()
	if s := testutil.QueueStats(t, r.backend, goQueue); s != (primitives.QueueStats{Depth: 1}) {
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
	cfg.Grants = map[string]host.Grant{"a": consumer("shared-q"), "b": consumer("shared-q")}
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
	if v := latestSchema(t, r.backend, "queue:shared-q"); v != `{"type":"object"}` {
		t.Errorf("recorded contract = %s; want the first host's canonical schema", v)
	}
}

// TestRedisOutage: the host keeps running while Redis is down and works again when it is
// back (a fresh, empty server on the same port).
func TestRedisOutage(t *testing.T) {
	r := newRedisRig(t)
	r.goGuest()
	r.cfg.Slots = 2
	claims := &failedClaims{Backend: r.backend}
	r.cfg.Backend = claims
	h, stop := r.start()
	waitFor(t, "the slots to poll", func() bool { return r.events.Count("idle") >= 2 })
	r.redis.Stop()
	// Each slot logs its first failed claim: past it, an idle from a claim made before the
	// outage has been said.
	waitFor(t, "both slots to fail a claim", func() bool { return strings.Count(r.logs.String(), "slot: claim failed") >= 2 })
	idle, failed := r.events.Count("idle"), claims.failed.Load()
	waitFor(t, "the slots to poll the dead backend", func() bool { return claims.failed.Load() >= failed+10 })
	if got := r.events.Count("idle"); got != idle {
		t.Errorf("slots reported idle %d times while the backend was down; a failed claim is not idle", got-idle)
	}
	if err := r.redis.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "Submit to work again", func() bool {
		_, err := h.Submit(context.Background(), goQueue, []byte(`{"op":"incr"}`))
		return err == nil
	})
	waitFor(t, "the task to be handled", func() bool { return len(r.events.Finished("")) >= 1 })
	stop()
	if got := r.events.Outcomes(""); got["done"] < 1 {
		t.Errorf("outcomes = %v, want the task done after the outage", got)
	}
}

// failedClaims is a backend that counts the claims it fails (QueueAckClaim's n), so that a
// test sees the slots poll a backend that is down.
type failedClaims struct {
	primitives.Backend
	failed atomic.Int64
}

func (b *failedClaims) QueueAckClaim(ctx context.Context, queue string, acks []primitives.Ack, n int, lease time.Duration, maxAttempts int) ([]primitives.TaskLease, []error, error) {
	claimed, ackErrs, err := b.Backend.QueueAckClaim(ctx, queue, acks, n, lease, maxAttempts)
	if err != nil {
		b.failed.Add(int64(n))
	}
	return claimed, ackErrs, err
}
