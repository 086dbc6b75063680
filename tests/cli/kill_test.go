package cli

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/fleethost/fleet/internal/testutil"
)

// TestKill9 runs two daemons on one Redis, kills one with SIGKILL while its slots hold
// tasks, and checks that the survivor completes them once their leases expire: every
// task done and acknowledged (the queue ends empty, nothing parked), none lost, and the
// tasks that ran twice no more than those in flight at the kill.
//
// How executions are counted: the worker guest adds 1 to the fleet counter
// "worker:exec:<task id>" as it starts each task, so after the run every task's counter
// says how many times it ran. A task is acked at most once by construction (an ack
// needs the claim's token, and the task is gone after it); that every task was acked is
// the queue being empty with nothing parked or in flight.
func TestKill9(t *testing.T) {
	const (
		tasks  = 60
		holdMs = 300
		slots  = 3
	)
	srv := testutil.NewRedis(t)
	dir := pluginsDir(t, workerPkg)
	// The lease is the shortest the host allows, 1s, renewed while each call runs: the
	// victim's tasks are claimable again within a second of the kill.
	args := []string{"--plugins", dir, "--redis", srv.URL(), "--slots", "3", "--poll-interval", "20ms",
		"--task-lease", "1s", "--call-timeout", "2s", "--drain-timeout", "20s"}
	victim := startDaemon(t, nil, args...)
	survivor := startDaemon(t, nil, args...)
	b := openRedis(t, srv)
	ids := submitWork(t, victim, tasks, holdMs)

	// Kill the victim once it has done some work and all its slots hold a task.
	testutil.WaitFor(t, 60*time.Second, "the victim's slots all working, after some tasks done", func() bool {
		return victim.working() == slots && testutil.Counter(t, b, "worker:done") >= 2*slots
	})
	if err := victim.cmd.Process.Kill(); err != nil { // SIGKILL: no drain, no release
		t.Fatal(err)
	}
	victim.wait(10 * time.Second)
	atKill, err := b.QueueStats(context.Background(), "work")
	if err != nil {
		t.Fatal(err)
	}
	if atKill.InFlight == 0 {
		t.Fatalf("no task in flight at the kill (%+v): nothing to prove", atKill)
	}

	// The survivor takes the victim's tasks back when their leases expire.
	var q queueStats
	testutil.WaitFor(t, 2*time.Minute, "the survivor finishing every task", func() bool {
		survivor.getJSON("/api/v1/queues/work", "", &q)
		return q.Depth == 0 && q.InFlight == 0
	})
	if q.Parked != 0 {
		t.Errorf("%d tasks parked, want none", q.Parked)
	}
	ranTwice, never, runs := 0, 0, int64(0)
	for _, id := range ids {
		n := testutil.Counter(t, b, "worker:exec:"+id)
		runs += n
		switch {
		case n == 0:
			never++
		case n == 2:
			ranTwice++
		case n > 2:
			t.Errorf("task %s ran %d times", id, n)
		}
	}
	if never != 0 {
		t.Errorf("%d tasks never ran", never)
	}
	// In flight at the kill counts the survivor's own tasks too, which it finishes
	// without a second run; the victim held at most its slots.
	if ranTwice > atKill.InFlight || ranTwice > slots {
		t.Errorf("%d tasks ran twice; want at most the %d in flight at the kill, and at most the victim's %d slots", ranTwice, atKill.InFlight, slots)
	}
	// worker:execs is added to just after the task's own counter, by a second host call:
	// a kill between the two loses at most one per slot of the victim.
	execs, done := testutil.Counter(t, b, "worker:execs"), testutil.Counter(t, b, "worker:done")
	if execs > runs || execs < runs-slots {
		t.Errorf("worker:execs = %d, want the %d runs the tasks counted (%d tasks + %d second runs), less at most the victim's %d slots", execs, runs, tasks, ranTwice, slots)
	}
	t.Logf("kill -9: %d tasks; in flight at the kill %d (both hosts; the victim had %d slots); ran twice %d; executions %d; handlers completed %d; parked %d",
		tasks, atKill.InFlight, slots, ranTwice, execs, done, q.Parked)

	survivor.signal(syscall.SIGTERM)
	if code := survivor.wait(40 * time.Second); code != 0 {
		t.Errorf("survivor's exit code after SIGTERM = %d, want 0", code)
	}
}
