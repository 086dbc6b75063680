package cli

import (
	"context"
	"testing"
	"time"

	"github.com/fleethost/fleet/internal/testutil"
)

// TestCluster runs the daemon on a real 3-master Redis Cluster, named by a
// redis+cluster:// URL as an operator writes it: doctor finds the backend, and every
// task submitted through the API runs exactly once, its queue, counters, locks and the
// recorded contracts spread over the cluster's nodes.
func TestCluster(t *testing.T) {
	const tasks = 20
	rc := testutil.NewRedisCluster(t)
	dir := pluginsDir(t, workerPkg)

	code, out, _ := run(t, nil, "", "doctor", "--cache-dir="+cacheDir, "--grants="+grantsFile(t), "--plugins", dir, "--redis", rc.URL())
	if code != 0 || doctorLine(out, "ok", "backend") == "" {
		t.Fatalf("doctor on %s = exit %d, want 0 and an ok backend line:\n%s", rc.URL(), code, out)
	}

	d := startDaemon(t, nil, "--plugins", dir, "--redis", rc.URL(), "--slots", "2", "--poll-interval", "20ms")
	ids := submitWork(t, d, tasks, 20) // hold_ms 20: each task takes and waits on a lock
	b := openRedis(t, rc)
	var q queueStats
	testutil.WaitFor(t, time.Minute, "every task done", func() bool {
		d.getJSON("/api/v1/queues/work", "", &q)
		return testutil.Counter(t, b, "worker:done") == tasks && q.Depth == 0 && q.InFlight == 0
	})
	if q.Parked != 0 {
		t.Errorf("%d tasks parked, want none", q.Parked)
	}
	for _, id := range ids {
		if n := testutil.Counter(t, b, "worker:exec:"+id); n != 1 {
			t.Errorf("task %s ran %d times, want 1", id, n)
		}
	}

	// The fleet's keys are on more than one node, so the run crossed nodes.
	holding := 0
	for _, n := range rc.Nodes {
		c := n.Client()
		keys, err := c.Keys(context.Background(), "fleet:*").Result()
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) > 0 {
			holding++
		}
		t.Logf("node %s: %d keys", n.Addr, len(keys))
	}
	if holding < 2 {
		t.Errorf("the fleet's keys are on %d of the cluster's nodes, want at least 2", holding)
	}
}
