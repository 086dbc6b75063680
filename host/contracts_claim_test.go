package host_test

import (
	"context"
	"strings"
	"testing"
	"time"

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

// TestContractHolderStates, on both backends: a holder is live while its host runs (with
// its plugin named), stale once its key says it has not refreshed for 3 ContractSync (a
// dead host; a key in the bare-time form of older hosts is read too), and stopped once
// its host has closed; a forget's use names only the live one as blocking.
func TestContractHolderStates(t *testing.T) {
	onBothBackends(t, func(t *testing.T, r *rig) {
		ctx := context.Background()
		h := r.jobsHost(t, jobsV1)
		state := func() host.ContractHolder {
			t.Helper()
			c, ok, err := host.FleetContract(ctx, r.backend, "queue", "jobs")
			if err != nil || !ok || len(c.Versions) != 1 || len(c.Versions[0].Holders) != 1 {
				t.Fatalf("FleetContract = %+v, %v, %v; want one version with one holder", c, ok, err)
			}
			return c.Versions[0].Holders[0]
		}
		live := state()
		if live.State != host.HolderLive || len(live.Plugins) != 1 || live.Plugins[0] != "a 0.1.0" || !strings.Contains(live.String(), "(plugin a 0.1.0, live, refreshed") {
			t.Fatalf("holder = %+v (%s), want live, held by plugin a 0.1.0", live, live)
		}
		use, err := host.ContractVersionUse(ctx, r.backend, "queue", "jobs", 1)
		if err != nil || len(use.Live()) != 1 || !strings.Contains(use.Blocks(), live.Holder) {
			t.Fatalf("ContractVersionUse = %+v, %v; want it blocked by %s", use, err, live.Holder)
		}
		key := "held:queue:jobs:1:" + live.Holder
		old, _ := time.Now().Add(-3*host.ContractSync - time.Second).UTC().MarshalText()
		if err := r.backend.KVSet(ctx, "fleet-contracts", key, old, time.Minute, primitives.KVQuota{}); err != nil {
			t.Fatal(err)
		}
		if s := state(); s.State != host.HolderStale || !strings.Contains(s.String(), "stale: not refreshed for") {
			t.Errorf("holder with an old bare-time key = %+v (%s), want stale", s, s)
		}
		if use, err := host.ContractVersionUse(ctx, r.backend, "queue", "jobs", 1); err != nil || use.Blocks() != "" {
			t.Errorf("ContractVersionUse with a stale holder and no task = %q, %v; want nothing blocking", use.Blocks(), err)
		}
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
		if s := state(); s.State != host.HolderStopped || len(s.Plugins) != 1 || !strings.Contains(s.String(), "stopped") {
			t.Errorf("holder after Close = %+v (%s), want stopped, its plugin kept", s, s)
		}
	})
}

// TestClaimReadsAVersionAddedSince, on both backends, is a rolling upgrade's first
// step: a consumer of "jobs" under version 1 runs; another host records version 2 (an
// added optional "fresh"), and a task of version 2 is pushed at once, before the
// consumer's periodic read of the fleet's versions (ContractSync). The consumer, whose
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
		waitFor(t, "the version 2 task released", func() bool {
			st, err := r.backend.QueueStats(ctx, "jobs")
			return err == nil && st.Depth == 0 && st.InFlight == 0
		})
		if st, err := r.backend.QueueStats(ctx, "jobs"); err != nil || st.Parked != 0 {
			parked, _ := r.backend.QueueParked(ctx, "jobs", 10)
			t.Fatalf("queue jobs = %+v, %v; parked %+v: the task of version 2 was parked, not done", st, err, parked)
		}
		var done bool
		for _, e := range r.events.finished() {
			done = done || (e.TaskID == id && e.Outcome == slotstate.Done)
		}
		if !done {
			t.Errorf("events %+v: the task of version 2 was not done by the plugin of version 1", r.events.finished())
		}
	})
}
