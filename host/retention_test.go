package host_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
)

// parkOne pushes a task to queue and parks it (its one attempt failed).
func parkOne(t *testing.T, b primitives.Backend, queue string) {
	t.Helper()
	ctx := context.Background()
	push(t, b, queue, `{}`)
	c, ok, err := b.QueueClaim(ctx, queue, time.Minute, 1)
	if err != nil || !ok {
		t.Fatalf("QueueClaim(%s) = %v, %v", queue, ok, err)
	}
	if parked, err := b.QueueRelease(ctx, queue, c.ID, c.Token, primitives.Retry{Reason: "boom", MaxAttempts: 1}); !parked || err != nil {
		t.Fatalf("QueueRelease(%s) = %v, %v; want parked", queue, parked, err)
	}
}

// TestParkedRetention: a host deletes the parked tasks of the queues its plugins consume
// once they are older than the retention, Config.ParkedRetention or the plugin's grant's
// own; a queue whose retention is longer keeps them.
func TestParkedRetention(t *testing.T) {
	r := newRig(t)
	r.wat("done", "drop", batchDescribe("drop", "drop-q", anyObject))
	r.wat("done", "keep", batchDescribe("keep", "keep-q", anyObject))
	keep := r.cfg.Grants["keep"]
	keep.ParkedRetention = time.Hour
	r.grant("keep", keep)
	r.cfg.ParkedRetention = 200 * time.Millisecond
	r.cfg.SlotsByType = map[string]int{"drop": 0, "keep": 0} // nothing claims: only the pruner changes the queues
	parkOne(t, r.backend, "drop-q")
	parkOne(t, r.backend, "keep-q")
	h, stop := r.start()
	for _, p := range h.Plugins() {
		if want := map[string]time.Duration{"drop": 200 * time.Millisecond, "keep": time.Hour}[p.Type]; p.Grant.ParkedRetention != want {
			t.Errorf("plugin %s: Grant.ParkedRetention = %v, want %v", p.Type, p.Grant.ParkedRetention, want)
		}
	}
	waitFor(t, "drop-q's parked task deleted", func() bool { return testutil.QueueStats(t, r.backend, "drop-q").Parked == 0 })
	parkOne(t, r.backend, "drop-q") // parked while the host runs: pruned too, once it is old enough
	waitFor(t, "drop-q's second parked task deleted", func() bool { return testutil.QueueStats(t, r.backend, "drop-q").Parked == 0 })
	stop()
	if st := testutil.QueueStats(t, r.backend, "keep-q"); st.Parked != 1 {
		t.Errorf("keep-q (retention 1h) = %+v, want its parked task kept", st)
	}
	if !strings.Contains(r.logs.String(), "parked tasks past their retention deleted") {
		t.Errorf("no log line of the deletion:\n%s", r.logs)
	}
}

// TestParkedRetentionBackendDown: prunes that fail while Redis is down are logged once
// when they start failing and once when they work again, not at every tick.
func TestParkedRetentionBackendDown(t *testing.T) {
	const retention = 200 * time.Millisecond // prunes every 100ms
	r := newRedisRig(t)
	r.wat("done", "drop", batchDescribe("drop", "drop-q", anyObject))
	r.cfg.ParkedRetention = retention
	r.cfg.SlotsByType = map[string]int{"drop": 0}
	_, stop := r.start()
	const failed, works = "host: prune parked tasks failed", "host: prune parked tasks works again"
	r.redis.Stop()
	waitFor(t, "a failed prune logged", func() bool { return strings.Contains(r.logs.String(), failed) })
	down := time.Now()
	waitFor(t, "five prune intervals with Redis down", func() bool { return time.Since(down) > 5*retention/2 })
	if err := r.redis.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the prunes working again, logged", func() bool { return strings.Contains(r.logs.String(), works) })
	stop()
	if n := strings.Count(r.logs.String(), failed); n != 1 {
		t.Errorf("%d lines %q over five intervals of Redis down, want 1:\n%s", n, failed, r.logs)
	}
}
