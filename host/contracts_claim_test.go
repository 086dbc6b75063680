package host_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/primitives"
)

// TestUnfitTaskParkedAtClaim, on both backends, replays the path: a task of
// queue "jobs" written under version 1 (no "depth") waits parked; every host stops, the
// operator forgets version 1, and a consumer whose version requires "depth" starts. The
// task, requeued, never reaches the plugin: the host parks it at claim with a reason
// naming the queue, the version and the pointer, while a task that satisfies the
// contract is done.
func TestUnfitTaskParkedAtClaim(t *testing.T) {
	onBothBackends(t, func(t *testing.T, r *rig) {
		ctx := context.Background()
		old := r.jobsHost(t, jobsV1)
		// A task of version 1, parked (as a failed one is) before the upgrade.
		id := push(t, r.backend, "jobs", `{"site":"old"}`)
		lease, ok, err := r.backend.QueueClaim(ctx, "jobs", 60e9, 0)
		if err != nil || !ok || lease.ID != id {
			t.Fatalf("claim = %+v, %v, %v", lease, ok, err)
		}
		if parked, err := r.backend.QueueRelease(ctx, "jobs", id, lease.Token, primitives.Park("site down")); err != nil || !parked {
			t.Fatalf("park = %v, %v", parked, err)
		}
		if err := old.Close(); err != nil {
			t.Fatal(err)
		}
		if err := host.ForgetContractVersion(ctx, r.backend, "queue", "jobs", 1); err != nil {
			t.Fatal(err)
		}

		r.grant("a", consumer("jobs"))
		r.wat("done", "a", batchDescribe("a", "jobs", jobsRequired))
		_, _ = r.start()
		if err := r.backend.QueueRequeue(ctx, "jobs", id); err != nil {
			t.Fatal(err)
		}
		fit := push(t, r.backend, "jobs", `{"site":"new","depth":2}`)
		waitFor(t, "the unfit task parked and the fit one done", func() bool {
			st, err := r.backend.QueueStats(ctx, "jobs")
			return err == nil && st.Parked == 1 && st.Depth == 0 && st.InFlight == 0
		})
		parked, err := r.backend.QueueParked(ctx, "jobs", 10)
		if err != nil || len(parked) != 1 || parked[0].ID != id {
			t.Fatalf("parked = %+v, %v; want only task %s", parked, err, id)
		}
		for _, want := range []string{`payload does not satisfy queue "jobs"'s contract version 2`, "depth", `plugin "a"`} {
			if !strings.Contains(parked[0].LastError, want) {
				t.Errorf("parked task's reason = %q, want it to say %q", parked[0].LastError, want)
			}
		}
		var sawFit, sawUnfit bool
		for _, e := range r.events.finished() {
			switch e.TaskID {
			case fit:
				sawFit = e.Outcome == slotstate.Checkpoint
			case id:
				// The guest never ran it: a done WAT guest would have acked it.
				sawUnfit = e.Parked && !e.ParkedByPlugin && strings.Contains(e.Reason, "does not satisfy")
			}
		}
		if !sawFit || !sawUnfit {
			t.Errorf("events: fit task done %v, unfit task parked by the host %v; want both", sawFit, sawUnfit)
		}
		if !strings.Contains(r.logs.String(), "parked unseen by the plugin") {
			t.Errorf("log does not say the task was parked unseen by the plugin:\n%s", r.logs)
		}
	})
}
