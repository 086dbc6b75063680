package host_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fleethost/fleet/host/contracts"
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
		if err := contracts.Forget(ctx, r.backend, "queue", "jobs", 1); err != nil {
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
		for _, e := range r.events.Finished("") {
			switch e.TaskID {
			case fit:
				sawFit = e.Outcome == slotstate.Done
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

// TestContractHolderStates, on both backends: a host holds the version its plugin
// records, live and with its plugin named, while it runs, and marks it stopped when it
// closes. (The states themselves: contracts.TestHolderStates.)
func TestContractHolderStates(t *testing.T) {
	onBothBackends(t, func(t *testing.T, r *rig) {
		ctx := context.Background()
		h := r.jobsHost(t, jobsV1)
		state := func() contracts.Holder {
			t.Helper()
			c, ok, err := contracts.Get(ctx, r.backend, "queue", "jobs")
			if err != nil || !ok || len(c.Versions) != 1 || len(c.Versions[0].Holders) != 1 {
				t.Fatalf("contracts.Get = %+v, %v, %v; want one version with one holder", c, ok, err)
			}
			return c.Versions[0].Holders[0]
		}
		if live := state(); live.State != contracts.HolderLive || len(live.Plugins) != 1 || live.Plugins[0] != "a 0.1.0" {
			t.Fatalf("holder = %+v (%s), want live, held by plugin a 0.1.0", live, live)
		}
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
		if s := state(); s.State != contracts.HolderStopped || len(s.Plugins) != 1 {
			t.Errorf("holder after Close = %+v (%s), want stopped, its plugin kept", s, s)
		}
	})
}

// TestClaimReadsAVersionAddedSince, on both backends, is a rolling upgrade's first
// step: a consumer of "jobs" under version 1 runs; another host records version 2 (an
// added optional "fresh"), and a task of version 2 is pushed at once, before the
// consumer's periodic read of the fleet's versions (contracts.Sync). The consumer, whose
// own schema refuses "fresh", reads the fleet's versions at that claim, finds version 2,
// and hands the task to its plugin (done) rather than parking it.
func TestClaimReadsAVersionAddedSince(t *testing.T) {
	onBothBackends(t, func(t *testing.T, r *rig) {
		ctx := context.Background()
		r.grant("a", consumer("jobs"))
		r.wat("done", "a", batchDescribe("a", "jobs", jobsV1))
		_, _ = r.start()
		r.hostOf(t, "upgraded", batchDescribe("a", "jobs", jobsOptional)) // records version 2, runs nothing
		id := push(t, r.backend, "jobs", `{"site":"new","fresh":true}`)
		// The slot observes the outcome after it settles the task on the backend: wait for
		// the event (or a parked task), not for the queue alone.
		done := func() bool {
			for _, e := range r.events.Finished("") {
				if e.TaskID == id && e.Outcome == slotstate.Done {
					return true
				}
			}
			return false
		}
		waitFor(t, "the version 2 task done or parked", func() bool {
			st, err := r.backend.QueueStats(ctx, "jobs")
			return err == nil && st.Parked > 0 || done()
		})
		if st, err := r.backend.QueueStats(ctx, "jobs"); err != nil || st.Parked != 0 {
			parked, _ := r.backend.QueueParked(ctx, "jobs", 10)
			t.Fatalf("queue jobs = %+v, %v; parked %+v: the task of version 2 was parked, not done", st, err, parked)
		}
		if !done() {
			t.Errorf("events %+v: the task of version 2 was not done by the plugin of version 1", r.events.Finished(""))
		}
	})
}
